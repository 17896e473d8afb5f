#pragma once
// A small validating MessagePack tokenizer over bytes in memory (a mapped
// file, or a file's head), and the encoder's primitives. Tokens never copy
// str/bin/ext payloads: they give their offsets, so that tensors can view
// the mapped file. Every length is checked against the bytes there are
// before it is trusted.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ckpt::flax_detail {

enum class TokenKind { kNil, kBool, kUInt, kInt, kFloat, kStr, kBin, kArray, kMap, kExt };

// "nil", "bool", "int", "float", "str", "bin", "array", "map", "ext".
std::string_view token_kind_name(TokenKind kind);

struct Token {
  TokenKind kind = TokenKind::kNil;
  uint64_t offset = 0;   // of the type byte, relative to the cursor's base
  bool boolean = false;
  uint64_t uint = 0;     // kUInt (0 .. 2^64 - 1)
  int64_t integer = 0;   // kInt (negative values only, as msgpack encodes them)
  double real = 0;       // kFloat (float 32 widened)
  bool single = false;   // kFloat: stored as float 32
  uint64_t count = 0;    // kArray: items; kMap: pairs
  int8_t ext_type = 0;   // kExt
  uint64_t data = 0;     // kStr, kBin, kExt: payload offset relative to the base
  uint64_t size = 0;     // kStr, kBin, kExt: payload bytes
};

// Thrown by Cursor when a token lies past the bytes given but inside the
// declared total size: the rest of the file was not read (detection).
struct OutOfHead {};

class Cursor {
 public:
  // `bytes` are the first bytes of a message of `total_size` bytes; `base`
  // is the file offset of bytes[0] (for messages).
  Cursor(std::span<const std::byte> bytes, uint64_t total_size, uint64_t base = 0)
      : bytes_(bytes), total_(total_size), base_(base) {}

  // Reads the next token, skipping a str/bin/ext payload. Throws
  // Error{kCorrupt} (offset set) for the never-used byte 0xc1, for a
  // truncation, or for an array/map count that the remaining bytes cannot
  // hold (at least one byte per item); OutOfHead if it runs past `bytes`
  // but not past `total_size`.
  Token next();

  bool at_end() const { return pos_ == total_; }
  uint64_t position() const { return pos_; }
  uint64_t remaining() const { return total_ - pos_; }
  uint64_t file_offset(uint64_t relative) const { return base_ + relative; }
  std::span<const std::byte> bytes() const { return bytes_; }
  // The payload of a str/bin/ext token; nullopt if it is not all in `bytes`.
  std::optional<std::span<const std::byte>> payload(const Token& token) const;
  std::optional<std::string_view> text(const Token& token) const;

 private:
  const std::byte* take(uint64_t count);
  uint64_t big_endian(uint64_t width);
  void payload_of(Token& token, uint64_t size);

  std::span<const std::byte> bytes_;
  uint64_t total_;
  uint64_t base_;
  uint64_t pos_ = 0;
};

// The encoder: appends the smallest encoding, as Python's msgpack Packer
// (with use_bin_type=True) writes it.
void append_nil(std::string& out);
void append_bool(std::string& out, bool value);
void append_int(std::string& out, int64_t value);
void append_uint(std::string& out, uint64_t value);
void append_float64(std::string& out, double value);
void append_str(std::string& out, std::string_view text);
void append_bin_header(std::string& out, uint64_t size);
void append_array_header(std::string& out, uint64_t count);
void append_map_header(std::string& out, uint64_t count);
void append_ext_header(std::string& out, int8_t type, uint64_t size);

}  // namespace ckpt::flax_detail
