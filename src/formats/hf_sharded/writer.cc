#include "formats/hf_sharded/writer.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "ckpt/box.h"
#include "ckpt/error.h"
#include "core/json_writer.h"
#include "core/text.h"
#include "formats/hf_sharded/layout.h"
#include "formats/hf_sharded/reader.h"
#include "formats/safetensors/writer.h"
#include "formats/ties.h"
#include "formats/tree_json.h"
#include "io/atomic_directory.h"
#include "io/atomic_file.h"

namespace ckpt::hf_sharded_detail {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void invalid(const std::string& message, const std::string& entry = "") {
  throw Error(ErrorCode::kInvalidArgument, message, {.entry = entry});
}

void refuse_piece_prefix(std::string_view name) {
  if (name.starts_with(kPieceKeyPrefix)) {
    throw Error(ErrorCode::kUnsupported,
                "names starting with '" + std::string(kPieceKeyPrefix) + "' are kept for the pieces of sharded tensors",
                {.entry = std::string(name)});
  }
}

// The safetensors options of one shard: options' own, one file, with
// {"format": "pt"} (layout.h kFormatMetadataKey) unless the metadata says.
SaveOptions shard_options(const SaveOptions& options) {
  SaveOptions shard = options;
  shard.format = "safetensors";
  shard.max_shard_bytes = 0;
  shard.metadata.emplace(std::string(kFormatMetadataKey), std::string(kFormatMetadataValue));
  return shard;
}

// The keys shard_options() adds to the caller's metadata.
std::vector<std::string> added_metadata(const SaveOptions& options) {
  if (options.metadata.count(std::string(kFormatMetadataKey))) return {};
  return {std::string(kFormatMetadataKey)};
}

// For each leaf, the earlier leaf it is stored with (ties.h find_ties) where
// the safetensors writer stores ties once (with extras); else none.
std::vector<size_t> stored_ties(const std::vector<Tree::Leaf>& leaves, bool extras) {
  return extras ? detail::find_ties(leaves) : std::vector<size_t>(leaves.size(), detail::kNotTied);
}

// Writes the flat map `tensors` (stored name -> tensor) as the shard `path`;
// returns the bytes of tensor data it stores (tied tensors once with extras).
uint64_t write_shard(const fs::path& path, const Tree& tensors, const SaveOptions& shard) {
  safetensors_detail::PlannedFile planned(tensors, shard);
  planned.write_file(path);
  const std::vector<Tree::Leaf> leaves = tensors.tensor_leaves();
  const std::vector<size_t> ties = stored_ties(leaves, shard.extras);
  uint64_t bytes = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (ties[i] == detail::kNotTied) bytes += leaves[i].value->tensor().nbytes();
  }
  return bytes;
}

void write_index_file(const fs::path& path, const ShardIndex& index, const SaveOptions& options) {
  const std::string text = index_json(index);
  detail::AtomicFile file(path, {.fsync = options.fsync});
  file.write_at(std::as_bytes(std::span(text)), 0);
  file.commit();
}

// The skeleton of `tree` (its tensor leaves named as tensor_leaves() names them).
std::string skeleton(const Tree& tree) { return detail::tree_to_json(tree); }


// The shards of `leaves` in tree order: the leaf positions of each.
std::vector<std::vector<size_t>> plan_shards(const std::vector<Tree::Leaf>& leaves, const std::vector<size_t>& ties,
                                             uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> shard_of(leaves.size(), 0);
  uint64_t current = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (ties[i] != detail::kNotTied) {  // stored once, beside the leaf it is tied to
      shard_of[i] = shard_of[ties[i]];
      shards[shard_of[i]].push_back(i);
      continue;
    }
    const uint64_t bytes = leaves[i].value->tensor().nbytes();
    // current + bytes > max_shard_bytes, without overflow.
    const bool full =
        max_shard_bytes > 0 && current > 0 && bytes > max_shard_bytes - std::min(current, max_shard_bytes);
    if (shards.empty() || full) {
      shards.emplace_back();
      current = 0;
    }
    shard_of[i] = shards.size() - 1;
    shards.back().push_back(i);
    current += bytes;
  }
  if (shards.empty()) shards.emplace_back();  // no tensors: one empty shard, as one file would be
  return shards;
}

}  // namespace

void check_target_directory(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(path, error)) return;
  if (!fs::is_directory(path, error)) {
    throw Error(ErrorCode::kInvalidArgument,
                "a sharded safetensors checkpoint is a directory; refusing to replace this file", {.path = path});
  }
  if (!detect_directory(path) && !fs::is_empty(path, error)) {
    throw Error(ErrorCode::kInvalidArgument,
                "refusing to replace a non-empty directory that is not a sharded safetensors checkpoint "
                "(it has no " + std::string(kIndexFile) + ")",
                {.path = path});
  }
}

void write_directory(const fs::path& given, const Tree& tree, const SaveOptions& options) {
  const fs::path path = given.has_filename() ? given : given.parent_path();  // "out/" names "out"
  // What the safetensors writer refuses of the tree as one file, it refuses
  // here (no tensor bytes are touched by planning).
  {
    SaveOptions whole = options;
    whole.max_shard_bytes = 0;
    const safetensors_detail::PlannedFile check(tree, whole);
  }
  const std::vector<Tree::Leaf> leaves = tree.tensor_leaves();
  for (const Tree::Leaf& leaf : leaves) refuse_piece_prefix(leaf.name);
  const std::vector<size_t> ties = stored_ties(leaves, options.extras);
  const std::vector<std::vector<size_t>> shards = plan_shards(leaves, ties, options.max_shard_bytes);
  check_target_directory(path);

  const SaveOptions shard = shard_options(options);
  detail::AtomicDirectory directory(path, {.fsync = options.fsync, .files_synced = options.fsync});
  ShardIndex index;
  index.total_size = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shard_file_name(s + 1, shards.size());
    Tree tensors = Tree::map();
    tensors.reserve(shards[s].size());
    for (size_t i : shards[s]) {
      tensors.set(leaves[i].name, *leaves[i].value);
      index.weight_map.emplace_back(leaves[i].name, file);
    }
    *index.total_size += write_shard(directory.path() / file, tensors, shard);
  }
  if (options.extras) {
    index.has_record = true;
    index.version = kCkptVersion;
    index.tree = skeleton(tree);
    index.added_metadata = added_metadata(options);
  }
  write_index_file(directory.path() / kIndexFile, index, options);
  directory.commit();
}

RankShard write_rank_shard(const fs::path& directory, size_t rank, size_t world_size, const Tree& whole,
                           std::span<const LocalPiece> pieces, const SaveOptions& options) {
  if (rank >= world_size) {
    invalid("rank " + std::to_string(rank) + " of a world of " + std::to_string(world_size));
  }
  RankShard result;
  result.file = shard_file_name(rank + 1, world_size);
  Tree tensors = Tree::map();
  for (const Tree::Leaf& leaf : whole.tensor_leaves()) {
    refuse_piece_prefix(leaf.name);
    tensors.set(leaf.name, *leaf.value);
    result.tensors.push_back(leaf.name);
  }
  std::set<std::string> keys;
  for (const LocalPiece& piece : pieces) {
    refuse_piece_prefix(piece.name);
    const size_t ndim = piece.data.shape().size();
    if (piece.offsets.size() != ndim || piece.global_shape.size() != ndim) {
      invalid("a piece's offsets and global shape must have as many dimensions as its data", piece.name);
    }
    const std::string key = piece_key(piece.name, piece.offsets);
    if (!keys.insert(key).second || tensors.find(std::string(piece.name)) != nullptr) {
      invalid("the piece is given twice (or also as a whole tensor)", piece.name);
    }
    tensors.set(key, piece.data);
    SliceRecord record{.name = piece.name, .dtype = piece.data.dtype(), .shape = piece.global_shape, .pieces = {}};
    record.pieces.push_back(
        PieceRecord{.file = result.file, .key = key, .box = {.offsets = piece.offsets, .sizes = piece.data.shape()}});
    result.pieces.push_back(std::move(record));
  }
  result.nbytes = write_shard(directory / result.file, tensors, shard_options(options));
  return result;
}

void write_sharded_index(const fs::path& directory, std::span<const RankShard> ranks, const Tree* tree,
                         const SaveOptions& options) {
  ShardIndex index;
  index.total_size = 0;
  std::set<std::string> whole;
  std::map<std::string, size_t> slice_of;  // name -> position in index.slices
  for (const RankShard& rank : ranks) {
    if (!is_shard_file_name(rank.file) || !detail::valid_utf8(rank.file)) invalid("bad shard file name", rank.file);
    for (const std::string& name : rank.tensors) {
      if (!detail::valid_utf8(name)) invalid("a tensor name is not valid UTF-8");
    }
    for (const SliceRecord& piece : rank.pieces) {
      if (!detail::valid_utf8(piece.name)) invalid("a tensor name is not valid UTF-8");
    }
    *index.total_size += rank.nbytes;
    for (const std::string& name : rank.tensors) {
      if (!whole.insert(name).second) invalid("two ranks wrote the tensor", name);
      index.weight_map.emplace_back(name, rank.file);
    }
    for (const SliceRecord& piece : rank.pieces) {
      const auto [found, fresh] = slice_of.emplace(piece.name, index.slices.size());
      if (fresh) {
        index.slices.push_back({.name = piece.name, .dtype = piece.dtype, .shape = piece.shape, .pieces = {}});
      }
      SliceRecord& slice = index.slices[found->second];
      if (slice.dtype != piece.dtype || slice.shape != piece.shape) {
        invalid("the pieces of the sharded tensor disagree on its dtype or global shape", piece.name);
      }
      slice.pieces.insert(slice.pieces.end(), piece.pieces.begin(), piece.pieces.end());
    }
  }
  for (const SliceRecord& slice : index.slices) {
    if (whole.count(slice.name)) invalid("the tensor is written both whole and in pieces", slice.name);
    std::vector<Box> boxes;
    for (const PieceRecord& piece : slice.pieces) boxes.push_back(piece.box);
    check_tiling(slice.shape, boxes, ErrorCode::kInvalidArgument, {.entry = slice.name});
  }
  index.has_record = true;
  index.version = kCkptVersion;
  index.added_metadata = added_metadata(options);
  if (tree != nullptr) {
    std::set<std::string> names = whole;
    for (const SliceRecord& slice : index.slices) names.insert(slice.name);
    std::set<std::string> leaves;
    for (const Tree::Leaf& leaf : tree->tensor_leaves()) leaves.insert(leaf.name);
    if (leaves != names) invalid("the tree's tensor leaves are not the tensors the ranks wrote");
    index.tree = skeleton(*tree);
  }
  write_index_file(directory / kIndexFile, index, options);
}

}  // namespace ckpt::hf_sharded_detail
