#pragma once
// Writing TensorFlow tensor bundles (V2) as BundleWriter does, in one or
// more data shards.
// Layout: docs/formats/tf.md.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "formats/tf/index_table.h"

namespace ckpt::tf_detail {

// Writes `tree` as the bundle PREFIX.index + PREFIX.data-0000K-of-0000N,
// where PREFIX is `path` minus a ".index" suffix. Tensors are laid out in
// tree order, back to back (tied tensors, Tensor::same_memory, once: their
// entries share the bytes); each entry records its shard_id, offset and the
// bytes' masked CRC-32C. N is 1 unless options.max_shard_bytes is set: then
// a tensor that has bytes starts shard K + 1 when shard K holds bytes already
// and would grow past the limit, so a tensor larger than the limit has a
// shard of its own (tensors of no bytes stay where they are); at most
// kMaxWriteShards shards (kUnsupported beyond).
// Entries: tensors of every ckpt dtype; Bytes and strings as DT_STRING
// scalars; (nested) lists of only Bytes/strings, rectangular, as DT_STRING
// tensors of that shape (an empty list: shape [0]). Keys: names.h key_of
// (object-based when the tree holds "_CHECKPOINTABLE_OBJECT_GRAPH" at the
// top; integer keys and list positions in decimal).
// With options.extras the header also holds the tree's skeleton (a field
// TensorFlow skips), so any tree reads back equal: numbers, none, empty
// containers and other lists live there only, and every shard ends with a
// 16-byte trailer that the header records (shard_trailer.h): a torn
// overwrite is then found at open. Without extras the .index and data bytes
// equal TensorFlow's for the same entries.
// The prefix's directory is created if missing (as TensorFlow's
// BundleWriter does). Every file is written in full under a temporary name
// (AtomicFile) before any is renamed: the data shards first, in order, the
// .index last. A failed write leaves earlier files untouched and no
// temporary; a new prefix appears (its .index) only when complete.
// Overwriting an existing prefix is atomic per file, not as a whole: a crash
// between the renames leaves the old .index beside new data of the same
// shard count, which the reader refuses by the trailers (with extras) and
// `verify` by the CRCs (an old bundle of another shard count stays whole:
// its shards have other names). After the .index is
// renamed, the shards of an earlier bundle of another shard count at PREFIX
// are removed (paths.h remove_stale_shards).
// Afterwards the prefix's directory's `checkpoint` state file names this
// prefix as the latest as options.state_file says (by default only when the
// directory has one already; paths.h update_state_file).
// Throws Error{kUnsupported} naming the leaf for what a bundle cannot hold:
// without extras, none, bool, int and float leaves, integer keys, empty maps,
// lists of anything but bytes/strings, ragged string lists; always, a root
// that is not a map, two leaves with one key, the empty key. {kIo} from the
// file system.
void write_bundle(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

// What the header records of one data shard written with extras.
struct ShardRecord {
  uint64_t size = 0;    // bytes, trailer included
  uint64_t digest = 0;  // the trailer's (shard_trailer.h)
};

// The header record (key "") as BundleWriter writes it, plus ckpt's
// skeleton when not empty and its record of the shards when given.
IndexRecord header_record(int num_shards, const std::string& skeleton, const std::vector<ShardRecord>& shards = {});

}  // namespace ckpt::tf_detail
