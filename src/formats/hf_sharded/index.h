#pragma once
// The index of a Hugging Face sharded checkpoint
// (model.safetensors.index.json): parsed and validated, and written as
// transformers' save_pretrained writes it. Layout: layout.h and
// docs/formats/hf_sharded.md.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/box.h"
#include "ckpt/dtype.h"
#include "ckpt/tensor.h"

namespace ckpt::hf_sharded_detail {

// One piece of a sharded tensor: the box of the global tensor that it holds,
// stored as the tensor `key` of the shard file `file`.
struct PieceRecord {
  std::string file;
  std::string key;
  Box box;
};

// A tensor stored in pieces (issue 20's sharded tensors): its global dtype
// and shape, and the pieces that cover it.
struct SliceRecord {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<PieceRecord> pieces;
};

struct ShardIndex {
  // metadata.total_size: the bytes of every tensor stored in the shards.
  std::optional<uint64_t> total_size;
  // metadata's other string values (transformers writes none; other
  // writers' keys whose values are not strings are left out).
  std::vector<std::pair<std::string, std::string>> metadata;
  // weight_map: whole tensor name -> shard file name, in the index's order.
  std::vector<std::pair<std::string, std::string>> weight_map;
  // ckpt's record (kCkptKey); absent in other writers' indexes.
  bool has_record = false;
  int64_t version = 0;
  std::optional<std::string> tree;  // the tree skeleton (formats/tree_json.h) as JSON text
  std::vector<std::string> added_metadata;  // shard metadata keys ckpt added, sorted
  std::vector<SliceRecord> slices;  // in the index's order
};

// Parses the index text `text` of the file `path`. Checks, one defect at a
// time, each Error{kCorrupt} naming `path` and the entry: valid JSON, an
// object at the top; `weight_map` present, an object of strings, each a
// plain file name (is_shard_file_name), no tensor named twice; `metadata`
// (optional) an object whose `total_size` is a non-negative integer; ckpt's
// record (optional) an object with a known `version` (a newer one is
// kUnsupported), `tree` a string, `added_metadata` a list of strings, `slices` an object of records with a known
// `dtype`, a `shape` of non-negative integers, and a non-empty `pieces` list
// whose pieces have a plain `file`, a `key` and `offsets` / `sizes` of
// non-negative integers, as many as the shape has dimensions; no sliced
// tensor also in weight_map; no piece key that is a whole tensor's name or
// used twice in one file. Bounds, overlaps and coverage of the pieces are
// checked when they are assembled (box.h pieced_tensor).
ShardIndex parse_index(std::string_view text, const std::filesystem::path& path);

// `index` as transformers' save_pretrained writes an index:
// json.dumps(index, indent=2, sort_keys=True) + "\n" (Python's json escapes
// every character outside printable ASCII as \uXXXX). weight_map and slices
// are written sorted by name, whatever their order in `index`.
std::string index_json(const ShardIndex& index);

// True if `name` names a file directly inside the checkpoint's directory:
// not empty, no '/' or '\0', not "." or "..".
bool is_shard_file_name(std::string_view name);

// huggingface_hub's shard name: "model-00002-of-00005.safetensors" for
// number 2 (1-based) of 5.
std::string shard_file_name(size_t number, size_t count);

// The stored name of a sharded tensor's piece at `offsets` (layout.h
// kPieceKeyPrefix).
std::string piece_key(std::string_view name, const std::vector<int64_t>& offsets);

}  // namespace ckpt::hf_sharded_detail
