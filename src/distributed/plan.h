#pragma once
// Planning a sharded save (issue 20), apart from its effects: what each rank
// holds, and which of it each rank writes so that a box held by several
// ranks (a replicated tensor, a shard replicated along a mesh dimension) is
// written once, by the lowest rank that holds it. Pure functions, the same
// result on every rank from the same gathered announcements.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/box.h"
#include "ckpt/distributed.h"
#include "ckpt/dtype.h"
#include "ckpt/tree.h"

namespace ckpt::distributed_detail {

// One tensor leaf a rank holds: the box of its global tensor (the whole of
// it unless `sharded`).
struct HeldBox {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape global_shape;
  Box box;
  bool sharded = false;

  bool operator==(const HeldBox&) const = default;
};

// The tensor leaves of `local_tree` as boxes, in tree order: those named in
// `shards` at their spec's offsets (sizes: the local tensor's shape), the
// others whole. Throws Error{kInvalidArgument} naming the entry for a
// `shards` name that is no tensor leaf of the tree, a spec whose rank is not
// the tensor's, or a box outside its global shape.
std::vector<HeldBox> held_boxes(const Tree& local_tree, const std::map<std::string, ShardSpec>& shards);

std::string encode_held(const std::vector<HeldBox>& held);
// Throws Error{kCorrupt} for a malformed message of rank `from`.
std::vector<HeldBox> decode_held(std::string_view bytes, size_t from);

// For each of rank `rank`'s boxes (held[rank], in order), whether it writes
// it: true unless a lower rank holds the same tensor's same box. Throws
// Error{kInvalidArgument} naming the tensor (the same on every rank) when
// two ranks disagree on a tensor's dtype or global shape, or one holds it
// whole and another a shard of it.
std::vector<bool> boxes_to_write(const std::vector<std::vector<HeldBox>>& held, size_t rank);

}  // namespace ckpt::distributed_detail
