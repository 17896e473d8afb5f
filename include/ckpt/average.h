#pragma once
// Checkpoint averaging: the per-tensor mean of several checkpoints of one
// model, in any format (as i6_core's AverageTorchCheckpointsJob and
// fairseq's scripts/average_checkpoints.py average the last or best epochs
// of a run).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/run_directory.h"
#include "ckpt/tree.h"

namespace ckpt {

// One checkpoint to average: what ckpt::load opens, and the step and epoch
// it is known by (recorded in the result; unknown for a bare path).
struct AverageInput {
  std::filesystem::path path;
  // A state saved in parts (CheckpointEntry::parts): every part, `path`
  // first; the state averaged is their union. Empty: `path` alone.
  std::vector<std::filesystem::path> parts;
  std::optional<int64_t> step;
  std::optional<int64_t> epoch;
};

struct AverageOptions {
  // Called after each tensor with (tensors done, tensors in all); for a
  // progress line. Null: none.
  std::function<void(size_t done, size_t total)> progress;
  // Threads for the casts; 0 picks min(hardware threads, 4).
  unsigned threads = 0;
};

// The metadata key under which the result records what it merged.
inline constexpr const char* kAveragedFromKey = "ckpt.averaged_from";

struct AverageResult {
  // The newest input's tree (the last of `inputs`) with each floating-point
  // tensor replaced by the element-wise mean over all inputs.
  Tree tree;
  // {kAveragedFromKey: JSON [{"path": str, "step": int | null,
  // "epoch": int | null}...]} in input order, for SaveOptions::metadata.
  Metadata metadata;
};

// Averages `inputs` (oldest first; at least one). Every input must hold the
// same tensor names with the same dtypes and shapes. Floating-point tensors
// (float16, bfloat16, float32, float64, the float8s) are summed in float64
// and the sum divided by the count, then cast back to their dtype (round to
// nearest even); complex tensors likewise in complex128. Integer, bool and
// float4_e2m1fn_x2 tensors and every non-tensor leaf (an epoch counter, a
// step) are the newest input's. Inputs are opened lazily and averaged one
// tensor at a time: beside the result, memory holds one tensor's float64
// sum and one input tensor as float64. Leaves that share one tensor in the
// newest input (tied weights) are averaged each and come out untied.
// Throws Error{kInvalidArgument} for no inputs; {kMismatch} naming the
// tensor and both files when a tensor is missing from one input or differs
// in dtype or shape; what ckpt::load throws for an input it cannot read.
AverageResult average_checkpoints(const std::vector<AverageInput>& inputs, const AverageOptions& options = {});

// Which checkpoints of a run directory to average.
struct AverageSelection {
  // The newest `last` checkpoints (0: not this rule).
  size_t last = 0;
  // Else the `best` checkpoints by `metric` (0: not this rule); lower is
  // better unless `maximize`. Checkpoints without the metric (or with NaN)
  // are passed over.
  size_t best = 0;
  std::string metric;
  bool maximize = false;
};

// The inputs `selection` picks from `listing`, oldest first (the listing's
// order, so that the newest of them gives the non-tensor leaves).
// Throws Error{kInvalidArgument} if both or neither of last and best are
// set, best without a metric; {kNotFound} if the listing holds no
// checkpoint, or none with the metric.
std::vector<AverageInput> select_for_average(const RunListing& listing, const AverageSelection& selection);

}  // namespace ckpt
