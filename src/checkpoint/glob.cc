// glob_match and name_under (include/ckpt/transform.h), and the UTF-8
// reading that the Glob class of glob.h uses.

#include "checkpoint/glob.h"

#include "ckpt/transform.h"

namespace ckpt {
namespace detail {

char32_t next_character(std::string_view text, size_t& position) {
  const auto lead = static_cast<unsigned char>(text[position]);
  size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  if (position + length > text.size()) length = 1;
  for (size_t i = 1; i < length; ++i) {
    if ((static_cast<unsigned char>(text[position + i]) & 0xC0) != 0x80) length = 1;
  }
  char32_t character = length == 1 ? lead : lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    character = (character << 6) | (static_cast<unsigned char>(text[position + i]) & 0x3F);
  }
  position += length;
  return character;
}

}  // namespace detail

bool glob_match(std::string_view pattern, std::string_view name) { return detail::Glob(pattern).matches(name); }

bool name_under(std::string_view name, std::string_view prefix) {
  if (prefix.empty()) return true;
  return name.starts_with(prefix) && (name.size() == prefix.size() || name[prefix.size()] == '.');
}

}  // namespace ckpt
