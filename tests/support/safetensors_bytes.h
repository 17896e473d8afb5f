#pragma once
// Building and taking apart safetensors files byte by byte in tests, without
// ckpt's reader or writer: the little-endian header length, and the header
// JSON of a file.

#include <cstdint>
#include <cstring>
#include <string>

namespace ckpt::testing {

// `value` as 8 little-endian bytes (the header length field).
inline std::string le64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
  return out;
}

// The header JSON of a safetensors file, without its padding spaces.
inline std::string header_of(const std::string& file) {
  uint64_t length = 0;
  std::memcpy(&length, file.data(), 8);
  std::string header = file.substr(8, length);
  while (!header.empty() && header.back() == ' ') header.pop_back();
  return header;
}

}  // namespace ckpt::testing
