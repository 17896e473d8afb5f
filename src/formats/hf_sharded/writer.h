#pragma once
// Writing Hugging Face sharded checkpoints: a directory of safetensors shards
// (ckpt's safetensors writer, extras and all) and the index that transformers'
// loaders read. Layout: layout.h and docs/formats/hf_sharded.md.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "formats/hf_sharded/index.h"

namespace ckpt::hf_sharded_detail {

// Writes `tree` as the directory `path`, atomically (io/atomic_directory.h:
// built under a temporary name, synced, renamed into place): the tensors in
// shards model-0000K-of-0000N.safetensors of whole tensors in tree order, a
// new shard started before a tensor would take the current one past
// options.max_shard_bytes (0: one shard; a larger tensor gets a shard of its
// own; with extras, a tensor tied to an earlier one goes into that one's
// shard and is stored once), plus model.safetensors.index.json. Each shard's
// safetensors metadata is options.metadata plus {"format": "pt"} (unless the
// metadata sets "format"); with options.extras each shard carries ckpt's
// checksums and the index ckpt's record with the whole tree's skeleton.
// Replaces a directory that holds such a checkpoint (or nothing).
// Throws what the safetensors writer throws for `tree` as one file
// (safetensors_detail::write_file: kUnsupported for what safetensors cannot
// hold without extras, ...); Error{kUnsupported} for a tensor named with
// layout.h kPieceKeyPrefix; {kInvalidArgument} if `path` is a file, or a
// non-empty directory that is not a sharded checkpoint; {kIo} from the file
// system.
void write_directory(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

// Checks that a sharded checkpoint may be written at `path`: nothing there,
// an empty directory, or a directory holding such a checkpoint (which the
// write replaces). Throws Error{kInvalidArgument} naming `path` otherwise.
void check_target_directory(const std::filesystem::path& path);

// ---- One shard file per rank (issue 20; the lead drives these from MPI) ----

// One rank's piece of a sharded tensor `name` of data.dtype() and global
// shape `global_shape`: the region at `offsets` of data.shape().
struct LocalPiece {
  std::string name;
  Shape global_shape;
  std::vector<int64_t> offsets;
  Tensor data;
};

// What one rank wrote, for write_sharded_index: its file, the whole tensors
// in it, its pieces (one SliceRecord per piece, with one PieceRecord), and
// the bytes of tensor data stored.
struct RankShard {
  std::string file;
  std::vector<std::string> tensors;
  std::vector<SliceRecord> pieces;
  uint64_t nbytes = 0;
};

// Writes rank `rank`'s (0-based, of `world_size`) shard file into
// `directory` (which must exist; typically the temporary directory of the
// commit the caller drives): model-{rank+1}-of-{world_size}.safetensors
// holding the tensor leaves of `whole` (whole tensors, under their dotted
// names) and each of `pieces` under piece_key(name, offsets). Written
// atomically as one file (options.fsync), with the safetensors metadata
// write_directory gives its shards; options.max_shard_bytes is ignored (one
// file per rank). Returns its description.
// Throws Error{kInvalidArgument} if rank >= world_size, a piece's offsets or
// global shape do not match its data's rank, or a name is given twice;
// {kUnsupported} for a name with kPieceKeyPrefix; what the safetensors
// writer throws.
RankShard write_rank_shard(const std::filesystem::path& directory, size_t rank, size_t world_size, const Tree& whole,
                           std::span<const LocalPiece> pieces, const SaveOptions& options);

// Writes the index of the shards that `ranks` describe into `directory`
// (atomically, options.fsync): weight_map of the whole tensors, ckpt's record
// with each sharded tensor's pieces (grouped by name, in rank order) and,
// when `tree` is given, its skeleton (its tensor leaves' names must be those
// of the whole and sharded tensors). Index metadata: total_size (the sum of
// the ranks' nbytes).
// Throws Error{kInvalidArgument} if a file name is not a plain one or a name
// not valid UTF-8, if a whole tensor is listed by two ranks or
// is also sharded, the pieces of one tensor disagree on dtype or global
// shape, leave its bounds, overlap or do not cover it, or `tree` names other
// tensors; {kIo} from the file system.
void write_sharded_index(const std::filesystem::path& directory, std::span<const RankShard> ranks, const Tree* tree,
                         const SaveOptions& options);

}  // namespace ckpt::hf_sharded_detail
