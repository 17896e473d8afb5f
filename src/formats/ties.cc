// find_ties (ties.h): leaves grouped by where their bytes are, in one pass.

#include "formats/ties.h"

#include <functional>
#include <unordered_map>

namespace ckpt::detail {
namespace {

// Where same_memory tensors are: the same address (or, not materialized, the
// same storage) and size.
struct MemoryKey {
  const void* where;
  size_t size;
  bool deferred;
  bool operator==(const MemoryKey&) const = default;
};

struct MemoryKeyHash {
  size_t operator()(const MemoryKey& key) const noexcept {
    return std::hash<const void*>{}(key.where) ^ (key.size * 0x9e3779b97f4a7c15ull) ^ size_t{key.deferred};
  }
};

}  // namespace

std::vector<size_t> find_ties(const std::vector<Tree::Leaf>& leaves) {
  std::vector<size_t> tied_to(leaves.size(), kNotTied);
  std::unordered_multimap<MemoryKey, size_t, MemoryKeyHash> stored_by_memory;
  stored_by_memory.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Tensor& tensor = leaves[i].value->tensor();
    if (tensor.nbytes() == 0) continue;
    const Buffer& buffer = tensor.buffer();
    const MemoryKey key = buffer.deferred() ? MemoryKey{buffer.storage().get(), buffer.size(), true}
                                            : MemoryKey{buffer.address(), buffer.size(), false};
    const auto [begin, end] = stored_by_memory.equal_range(key);
    for (auto candidate = begin; candidate != end; ++candidate) {
      const Tensor& first = leaves[candidate->second].value->tensor();
      if (first.dtype() == tensor.dtype() && first.shape() == tensor.shape() && first.same_memory(tensor)) {
        tied_to[i] = candidate->second;
        break;
      }
    }
    if (tied_to[i] == kNotTied) stored_by_memory.emplace(key, i);
  }
  return tied_to;
}

}  // namespace ckpt::detail
