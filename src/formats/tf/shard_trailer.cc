#include "formats/tf/shard_trailer.h"

#include <cstring>
#include <string>

#include "core/checksum.h"

namespace ckpt::tf_detail {
namespace {

void append_le(std::string& out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

}  // namespace

uint64_t shard_digest(std::span<const ShardExtent> extents) {
  std::string text;
  text.reserve(extents.size() * 20);
  for (const ShardExtent& extent : extents) {
    append_le(text, extent.offset, 8);
    append_le(text, extent.size, 8);
    append_le(text, extent.crc, 4);
  }
  return detail::xxh3_64(std::as_bytes(std::span(text)));
}

std::array<std::byte, kShardTrailerSize> shard_trailer(uint64_t digest) {
  std::array<std::byte, kShardTrailerSize> trailer{};
  std::memcpy(trailer.data(), kShardTrailerMagic.data(), kShardTrailerMagic.size());
  for (size_t i = 0; i < 8; ++i) trailer[8 + i] = static_cast<std::byte>((digest >> (8 * i)) & 0xFF);
  return trailer;
}

std::optional<uint64_t> trailer_digest(std::span<const std::byte> shard) {
  if (shard.size() < kShardTrailerSize) return std::nullopt;
  const std::span<const std::byte> trailer = shard.subspan(shard.size() - kShardTrailerSize);
  if (std::memcmp(trailer.data(), kShardTrailerMagic.data(), kShardTrailerMagic.size()) != 0) return std::nullopt;
  uint64_t digest = 0;
  for (size_t i = 0; i < 8; ++i) digest |= static_cast<uint64_t>(trailer[8 + i]) << (8 * i);
  return digest;
}

}  // namespace ckpt::tf_detail
