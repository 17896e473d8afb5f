#include "core/text.h"

#include <simdjson.h>

#include <algorithm>

namespace ckpt::detail {
namespace {

// The validator that lets surrogates through (simdjson's does not).
bool valid_utf8_with_surrogates(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0;
    if ((c & 0xE0) == 0xC0) {
      length = 2, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, code = c & 0x07;
    } else {
      return false;
    }
    if (n - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      code = code << 6 | (s[i + k] & 0x3F);
    }
    // Overlong forms and values past U+10FFFF are invalid.
    if ((length == 2 && code < 0x80) || (length == 3 && code < 0x800) || (length == 4 && code < 0x10000) ||
        code > 0x10FFFF) {
      return false;
    }
    i += length;
  }
  return true;
}

}  // namespace

bool valid_utf8(std::string_view text, Utf8Options options) {
  if (options.allow_surrogates) return valid_utf8_with_surrogates(text);
  return simdjson::validate_utf8(text.data(), text.size());
}

std::string hex_digits(uint64_t value, size_t width) {
  static constexpr char kDigits[] = "0123456789abcdef";
  size_t digits = 1;
  for (uint64_t rest = value >> 4; rest != 0; rest >>= 4) ++digits;
  std::string text(std::max(width, digits), '0');
  for (size_t i = text.size(); value != 0; value >>= 4) text[--i] = kDigits[value & 0xF];
  return text;
}

}  // namespace ckpt::detail
