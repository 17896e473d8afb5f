#pragma once
// Small text rules that several formats share, each in one place: UTF-8
// validity, fixed-width hex digits, and the dotted names of tree leaves.

#include <cstddef>
#include <cstdint>
#include <span>
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

// The dotted name of the child `key` of the node named `parent`:
// "parent.key", or `key` alone when `parent` is empty (the root's children).
// This is how formats name leaves and the entries of their error messages.
std::string join_name(std::string_view parent, std::string_view key);

// Appends `key` to the dotted name `name` in place, as join_name(name, key)
// would return it.
void append_name(std::string& name, std::string_view key);

// The keys of a path joined by the same rule: join_names({"a", "b"}) == "a.b".
std::string join_names(std::span<const std::string> keys);

}  // namespace ckpt::detail
