#pragma once
// Small text rules that several formats share, each in one place: UTF-8
// validity and fixed-width hex digits. (Dotted names: ckpt/tree.h.)

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt::detail {

struct Utf8Options {
  // Accept the three-byte forms of U+D800..U+DFFF (lone surrogates), which
  // Python writes with "surrogatepass" and pickles carry. Off: they are
  // invalid, as the Unicode standard, JSON, msgpack and zip readers have it.
  bool allow_surrogates = false;
};

// True if `text` is well-formed UTF-8: every sequence complete, no overlong
// forms, no code point past U+10FFFF, and surrogates only with
// options.allow_surrogates. The empty text is valid.
bool valid_utf8(std::string_view text, Utf8Options options = {});

// `value` in lower-case hex, zero-padded to `width` digits (more digits
// when the value needs them): hex_digits(0xbeef, 8) == "0000beef".
std::string hex_digits(uint64_t value, size_t width);

// The 8 hex digits of a 32-bit value, as ckpt prints CRC-32 and CRC-32C
// digests: hex8(0xbeef) == "0000beef".
inline std::string hex8(uint32_t value) { return hex_digits(value, 8); }

}  // namespace ckpt::detail
