// convert (include/ckpt/convert.h): the one conversion that the CLI, the
// Python package and programs share.

#include "ckpt/convert.h"

#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "io/atomic_file.h"
#include "io/progress.h"

namespace ckpt {
namespace {

// Conversions of fewer tensor bytes than this draw no progress bar.
constexpr uint64_t kProgressFrom = uint64_t{256} << 20;

std::string writable_format_ids() {
  std::string ids;
  for (const Format* format : formats()) {
    if (!format->capabilities().write) continue;
    if (!ids.empty()) ids += ", ";
    ids += format->id();
  }
  return ids;
}

// options.save.format, else the one `dst`'s extension names; checked
// against what the options ask of it.
const Format& target_format(const std::filesystem::path& dst, const ConvertOptions& options) {
  const Format* format = nullptr;
  if (!options.save.format.empty()) {
    format = &naming_file(dst, [&]() -> const Format& { return format_by_id(options.save.format); });
  } else {
    format = format_for_extension(dst);
  }
  if (format == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot tell the target format from the file name; name it (--to, to=): one of " +
                    writable_format_ids())
        .with_path(dst);
  }
  if (!format->capabilities().write) {
    throw Error(ErrorCode::kUnsupported, "ckpt cannot write format '" + std::string(format->id()) + "'")
        .with_path(dst);
  }
  if (options.save.max_shard_bytes > 0 && !format->capabilities().shards) {
    throw Error(ErrorCode::kInvalidArgument,
                "a maximum shard size (--max-shard-size, max_shard_bytes) applies to formats written in data "
                "shards; '" + std::string(format->id()) + "' writes one file")
        .with_path(dst);
  }
  return *format;
}

}  // namespace

ConvertReport convert(const std::filesystem::path& src, const std::filesystem::path& dst,
                      const ConvertOptions& options) {
  const Format& format = target_format(dst, options);
  SaveOptions save = options.save;
  save.format = std::string(format.id());

  const Contents contents = open(src);  // its errors name `src`, save()'s name `dst`
  ConvertReport report;
  report.source_format = contents.format;
  report.target_format = save.format;
  report.tensors = contents.entries.size();
  for (const EntryInfo& entry : contents.entries) report.nbytes += entry.nbytes;

  // The tree to write: the source's, renamed and thinned by the transforms.
  Tree transformed;
  if (!options.rename.empty()) {
    transformed = naming_file(src, [&] {
      for (const Tree::Leaf& leaf : contents.tree.leaves()) {
        const std::optional<std::string> name = options.rename.apply(leaf.name);
        if (!name) ++report.removed;
        if (name && *name != leaf.name) ++report.renamed;
      }
      return options.rename.apply(contents.tree);
    });
  }
  const Tree& renamed = options.rename.empty() ? contents.tree : transformed;
  Tree rewritten;
  if (options.rewrite) rewritten = naming_file(src, [&] { return options.rewrite(renamed); });
  const Tree& tree = options.rewrite ? rewritten : renamed;
  if (save.metadata.empty() && format.capabilities().metadata) save.metadata = contents.metadata;

  // Long conversions draw a bar from what the writers have written.
  const uint64_t written_before = detail::bytes_written();
  const detail::ProgressWatch progress(
      "convert " + dst.filename().string(),
      report.nbytes >= kProgressFrom && detail::progress_enabled(options.progress), report.nbytes,
      [&] { return detail::bytes_written() - written_before; });

  // The target's writer knows what it holds (a TF bundle without extras
  // keeps strings and bytes; torch and flax files keep everything). What
  // keeps ckpt's tree is written as is, errors and all.
  const bool keeps_tree = format.capabilities().nested_tree && save.extras;
  std::string refusal;
  try {
    ckpt::save(dst, tree, save);
    // What was written, as a reader tells it: a writer may pick a layout of
    // its own (safetensors with a maximum shard size: hf_sharded).
    if (save.max_shard_bytes > 0) report.target_format = std::string(detect(dst).id());
    return report;
  } catch (const Error& error) {
    // A refusal that names a tensor (a dtype the target lacks) stands as it
    // is: writing the tensors alone would meet it again.
    const Tree* refused = error.context().entry.empty() ? nullptr : tree.find_path(error.context().entry);
    if (keeps_tree || error.code() != ErrorCode::kUnsupported || (refused && refused->is_tensor())) throw;
    refusal = error.message();
  }
  // It does not hold the tree: the tensors alone, under their dotted names.
  // Non-tensor values are never lost silently.
  Tree flat = Tree::map();
  for (const Tree::Leaf& leaf : tree.leaves()) {
    if (leaf.value->is_tensor()) {
      flat.set(leaf.name, *leaf.value);
    } else {
      report.dropped.push_back(leaf.name);
    }
  }
  if (!report.dropped.empty() && !options.drop_unsupported) {
    throw Error(ErrorCode::kUnsupported,
                save.format + (save.extras ? "" : " without extras") + " cannot hold the tree's " +
                    std::to_string(report.dropped.size()) + " non-tensor values (the first, '" +
                    report.dropped.front() + "': " + refusal +
                    "); they would be lost: pass --drop-unsupported (Python: drop_unsupported=True) to write "
                    "the tensors alone")
        .with_path(dst);
  }
  ckpt::save(dst, flat, save);
  return report;
}

}  // namespace ckpt
