#pragma once
// Retention policies: which checkpoints of a run directory to keep. Each
// policy is a small value that answers "keep this one?" from the list of
// checkpoints and their metrics, with no I/O (as Orbax's
// preservation_policy.py has them); the manager (manager.h) and `ckpt prune`
// alone delete. A checkpoint is kept if ANY policy keeps it; with no policy
// nothing is deleted. The rules, RETURNN's included, are in docs/manager.md.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ckpt/run_directory.h"

namespace ckpt {

// Whether a lower or a higher value of a metric is better.
enum class MetricMode { kMin, kMax };

// "min" / "max".
std::string_view metric_mode_name(MetricMode mode);
// The mode named "min" or "max". Throws Error{kInvalidArgument} for any other text.
MetricMode metric_mode_from_name(std::string_view name);

// The `n` newest checkpoints (by step, else epoch).
struct KeepLast {
  int64_t n = 1;
};

// The `n` best checkpoints by `metric`; ties go to the newer checkpoint.
// A checkpoint lacking the metric (or whose value is NaN) is not ranked: it
// is kept when `keep_missing_metric`, else left to the other policies.
struct KeepBest {
  int64_t n = 1;
  std::string metric;
  MetricMode mode = MetricMode::kMin;
  bool keep_missing_metric = true;
};

// Every checkpoint whose step is a multiple of `steps` (Orbax's EveryNSteps).
struct KeepEverySteps {
  int64_t steps = 1;
};

// One checkpoint per `seconds` of wall time (TensorFlow's
// keep_checkpoint_every_n_hours): the oldest, then each whose time is at
// least `seconds` after the last one this policy kept.
struct KeepEverySeconds {
  double seconds = 3600;
};

// These steps, forever.
struct KeepSteps {
  std::vector<int64_t> steps;
};

// RETURNN's cleanup_old_models (returnn/torch/engine.py, returnn/tf/engine.py),
// over the checkpoints' epochs (their steps where they have no epoch) and
// every metric they carry ("scores": lower is better, each key ranked on its
// own, a checkpoint lacking a key counts as that key's worst value, a key
// with one value throughout is ignored, ties go to the older epoch):
//   * fewer than max(keep_last_n, keep_best_n) + 1 checkpoints: keep all;
//   * the last keep_last_n epochs;
//   * the keep_best_n best of each score key;
//   * `keep` (the epochs to keep), or where it is unset RETURNN's default
//     pattern by the last epoch E: every k-th epoch and d·2^i, with (k, d) =
//     (4, 5) for E <= 10, (20, 5) for E <= 50, (40, 10) for E <= 100, else
//     (80 · next_power_of_two(1 + E / 240), 20).
// With `dry_run`, the policy keeps everything (RETURNN deletes nothing);
// what it would not have kept carries the name "returnn(dry run)".
struct ReturnnPolicy {
  int64_t keep_last_n = 2;
  int64_t keep_best_n = 4;
  std::optional<std::vector<int64_t>> keep;
  bool dry_run = false;
};

// A caller's rule: given the checkpoints (oldest first, metrics included),
// returns the steps to keep. Not persisted (a function): the manager records
// the steps it last kept (ckpt_manager.json), which is what `ckpt prune` and a
// listing use for it; a restarted manager passes it again.
using KeepFunction = std::function<std::vector<int64_t>(const std::vector<CheckpointEntry>& checkpoints)>;
struct CustomPolicy {
  KeepFunction keep;
  // Steps it kept when it was last run (filled from ckpt_manager.json when
  // `keep` is empty: the decision of the process that had the function).
  std::vector<int64_t> last_kept;
};

using RetentionPolicy =
    std::variant<KeepLast, KeepBest, KeepEverySteps, KeepEverySeconds, KeepSteps, ReturnnPolicy, CustomPolicy>;

// The name a policy gives the checkpoints it keeps (CheckpointEntry::kept_by):
// "keep_last(3)", "keep_best(2, dev_loss, min)", "keep_every_steps(100)",
// "keep_every_seconds(3600)", "keep_steps", "custom"; RETURNN's give the rule
// that keeps it: "returnn(last 2)", "returnn(best 4 dev_score)",
// "returnn(keep)", "returnn(fewer than 5)", "returnn(dry run)".
std::string policy_name(const RetentionPolicy& policy);

// Which policies keep each of `checkpoints` (oldest first): one list of names
// per checkpoint, in the order of `policies`, a policy's name at most once
// per checkpoint. Pure: no I/O, no clock. A checkpoint whose list is empty is
// one the policies let go (there is at least one policy).
// Throws Error{kInvalidArgument} for a policy with a count below its minimum
// (KeepLast n < 0, KeepBest n < 0 or an empty metric, KeepEverySteps or
// KeepEverySeconds <= 0, ReturnnPolicy keep_last_n < 1 or keep_best_n < 0).
std::vector<std::vector<std::string>> retention_kept_by(const std::vector<CheckpointEntry>& checkpoints,
                                                        const std::vector<RetentionPolicy>& policies);

// Throws the Error retention_kept_by() would for `policy`; returns otherwise.
void validate_policy(const RetentionPolicy& policy);

}  // namespace ckpt
