// average_checkpoints and select_for_average (ckpt/average.h).

#include "ckpt/average.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <cstdint>
#include <cstring>
#include <map>
#include <string_view>

#include "ckpt/cast.h"
#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/retention.h"
#include "core/json_writer.h"
#include "core/text.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

// The dtype a tensor's values are summed in: float64 for the floats that
// cast() converts, complex128 for complex; nullopt for tensors taken from
// the newest input (integers, bool, packed float4).
std::optional<DType> accumulator_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0FNU: return DType::kFloat64;
    case DType::kComplex64:
    case DType::kComplex128: return DType::kComplex128;
    default: return std::nullopt;
  }
}

// name -> tensor leaf, for one input.
std::map<std::string, const Tree*> tensors_by_name(const Tree& tree) {
  std::map<std::string, const Tree*> tensors;
  tree.for_each_tensor_leaf([&](std::string_view name, const Tree& leaf) { tensors.emplace(name, &leaf); });
  return tensors;
}

[[noreturn]] void mismatch(const std::string& name, const std::string& message, const fs::path& a, const fs::path& b) {
  throw Error(ErrorCode::kMismatch,
              "cannot average: " + message + " in " + a.string() + " and " + b.string(), {.path = a, .entry = name});
}

// Adds `tensor`'s values, as float64 (complex128: two float64 each), into
// `sum`, a heap tensor of the accumulator dtype and `tensor`'s shape.
void add_into(Tensor& sum, const Tensor& tensor, DType accumulator, unsigned threads) {
  Tensor wide = cast(tensor, accumulator, threads);
  // A float64 input is returned as it is, possibly unaligned in its file
  // (msgpack): read it through an aligned copy.
  if (reinterpret_cast<uintptr_t>(wide.bytes().data()) % alignof(double) != 0) wide = wide.copy();
  const std::span<const std::byte> bytes = wide.bytes();
  const size_t count = bytes.size() / sizeof(double);
  const double* values = reinterpret_cast<const double*>(bytes.data());
  double* total = reinterpret_cast<double*>(sum.mutable_bytes().data());
  for (size_t i = 0; i < count; ++i) total[i] += values[i];
}

std::string averaged_from_json(const std::vector<AverageInput>& inputs) {
  detail::JsonWriter json;
  json.begin_array();
  for (const AverageInput& input : inputs) {
    json.begin_object();
    json.key("path");
    json.string(input.path.string());
    json.key("step");
    input.step ? json.integer(*input.step) : json.null();
    json.key("epoch");
    input.epoch ? json.integer(*input.epoch) : json.null();
    json.end_object();
  }
  json.end_array();
  return json.take();
}

}  // namespace

AverageResult average_checkpoints(const std::vector<AverageInput>& inputs, const AverageOptions& options) {
  if (inputs.empty()) throw Error(ErrorCode::kInvalidArgument, "average: no checkpoints given");
  std::vector<Tree> trees;
  trees.reserve(inputs.size());
  for (const AverageInput& input : inputs) {
    trees.push_back(naming_file(input.path, [&] {
      return load_checkpoint(CheckpointEntry{.path = input.path, .parts = input.parts}, {});
    }));
  }
  const fs::path& newest_path = inputs.back().path;
  const Tree& newest = trees.back();
  std::vector<std::map<std::string, const Tree*>> tensors;
  tensors.reserve(trees.size());
  for (const Tree& tree : trees) tensors.push_back(tensors_by_name(tree));
  const auto& names = tensors.back();

  // Every input holds the newest's tensors, and nothing else, alike.
  for (size_t k = 0; k + 1 < inputs.size(); ++k) {
    for (const auto& [name, leaf] : names) {
      const auto found = tensors[k].find(name);
      if (found == tensors[k].end()) mismatch(name, "tensor missing", inputs[k].path, newest_path);
      const Tensor& a = found->second->tensor();
      const Tensor& b = leaf->tensor();
      if (a.dtype() != b.dtype()) {
        mismatch(name, "dtype " + std::string(dtype_name(a.dtype())) + " vs " + std::string(dtype_name(b.dtype())),
                 inputs[k].path, newest_path);
      }
      if (a.shape() != b.shape()) {
        mismatch(name, "shape " + shape_text(a.shape()) + " vs " + shape_text(b.shape()), inputs[k].path, newest_path);
      }
    }
    for (const auto& [name, leaf] : tensors[k]) {
      if (!names.contains(name)) mismatch(name, "tensor missing", newest_path, inputs[k].path);
    }
  }

  // One tensor at a time, in the newest tree's leaf order: the averaged
  // tensors replace its tensors in that same order.
  std::vector<Tensor> averaged;
  std::vector<std::string> order;
  newest.for_each_tensor_leaf([&](std::string_view name, const Tree&) { order.emplace_back(name); });
  averaged.reserve(order.size());
  const double count = static_cast<double>(inputs.size());
  for (size_t t = 0; t < order.size(); ++t) {
    const Tensor& last = names.at(order[t])->tensor();
    const std::optional<DType> accumulator = accumulator_dtype(last.dtype());
    if (!accumulator || inputs.size() == 1) {
      averaged.push_back(last);
    } else {
      Tensor sum = Tensor::zeros(*accumulator, last.shape());
      for (size_t k = 0; k < inputs.size(); ++k) {
        try {
          add_into(sum, tensors[k].at(order[t])->tensor(), *accumulator, options.threads);
        } catch (Error& error) {
          error.with_path(inputs[k].path).with_entry(order[t]);
          throw;
        }
      }
      double* total = reinterpret_cast<double*>(sum.mutable_bytes().data());
      for (size_t i = 0; i < sum.nbytes() / sizeof(double); ++i) total[i] /= count;
      const Tensor& mean = sum;
      averaged.push_back(cast(mean, last.dtype(), options.threads));
    }
    if (options.progress) options.progress(t + 1, order.size());
  }

  AverageResult result;
  result.tree = newest;
  size_t position = 0;
  result.tree.for_each_tensor([&](Tensor& tensor) { tensor = averaged.at(position++); });
  result.metadata[kAveragedFromKey] = averaged_from_json(inputs);
  return result;
}

std::vector<AverageInput> select_for_average(const RunListing& listing, const AverageSelection& selection) {
  if ((selection.last > 0) == (selection.best > 0)) {
    throw Error(ErrorCode::kInvalidArgument, "average: choose either the last N or the best K checkpoints");
  }
  if (selection.best > 0 && selection.metric.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "average: the best K checkpoints need a metric");
  }
  if (listing.checkpoints.empty()) {
    throw Error(ErrorCode::kNotFound, "average: the run directory holds no checkpoint", {.path = listing.run_dir});
  }
  // The retention policy of the same name chooses (one home for "last N" and
  // "best K": ties to the newer checkpoint, missing or NaN values not ranked).
  RetentionPolicy policy = KeepLast{.n = static_cast<int64_t>(selection.last)};
  if (selection.best > 0) {
    policy = KeepBest{.n = static_cast<int64_t>(selection.best), .metric = selection.metric,
                      .mode = selection.maximize ? MetricMode::kMax : MetricMode::kMin,
                      .keep_missing_metric = false};
  }
  const std::vector<std::vector<std::string>> kept_by = retention_kept_by(listing.checkpoints, {policy});
  std::vector<size_t> chosen;  // positions in the listing
  for (size_t i = 0; i < kept_by.size(); ++i) {
    if (!kept_by[i].empty()) chosen.push_back(i);
  }
  if (chosen.empty()) {
    throw Error(ErrorCode::kNotFound,
                "average: no checkpoint of the run directory records the metric " + detail::quoted(selection.metric),
                {.path = listing.run_dir});
  }
  std::vector<AverageInput> inputs;
  for (size_t i : chosen) {
    const CheckpointEntry& entry = listing.checkpoints[i];
    inputs.push_back({.path = entry.path, .parts = entry.parts, .step = entry.step, .epoch = entry.epoch});
  }
  return inputs;
}

}  // namespace ckpt
