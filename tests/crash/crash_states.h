#pragma once
// The states the crash, disk-full and concurrency harnesses save: state N is
// a pure function of N, so that whatever a reader finds at a target can be
// checked to be one whole saved state (never a mixture of two).

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "ckpt/tensor.h"
#include "ckpt/tree.h"

namespace ckpt::testing {

// A target of each writable format, as the harnesses save them: the path
// inside a scratch directory, and the format id. TF bundles are a prefix
// (model.ckpt.index + model.ckpt.data-00000-of-00001); Orbax a directory.
struct CrashTarget {
  std::string format;
  std::string name;
};

// For test names and messages: the format id.
inline void PrintTo(const CrashTarget& target, std::ostream* out) { *out << target.format; }

inline std::vector<CrashTarget> crash_targets() {
  return {{"safetensors", "model.safetensors"}, {"torch", "model.pt"}, {"npz", "model.npz"},
          {"tf", "model.ckpt"},                 {"flax", "model.msgpack"}, {"orbax", "orbax_state"},
          {"dcp", "dcp_state"}};
}

// State `step`: "step" holds the number; "weights" (`elements` float32) and
// "bias" are filled from it, so that a tensor of another state is told apart.
inline Tree crash_state(int64_t step, int64_t elements) {
  Tree tree = Tree::map();
  tree.set("step", Tensor::from_values<int64_t>(DType::kInt64, {1}, std::vector<int64_t>{step}));
  Tensor weights = Tensor::empty(DType::kFloat32, {elements});
  auto bytes = weights.mutable_bytes();
  for (int64_t i = 0; i < elements; ++i) {
    const float value = static_cast<float>(step) + static_cast<float>(i % 1000) / 1000.0f;
    std::memcpy(bytes.data() + i * 4, &value, 4);
  }
  tree.set("weights", weights);
  std::vector<float> bias(16, static_cast<float>(-step));
  tree.set("bias", Tensor::from_values<float>(DType::kFloat32, {16}, bias));
  return tree;
}

// The step of a loaded state (-1 if it has none).
inline int64_t crash_step(const Tree& tree) {
  const Tree* step = tree.find("step");
  if (step == nullptr || !step->is_tensor() || step->tensor().nbytes() != 8) return -1;
  int64_t value = 0;
  std::memcpy(&value, step->tensor().bytes().data(), 8);
  return value;
}

// True if `tree` is exactly state crash_step(tree) of `elements`.
inline bool is_whole_crash_state(const Tree& tree, int64_t elements) {
  const int64_t step = crash_step(tree);
  return step >= 0 && tree == crash_state(step, elements);
}

}  // namespace ckpt::testing
