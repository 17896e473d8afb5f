#pragma once
// The .index file of a tensor bundle: a LevelDB table (SSTable) read and
// written with LevelDB itself (Debian's libleveldb), with the options that
// TensorFlow's BundleWriter uses, so that the bytes equal TensorFlow's.
// Layout: docs/formats/tf.md; constants: layout.h.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ckpt::tf_detail {

// One key/value pair of the table, in key order.
using IndexRecord = std::pair<std::string, std::string>;

// True if `tail` (the last bytes of a file, at least kTableFooterSize of
// them) ends with LevelDB's table magic.
bool has_table_magic(std::span<const std::byte> tail);

// Every record of the table held in `bytes` (the whole .index file), in key
// order, every block's CRC-32C checked.
// Throws Error{kCorrupt} naming `path` (a bad footer or magic, a block that
// fails its checksum or runs past the file, a malformed block).
std::vector<IndexRecord> read_index_table(std::span<const std::byte> bytes, const std::filesystem::path& path);

// The bytes of a table holding `records`, which must be sorted bytewise by
// key without duplicates, as LevelDB's TableBuilder writes them with
// TensorFlow's options (no compression, 256 KiB blocks, restart interval 16).
// Throws Error{kInvalidArgument} if the keys are out of order.
std::string build_index_table(const std::vector<IndexRecord>& records);

}  // namespace ckpt::tf_detail
