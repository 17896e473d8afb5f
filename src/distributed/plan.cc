#include "distributed/plan.h"

#include <set>
#include <tuple>
#include <utility>

#include "ckpt/error.h"
#include "distributed/wire.h"

namespace ckpt::distributed_detail {
namespace {

[[noreturn]] void invalid(const std::string& message, const std::string& entry) {
  throw Error(ErrorCode::kInvalidArgument, message, {.entry = entry});
}

}  // namespace

std::vector<HeldBox> held_boxes(const Tree& local_tree, const std::map<std::string, ShardSpec>& shards) {
  std::vector<HeldBox> held;
  std::set<std::string> found;
  for (const Tree::Leaf& leaf : local_tree.tensor_leaves()) {
    const Tensor& tensor = leaf.value->tensor();
    HeldBox box{.name = leaf.name, .dtype = tensor.dtype(), .global_shape = tensor.shape(),
                .box = whole_box(tensor.shape()), .sharded = false};
    const auto spec = shards.find(leaf.name);
    if (spec != shards.end()) {
      found.insert(leaf.name);
      if (spec->second.global_shape.size() != tensor.shape().size() ||
          spec->second.offsets.size() != tensor.shape().size()) {
        invalid("the shard's global shape and offsets must have as many dimensions as its local tensor (" +
                    std::to_string(tensor.shape().size()) + ")",
                leaf.name);
      }
      box.global_shape = spec->second.global_shape;
      box.box = Box{.offsets = spec->second.offsets, .sizes = tensor.shape()};
      box.sharded = true;
      check_box(box.box, box.global_shape, {.entry = leaf.name});
    }
    held.push_back(std::move(box));
  }
  for (const auto& [name, spec] : shards) {
    if (!found.count(name)) invalid("a shard is given for a name that is no tensor leaf of the tree", name);
  }
  return held;
}

std::string encode_held(const std::vector<HeldBox>& held) {
  Encoder out;
  out.u64(held.size());
  for (const HeldBox& box : held) {
    out.string(box.name);
    out.string(dtype_name(box.dtype));
    out.i64s(box.global_shape);
    out.i64s(box.box.offsets);
    out.i64s(box.box.sizes);
    out.u64(box.sharded ? 1 : 0);
  }
  return out.take();
}

std::vector<HeldBox> decode_held(std::string_view bytes, size_t from) {
  Decoder in(bytes, from);
  const uint64_t count = in.u64();
  if (count > bytes.size()) in.finish();  // more entries than bytes: malformed
  std::vector<HeldBox> held;
  for (uint64_t i = 0; i < count; ++i) {
    HeldBox box;
    box.name = in.string();
    const std::string dtype = in.string();
    const std::optional<DType> parsed = dtype_from_name(dtype);
    if (!parsed) {
      throw Error(ErrorCode::kCorrupt, "rank " + std::to_string(from) + " names an unknown dtype '" + dtype + "'");
    }
    box.dtype = *parsed;
    box.global_shape = in.i64s();
    box.box.offsets = in.i64s();
    box.box.sizes = in.i64s();
    box.sharded = in.u64() != 0;
    held.push_back(std::move(box));
  }
  in.finish();
  return held;
}

std::vector<bool> boxes_to_write(const std::vector<std::vector<HeldBox>>& held, size_t rank) {
  // The first holder of each tensor (its dtype, shape, kind) and of each box.
  std::map<std::string, std::pair<size_t, const HeldBox*>> first_of_tensor;
  std::set<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>> seen;
  std::vector<bool> writes;
  for (size_t r = 0; r < held.size(); ++r) {
    for (const HeldBox& box : held[r]) {
      const auto [first, fresh] = first_of_tensor.emplace(box.name, std::make_pair(r, &box));
      if (!fresh) {
        const HeldBox& other = *first->second.second;
        const std::string ranks =
            "ranks " + std::to_string(first->second.first) + " and " + std::to_string(r);
        if (other.sharded != box.sharded) {
          invalid(ranks + " hold the tensor one whole (no shard given) and one as a shard", box.name);
        }
        if (other.dtype != box.dtype) {
          invalid(ranks + " hold the tensor as " + std::string(dtype_name(other.dtype)) + " and " +
                      std::string(dtype_name(box.dtype)),
                  box.name);
        }
        if (other.global_shape != box.global_shape) {
          invalid(ranks + " disagree on the tensor's global shape", box.name);
        }
      }
      const bool first_holder = seen.emplace(box.name, box.box.offsets, box.box.sizes).second;
      if (r == rank) writes.push_back(first_holder);
    }
  }
  return writes;
}

}  // namespace ckpt::distributed_detail
