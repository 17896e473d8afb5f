#pragma once
// Tied tensors (the same bytes under two names: tied embeddings) found
// among a tree's leaves, for the writers that store them once (safetensors
// and npz record the other names as aliases; torch shares storages).

#include <cstddef>
#include <limits>
#include <vector>

#include "ckpt/tree.h"

namespace ckpt::detail {

inline constexpr size_t kNotTied = std::numeric_limits<size_t>::max();

// For each leaf (all tensors), the index of the first earlier leaf it is tied
// to (Tensor::same_memory, same dtype and shape), or kNotTied. Tensors of no
// bytes are never tied; a reshaped or retyped view of the same bytes, or a
// partial overlap, is not tied either (it is stored as its own copy).
std::vector<size_t> find_ties(const std::vector<Tree::Leaf>& leaves);

}  // namespace ckpt::detail
