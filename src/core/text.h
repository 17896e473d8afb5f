#pragma once
// Small text rules that several formats share, each in one place: UTF-8
// validity, the rule for names read from files, quoting file text in error
// messages, fixed-width hex digits. (Dotted names: ckpt/tree.h.)

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include <string_view>

#include "ckpt/error.h"

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

// The one rule for names that a reader takes from a file (tensor names, tree
// keys, zip member names, TF keys, msgpack map keys, Orbax names): they must
// be valid UTF-8 without surrogates: JSON text, Python's str as the bindings
// convert names, and the frameworks' own Python readers take nothing else. Returns normally for a valid
// name; throws Error{kCorrupt, "name '...' is not valid UTF-8"} (the name
// rendered by quoted()) with `context` (the reader's file, entry, offset).
void require_utf8_name(std::string_view name, const ErrorContext& context = {});

struct QuoteOptions {
  // At most this many bytes of the text are shown; a longer text is cut (at
  // a character boundary) and followed by "... (N bytes)".
  size_t max_bytes = 200;
};

// `text` (bytes from a file: a name, a class name, a dtype string, a key)
// rendered for an error message as one printable line: in single quotes,
// valid UTF-8 characters other than controls as they are, `\\` and `\'` for
// backslash and quote, \n \r \t, and \xHH for every other control byte, NUL
// and byte that is not part of valid UTF-8: quoted("a\x01b") == "'a\\x01b'".
// Every message that embeds text from a file embeds it through this. Call it
// qualified (detail::quoted): for a std::string or std::string_view argument,
// argument-dependent lookup would also find std::quoted (<iomanip>).
std::string quoted(std::string_view text, QuoteOptions options = {});

// `value` in lower-case hex, zero-padded to `width` digits (more digits
// when the value needs them): hex_digits(0xbeef, 8) == "0000beef".
std::string hex_digits(uint64_t value, size_t width);

// `names` joined with ", " ("a, b, c"; "" for none): the lists in messages
// and reports.
std::string comma_separated(const std::vector<std::string>& names);

// Appends the UTF-8 encoding of `code_point` (at most U+10FFFF; the
// surrogates U+D800..U+DFFF encode as their three-byte forms, which
// valid_utf8 refuses unless told otherwise) to `out`. Returns false, and
// appends nothing, for a value past U+10FFFF.
bool append_utf8(std::string& out, uint32_t code_point);

// The 8 hex digits of a 32-bit value, as ckpt prints CRC-32 and CRC-32C
// digests: hex8(0xbeef) == "0000beef".
inline std::string hex8(uint32_t value) { return hex_digits(value, 8); }

}  // namespace ckpt::detail
