// prune_run_directory (ckpt/manager.h): one retention pass over a run
// directory, as `ckpt prune` runs it.
#include <memory>

#include "ckpt/error.h"
#include "ckpt/manager.h"
#include "io/deferred_release.h"
#include "io/file_system.h"
#include "manager/run_config.h"
#include "manager/run_files.h"
#include "manager/run_lock.h"

namespace ckpt {

PruneReport prune_run_directory(const std::filesystem::path& run_dir, const PruneOptions& options) {
  for (const RetentionPolicy& policy : options.policies) validate_policy(policy);
  PruneReport report;
  report.listing = list_run_directory(run_dir);
  const bool ours = report.listing.layout == "ckpt";
  if (!ours && report.listing.layout != "empty" && !options.foreign) {
    throw Error(ErrorCode::kInvalidArgument,
                "the run directory holds a " + report.listing.layout +
                    " run, not ckpt's; pass --foreign to prune it (its checkpoints' files are removed)",
                {.path = run_dir});
  }
  std::unique_ptr<detail::RunLock> lock;
  std::vector<RetentionPolicy> policies = options.policies;
  bool tf_state_file = false;
  if (ours) {
    if (!options.dry_run) {
      lock = std::make_unique<detail::RunLock>(run_dir);
      report.listing = list_run_directory(run_dir);  // as it is now that no writer can change it
    }
    const std::optional<detail::RunConfig> config = detail::read_run_config(run_dir);
    if (config) {
      policies = detail::with_kept_forever(policies.empty() ? config->policies : policies, config->keep_forever);
      tf_state_file = config->format == "tf";
    }
  }
  std::vector<CheckpointEntry>& entries = report.listing.checkpoints;
  detail::fill_kept_by(entries, policies);
  const std::vector<size_t> remove = detail::entries_to_remove(entries, !policies.empty());
  for (size_t index : remove) {
    for (const std::filesystem::path& path : entries[index].files) {
      report.removed.push_back(path);
      if (!options.dry_run) detail::remove_committed(path);
    }
  }
  if (options.dry_run || remove.empty()) return report;
  detail::drain_deferred_releases();  // removed means gone when prune returns, not only unlisted
  detail::sync_directory(run_dir, run_dir);
  if (tf_state_file) {
    std::vector<CheckpointEntry> left;
    for (size_t i = 0, next = 0; i < entries.size(); ++i) {
      if (next < remove.size() && remove[next] == i) {
        ++next;
      } else {
        left.push_back(entries[i]);
      }
    }
    detail::write_tf_state_file(run_dir, left, true);
  }
  return report;
}

}  // namespace ckpt
