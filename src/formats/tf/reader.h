#pragma once
// Reading TensorFlow tensor bundles (V2). Layout: docs/formats/tf.md.

#include <cstdint>
#include <filesystem>
#include <span>

#include "ckpt/format.h"

namespace ckpt::tf_detail {

// True if `head` (the first bytes of a file of `file_size` bytes) may start
// a bundle's .index: a LevelDB table whose first record has the empty key
// and a value starting with num_shards (the header); when `head` is the
// whole file, its footer magic too.
bool detect_index(std::span<const std::byte> head, uint64_t file_size);

// Reads the bundle that `path` names (see find_prefix in paths.h): the
// .index table (every block's CRC checked), the header (shards, endianness,
// version; TensorFlow's int32 fields refused past 32 bits) and every entry
// (a UTF-8 name, dtype, shape, shard, offset, size) validated against the
// shards' real sizes. When the header holds ckpt's shard record (extras),
// every shard's size and trailer digest are checked first (16 bytes read per
// shard): a shard of another save beside this .index (a torn overwrite) is
// kCorrupt naming the shard as the file and the .index in the message;
// without a record, a shard ending with ckpt's trailer is refused the same
// way (shard_trailer.h). Numeric tensors are views of the mapped
// data shards (zero-copy); DT_STRING tensors are decoded (their lengths'
// CRC always checked): a scalar becomes a Bytes leaf, a tensor of rank r
// r nested lists of Bytes. The tree: ckpt's skeleton when the header holds
// one (written with extras; Contents.format_version 1), else built from the
// keys (names.h) in file order. With options.verify every
// entry's CRC-32C is checked against its bytes.
// Contents.entries lists the numeric tensors in file order (shard, offset),
// each with its CRC-32C (unmasked, hex); Contents.checksum is kCrc32c.
// Throws Error{kNotFound} if there is no bundle at `path`; {kCorrupt}
// naming the file (.index or shard), the entry and the offset if anything
// fails validation; {kUnsupported} for valid bundles ckpt cannot hold
// (big-endian, a dtype ckpt lacks such as DT_RESOURCE, sliced string
// tensors, a newer bundle version).
// Sliced (partitioned) entries are assembled into one heap tensor each from
// their slice entries (slices.h); those are not leaves of their own.
Contents read_bundle(const std::filesystem::path& path, const LoadOptions& options);

}  // namespace ckpt::tf_detail
