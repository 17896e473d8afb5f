#include "formats/tf/strings.h"

#include <cstring>
#include <limits>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "formats/tf/layout.h"

namespace ckpt::tf_detail {
namespace {

std::span<const std::byte> as_bytes(const void* data, size_t size) {
  return {static_cast<const std::byte*>(data), size};
}

// TensorFlow's length CRC takes each length as a uint32 (little-endian)
// unless it needs 64 bits.
uint32_t extend_with_length(uint32_t crc, uint64_t length) {
  if (length <= std::numeric_limits<uint32_t>::max()) {
    const auto narrow = static_cast<uint32_t>(length);
    return detail::crc32c(as_bytes(&narrow, 4), crc);
  }
  return detail::crc32c(as_bytes(&length, 8), crc);
}

[[noreturn]] void fail(std::string message, uint64_t offset) {
  throw Error(ErrorCode::kCorrupt, std::move(message), {.offset = offset});
}

}  // namespace

DecodedStrings decode_strings(std::span<const std::byte> bytes, uint64_t count) {
  // Every element takes at least one length byte.
  if (count > bytes.size()) {
    fail("string tensor of " + std::to_string(count) + " elements does not fit in " +
             std::to_string(bytes.size()) + " bytes",
         0);
  }
  std::vector<uint64_t> lengths;
  lengths.reserve(static_cast<size_t>(count));
  size_t position = 0;
  uint32_t crc = 0;
  uint64_t total = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t length = 0;
    int shift = 0;
    while (true) {
      if (position >= bytes.size()) fail("string length runs past the tensor's bytes", position);
      if (shift > 63) fail("string length varint longer than 10 bytes", position);
      const auto byte = static_cast<uint8_t>(bytes[position++]);
      length |= uint64_t(byte & 0x7f) << shift;
      shift += 7;
      if ((byte & 0x80) == 0) break;
    }
    if (length > bytes.size() || total + length > bytes.size()) {
      fail("string element " + std::to_string(i) + " of " + std::to_string(length) +
               " bytes is longer than the tensor's bytes",
           position);
    }
    total += length;
    crc = extend_with_length(crc, length);
    lengths.push_back(length);
  }
  if (bytes.size() - position < 4) fail("string tensor lacks the lengths' checksum", position);
  uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + position, 4);
  if (stored != mask_crc(crc)) fail("string lengths fail their CRC-32C", position);
  crc = detail::crc32c(bytes.subspan(position, 4), crc);
  position += 4;
  if (bytes.size() - position != total) {
    fail("string lengths add up to " + std::to_string(total) + " bytes, but " +
             std::to_string(bytes.size() - position) + " follow them",
         position);
  }
  DecodedStrings decoded;
  decoded.elements.reserve(lengths.size());
  for (uint64_t length : lengths) {
    decoded.elements.emplace_back(reinterpret_cast<const char*>(bytes.data() + position), static_cast<size_t>(length));
    position += static_cast<size_t>(length);
  }
  decoded.crc = detail::crc32c(bytes.subspan(bytes.size() - static_cast<size_t>(total)), crc);
  return decoded;
}

EncodedStrings encode_strings(const std::vector<std::string>& elements) {
  EncodedStrings encoded;
  uint32_t crc = 0;
  for (const std::string& element : elements) {
    uint64_t length = element.size();
    crc = extend_with_length(crc, length);
    while (length >= 0x80) {
      encoded.bytes.push_back(static_cast<char>((length & 0x7f) | 0x80));
      length >>= 7;
    }
    encoded.bytes.push_back(static_cast<char>(length));
  }
  const uint32_t masked = mask_crc(crc);
  char stored[4];
  std::memcpy(stored, &masked, 4);
  encoded.bytes.append(stored, 4);
  crc = detail::crc32c(as_bytes(stored, 4), crc);
  for (const std::string& element : elements) {
    encoded.bytes += element;
    crc = detail::crc32c(as_bytes(element.data(), element.size()), crc);
  }
  encoded.crc = crc;
  return encoded;
}

}  // namespace ckpt::tf_detail
