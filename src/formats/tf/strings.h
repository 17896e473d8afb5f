#pragma once
// DT_STRING tensors in a bundle's data shard (tensor_bundle.cc
// WriteStringTensor / ReadStringTensor):
//   varint64 length of each element, in order
//   uint32 LE: masked CRC-32C of the lengths, each as a uint32 LE (uint64 LE
//              if over UINT32_MAX)
//   the elements' bytes, in order
// The entry's crc32c covers the lengths (as above), the masked length CRC
// and the bytes: not the stored bytes themselves.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ckpt::tf_detail {

struct DecodedStrings {
  std::vector<std::string> elements;
  uint32_t crc = 0;  // unmasked CRC-32C as the entry's crc32c covers it
};

// Decodes `count` elements from exactly `bytes`. Throws Error{kCorrupt}
// (no path or entry: the caller adds them, and the offset within `bytes`)
// if a length is malformed, the lengths' CRC disagrees, or the sizes do not
// add up to bytes.size().
DecodedStrings decode_strings(std::span<const std::byte> bytes, uint64_t count);

// The stored form of `elements` and the unmasked CRC the entry records.
struct EncodedStrings {
  std::string bytes;
  uint32_t crc = 0;
};
EncodedStrings encode_strings(const std::vector<std::string>& elements);

}  // namespace ckpt::tf_detail
