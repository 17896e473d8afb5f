#pragma once
// Deterministic pseudo-random tensors for tests: every bit pattern (NaN
// payloads, subnormals, negative zero) is exercised, not only "nice" values;
// bool tensors hold 0 or 1.

#include <random>

#include "ckpt/tensor.h"

namespace ckpt::testing {

inline Tensor random_tensor(DType dtype, Shape shape, uint32_t seed) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  std::mt19937 random(seed);
  for (std::byte& b : tensor.mutable_bytes()) b = static_cast<std::byte>(random());
  if (dtype == DType::kBool) {
    for (std::byte& b : tensor.mutable_bytes()) b = static_cast<std::byte>(static_cast<int>(b) & 1);
  }
  return tensor;
}

}  // namespace ckpt::testing
