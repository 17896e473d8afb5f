#pragma once
// Reading a Hugging Face sharded checkpoint: a directory holding
// model.safetensors.index.json and the safetensors shards it names.
// Layout: layout.h and docs/formats/hf_sharded.md.

#include <filesystem>
#include <optional>

#include "ckpt/format.h"

namespace ckpt::hf_sharded_detail {

// The index of the directory `path`: `path`/model.safetensors.index.json
// when it is a regular file, else the one regular file of `path` whose name
// ends in ".safetensors.index.json"; `path` itself when it is such a file
// (the index named instead of its directory); nullopt when `path` is no
// directory or holds none or several. Never throws.
std::optional<std::filesystem::path> find_index(const std::filesystem::path& path) noexcept;

// True if find_index() finds an index in `path`. Never throws.
bool detect_directory(const std::filesystem::path& path) noexcept;

// Reads the checkpoint directory `path` (or the one of the index `path`): its index (index.h parse_index),
// then each shard the index names, lazily, as the safetensors reader reads a
// file (tensors map the shard; options.verify checks their checksums). The
// tree is ckpt's skeleton from the index's record when it has one, else a
// flat map of weight_map's names in the index's order, then the sliced
// tensors in the record's order, each assembled lazily from its pieces (box.h
// pieced_tensor). Contents.entries lists the whole tensors shard by shard (in
// shard-name order, each shard's in file order, offsets within its file),
// then each sliced tensor with its global dtype and shape (offset 0);
// Contents.metadata is the first shard's (minus ckpt's key and the keys the
// record says ckpt added), overlaid with the index metadata's string values
// other than total_size.
// Throws Error{kUnsupported} if `path` holds no index, {kInvalidArgument} if
// it holds several and none is model.safetensors.index.json; {kCorrupt}
// naming the index and the entry if the index fails parse_index, names a
// shard that is missing or a tensor its shard does not hold, a piece whose
// dtype or shape disagrees with its record, or pieces that leave the
// tensor's bounds, overlap or do not cover it; with options.verify, also if
// total_size differs from the bytes of the tensors stored in the shards
// (transformers' loaders never read it: without verify it is not checked).
// A shard that fails the safetensors reader's validation throws its error,
// naming the shard.
Contents read_directory(const std::filesystem::path& path, const LoadOptions& options);

}  // namespace ckpt::hf_sharded_detail
