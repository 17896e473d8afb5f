#pragma once
// ckpt's mark of which save a data shard belongs to (docs/formats/tf.md
// "Torn overwrites"). With extras, every shard ckpt writes ends with a
// 16-byte trailer after the tensors' bytes (TensorFlow reads entries at their
// offsets and never looks there), and the header's `ckpt_shards` records each
// shard's size and the trailer's digest. A shard of another save (an
// overwrite killed between the renames of its shards and of its .index)
// then shows at open, by reading 16 bytes per shard.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ckpt::tf_detail {

// The trailer: this magic, then the digest as uint64 little-endian.
constexpr std::array<unsigned char, 8> kShardTrailerMagic = {0x89, 'c', 'k', 'p', 't', 'T', 'F', '\n'};
constexpr size_t kShardTrailerSize = 16;

// One stored run of bytes of a shard, as its index entry describes it.
struct ShardExtent {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t crc = 0;  // CRC-32C of the bytes, unmasked
};

// The digest of a shard's contents: xxh3-64 of its extents (in the order
// given, the writer's: by offset), each as offset, size (uint64 LE) and CRC
// (uint32 LE). Two saves of the same bytes at the same places get the same
// digest; any tensor whose bytes differ changes it (but for CRC collisions).
uint64_t shard_digest(std::span<const ShardExtent> extents);

// The 16 trailer bytes holding `digest`.
std::array<std::byte, kShardTrailerSize> shard_trailer(uint64_t digest);

// The digest held by the trailer that ends `shard` (a whole shard's bytes);
// nullopt if the shard is shorter than a trailer or does not end with one.
std::optional<uint64_t> trailer_digest(std::span<const std::byte> shard);

}  // namespace ckpt::tf_detail
