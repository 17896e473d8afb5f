#include "ckpt/run_directory.h"

#include <system_error>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "manager/run_layouts.h"
#include "manager/state_files.h"

namespace ckpt {

RunListing list_run_directory(const std::filesystem::path& run_dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(run_dir, error)) {
    throw Error(ErrorCode::kNotFound, "not a run directory (no such directory)", {.path = run_dir});
  }
  if (std::optional<RunListing> listing = detail::list_ckpt_run(run_dir)) return *std::move(listing);
  if (std::optional<RunListing> listing = detail::list_foreign_run(run_dir)) return *std::move(listing);
  return RunListing{.run_dir = run_dir, .layout = "empty", .checkpoints = {}};
}

Tree load_checkpoint(const CheckpointEntry& entry, const LoadOptions& options) {
  if (entry.parts.empty()) return load(entry.path, options);
  std::vector<Tree> parts;
  parts.reserve(entry.parts.size());
  for (const std::filesystem::path& part : entry.parts) parts.push_back(load(part, options));
  return detail::merge_parts(std::move(parts), entry.parts);
}

}  // namespace ckpt
