// listing_document (ckpt/run_directory.h): a run directory's listing as a
// document, the one rendering that `ckpt ls --json` and Python share.

#include "ckpt/run_directory.h"

namespace ckpt {
namespace {

Tree optional_integer(const std::optional<int64_t>& value) { return value ? Tree(*value) : Tree(); }

}  // namespace

Tree listing_document(const RunListing& listing) {
  Tree checkpoints = Tree::list();
  checkpoints.reserve(listing.checkpoints.size());
  for (const CheckpointEntry& entry : listing.checkpoints) {
    Tree metrics = Tree::map();
    for (const auto& [name, value] : entry.metrics) metrics.set(name, Tree(value));
    Tree kept_by = Tree::list();
    for (const std::string& policy : entry.kept_by) kept_by.push_back(Tree(policy));
    Tree item = Tree::map();
    item.set(std::string("step"), optional_integer(entry.step));
    item.set(std::string("epoch"), optional_integer(entry.epoch));
    item.set(std::string("metrics"), std::move(metrics));
    item.set(std::string("path"), Tree(entry.path.string()));
    item.set(std::string("size"), Tree(static_cast<int64_t>(entry.size)));
    item.set(std::string("time"), Tree(entry.time));
    item.set(std::string("kept_by"), std::move(kept_by));
    if (!entry.parts.empty()) {
      Tree parts = Tree::list();
      for (const std::filesystem::path& part : entry.parts) parts.push_back(Tree(part.string()));
      item.set(std::string("parts"), std::move(parts));
    }
    checkpoints.push_back(std::move(item));
  }
  Tree document = Tree::map();
  document.set(std::string("run_dir"), Tree(listing.run_dir.string()));
  document.set(std::string("layout"), Tree(listing.layout));
  document.set(std::string("checkpoints"), std::move(checkpoints));
  return document;
}

}  // namespace ckpt
