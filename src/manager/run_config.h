#pragma once
// RunConfig: what retention needs beyond the checkpoints' own records, kept
// in RUN_DIR/ckpt_manager.json so that a restarted process (or `ckpt prune`,
// or a listing's kept_by) decides exactly what the writer would have: the
// policies, the steps kept forever, and a custom policy's last decision.
// Written atomically (AtomicFile) by the run's one writer.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/retention.h"

namespace ckpt::detail {

inline constexpr std::string_view kRunConfigName = "ckpt_manager.json";
inline constexpr int64_t kRunConfigVersion = 1;
// The writer's lock file (manager.cc), beside the config.
inline constexpr std::string_view kRunLockName = "ckpt_manager.lock";
inline constexpr uint64_t kMaxRunConfigBytes = uint64_t{16} << 20;

struct RunConfig {
  // The configured policies; a CustomPolicy appears without its function,
  // with `last_kept`.
  std::vector<RetentionPolicy> policies;
  // Steps marked to be kept forever (SaveStepOptions::keep_forever and
  // ManagerOptions::keep_steps), sorted; they join the policies as one
  // KeepSteps.
  std::vector<int64_t> keep_forever;
  std::string format;
  // "ckpt" (step directories) or "returnn" (epoch.NNN.pt files beside
  // RETURNN's learning_rates: ManagerOptions::layout). A returnn-layout
  // config makes list_ckpt_run() pass the directory on to the RETURNN lister.
  std::string layout = "ckpt";
  // The returnn layout: the epochs this manager committed (recorded before
  // each commit), with their steps, which RETURNN's names lack. Retention
  // removes no other epoch.
  std::map<int64_t, int64_t> committed_epochs;
};

std::string run_config_json(const RunConfig& config);

// Throws Error{kCorrupt} naming `path` and the field for anything but a
// config this version wrote (an unknown policy kind included).
RunConfig parse_run_config(std::string_view json, const std::filesystem::path& path);

// RUN_DIR/ckpt_manager.json, or nullopt where there is none.
// Throws Error{kCorrupt} as parse_run_config, {kIo}.
std::optional<RunConfig> read_run_config(const std::filesystem::path& run_dir);

// Commits `config` to RUN_DIR/ckpt_manager.json (AtomicFile, synced).
void write_run_config(const std::filesystem::path& run_dir, const RunConfig& config);

// `policies` plus one KeepSteps of `keep_forever` (when there are any): the
// one place the forever marks join the policies.
std::vector<RetentionPolicy> with_kept_forever(std::vector<RetentionPolicy> policies,
                                               const std::vector<int64_t>& keep_forever);

// The policies retention applies for `config`: with_kept_forever of its own.
std::vector<RetentionPolicy> effective_policies(const RunConfig& config);

// Fills each entry's kept_by (entries oldest first) from `policies`
// (retention_kept_by), and marks the newest entry "newest" when there is any
// policy: the newest committed checkpoint is never deleted (a run resumes
// from it). With no policy every kept_by stays empty and nothing is deleted.
void fill_kept_by(std::vector<CheckpointEntry>& entries, const std::vector<RetentionPolicy>& policies);

}  // namespace ckpt::detail
