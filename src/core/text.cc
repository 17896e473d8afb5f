#include "core/text.h"

#include <simdjson.h>

#include <algorithm>

namespace ckpt::detail {
namespace {

// The length of the UTF-8 sequence that starts `text` (no overlong forms,
// nothing past U+10FFFF; the three-byte forms of U+D800..U+DFFF only with
// `surrogates`), 0 if no valid one does. `text` is not empty.
size_t sequence_length(std::string_view text, bool surrogates) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t length = 0;
  uint32_t code = 0;
  if ((c & 0xE0) == 0xC0) {
    length = 2, code = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    length = 3, code = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    length = 4, code = c & 0x07;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((s[k] & 0xC0) != 0x80) return 0;
    code = code << 6 | (s[k] & 0x3F);
  }
  if ((length == 2 && code < 0x80) || (length == 3 && code < 0x800) || (length == 4 && code < 0x10000) ||
      code > 0x10FFFF || (!surrogates && code >= 0xD800 && code <= 0xDFFF)) {
    return 0;
  }
  return length;
}

// The validator that lets surrogates through (simdjson's does not).
bool valid_utf8_with_surrogates(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = sequence_length(text.substr(i), true);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

// The length of the valid UTF-8 sequence (no surrogates, no overlong forms)
// that starts `text`, 0 if none does.
size_t utf8_sequence_length(std::string_view text) { return sequence_length(text, false); }

}  // namespace

void require_utf8_name(std::string_view name, const ErrorContext& context) {
  if (valid_utf8(name)) return;
  throw Error(ErrorCode::kCorrupt, "name " + detail::quoted(name) + " is not valid UTF-8", context);
}

std::string quoted(std::string_view text, QuoteOptions options) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "'";
  size_t i = 0;
  while (i < text.size()) {
    const size_t length = utf8_sequence_length(text.substr(i));
    if (i + std::max<size_t>(length, 1) > options.max_bytes) break;
    const auto c = static_cast<unsigned char>(text[i]);
    // U+0080..U+009F (C2 80..9F) are controls too.
    const bool control = length == 0 || c < 0x20 || c == 0x7F ||
                         (length == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0);
    if (!control) {
      if (c == '\\' || c == '\'') out += '\\';
      out.append(text.data() + i, length);
      i += length;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: out += "\\x", out += kDigits[c >> 4], out += kDigits[c & 15];
    }
    ++i;  // a C1 control's second byte is escaped on the next turn
  }
  out += '\'';
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

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

bool append_utf8(std::string& out, uint32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    return false;
  }
  return true;
}

std::string comma_separated(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

}  // namespace ckpt::detail
