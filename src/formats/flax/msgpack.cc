#include "formats/flax/msgpack.h"


#include <bit>
#include <cstring>

#include "ckpt/error.h"
#include "formats/flax/layout.h"

namespace ckpt::flax_detail {

std::string_view token_kind_name(TokenKind kind) {
  switch (kind) {
    case TokenKind::kNil: return "nil";
    case TokenKind::kBool: return "bool";
    case TokenKind::kUInt:
    case TokenKind::kInt: return "int";
    case TokenKind::kFloat: return "float";
    case TokenKind::kStr: return "str";
    case TokenKind::kBin: return "bin";
    case TokenKind::kArray: return "array";
    case TokenKind::kMap: return "map";
    case TokenKind::kExt: return "ext";
  }
  return "unknown";
}


const std::byte* Cursor::take(uint64_t count) {
  if (count > total_ - pos_) {
    throw Error(ErrorCode::kCorrupt,
                "msgpack data is truncated: " + std::to_string(count) + " bytes needed, " +
                    std::to_string(total_ - pos_) + " left",
                {.offset = base_ + pos_});
  }
  if (pos_ + count > bytes_.size()) throw OutOfHead{};
  const std::byte* at = bytes_.data() + pos_;
  pos_ += count;
  return at;
}

uint64_t Cursor::big_endian(uint64_t width) {
  const std::byte* at = take(width);
  uint64_t value = 0;
  for (uint64_t i = 0; i < width; ++i) value = value << 8 | std::to_integer<uint64_t>(at[i]);
  return value;
}

void Cursor::payload_of(Token& token, uint64_t size) {
  if (size > total_ - pos_) {
    throw Error(ErrorCode::kCorrupt,
                "msgpack " + std::string(token_kind_name(token.kind)) + " of " + std::to_string(size) +
                    " bytes extends past the end (" + std::to_string(total_ - pos_) + " bytes left)",
                {.offset = base_ + token.offset});
  }
  token.data = pos_;
  token.size = size;
  pos_ += size;  // may pass the head: payload() then says so
}

std::optional<std::span<const std::byte>> Cursor::payload(const Token& token) const {
  if (token.data + token.size > bytes_.size()) return std::nullopt;
  return bytes_.subspan(token.data, token.size);
}

std::optional<std::string_view> Cursor::text(const Token& token) const {
  const auto bytes = payload(token);
  if (!bytes) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

Token Cursor::next() {
  Token token;
  token.offset = pos_;
  const auto type = std::to_integer<uint8_t>(*take(1));
  const auto container = [&](TokenKind kind, uint64_t count) {
    token.kind = kind;
    token.count = count;
    // Every item takes at least one byte: a count beyond the bytes left is a lie.
    const uint64_t items = kind == TokenKind::kMap ? 2 * count : count;
    if (items > total_ - pos_) {
      throw Error(ErrorCode::kCorrupt,
                  "msgpack " + std::string(token_kind_name(kind)) + " declares " + std::to_string(count) +
                      (kind == TokenKind::kMap ? " pairs" : " items") + " but only " +
                      std::to_string(total_ - pos_) + " bytes follow",
                  {.offset = base_ + token.offset});
    }
  };
  const auto ext = [&](uint64_t size) {
    token.kind = TokenKind::kExt;
    token.ext_type = static_cast<int8_t>(std::to_integer<uint8_t>(*take(1)));
    payload_of(token, size);
  };
  if (type <= kPositiveFixintMax) {
    token.kind = TokenKind::kUInt;
    token.uint = type;
  } else if (type >= kNegativeFixintMin) {
    token.kind = TokenKind::kInt;
    token.integer = static_cast<int8_t>(type);
  } else if (type < kFixarray) {
    container(TokenKind::kMap, type & 0x0f);
  } else if (type < kFixstr) {
    container(TokenKind::kArray, type & 0x0f);
  } else if (type <= 0xbf) {
    token.kind = TokenKind::kStr;
    payload_of(token, type & 0x1f);
  } else {
    switch (type) {
      case kNil: token.kind = TokenKind::kNil; break;
      case kFalse:
      case kTrue:
        token.kind = TokenKind::kBool;
        token.boolean = type == kTrue;
        break;
      case kBin8: case kBin16: case kBin32:
        token.kind = TokenKind::kBin;
        payload_of(token, big_endian(uint64_t{1} << (type - kBin8)));
        break;
      case kExt8: case kExt16: case kExt32: {
        const uint64_t size = big_endian(uint64_t{1} << (type - kExt8));
        ext(size);
        break;
      }
      case kFloat32:
        token.kind = TokenKind::kFloat;
        token.single = true;
        token.real = std::bit_cast<float>(static_cast<uint32_t>(big_endian(4)));
        break;
      case kFloat64:
        token.kind = TokenKind::kFloat;
        token.real = std::bit_cast<double>(big_endian(8));
        break;
      case kUInt8: case kUInt16: case kUInt32: case kUInt64:
        token.kind = TokenKind::kUInt;
        token.uint = big_endian(uint64_t{1} << (type - kUInt8));
        break;
      case kInt8: case kInt16: case kInt32: case kInt64: {
        const uint64_t width = uint64_t{1} << (type - kInt8);
        const uint64_t raw = big_endian(width);
        const int shift = static_cast<int>(64 - 8 * width);
        const auto value = static_cast<int64_t>(raw << shift) >> shift;  // sign-extend
        if (value >= 0) {
          token.kind = TokenKind::kUInt;
          token.uint = static_cast<uint64_t>(value);
        } else {
          token.kind = TokenKind::kInt;
          token.integer = value;
        }
        break;
      }
      case kFixext1: case kFixext2: case kFixext4: case kFixext8: case kFixext16:
        ext(uint64_t{1} << (type - kFixext1));
        break;
      case kStr8: case kStr16: case kStr32:
        token.kind = TokenKind::kStr;
        payload_of(token, big_endian(uint64_t{1} << (type - kStr8)));
        break;
      case kArray16: case kArray32:
        container(TokenKind::kArray, big_endian(type == kArray16 ? 2 : 4));
        break;
      case kMap16: case kMap32:
        container(TokenKind::kMap, big_endian(type == kMap16 ? 2 : 4));
        break;
      default:  // 0xc1
        throw Error(ErrorCode::kCorrupt, "byte 0xc1 is not a msgpack type (\"never used\")",
                    {.offset = base_ + token.offset});
    }
  }
  return token;
}

namespace {

void put_big_endian(std::string& out, uint64_t value, int width) {
  for (int i = width - 1; i >= 0; --i) out.push_back(static_cast<char>(value >> (8 * i)));
}

// A type byte for one of three widths (8/16/32-bit length), as the spec picks.
void sized_header(std::string& out, uint8_t type8, uint64_t size) {
  if (size <= 0xff) {
    out.push_back(static_cast<char>(type8));
    put_big_endian(out, size, 1);
  } else if (size <= 0xffff) {
    out.push_back(static_cast<char>(type8 + 1));
    put_big_endian(out, size, 2);
  } else {
    out.push_back(static_cast<char>(type8 + 2));
    put_big_endian(out, size, 4);
  }
}

}  // namespace

void append_nil(std::string& out) { out.push_back(static_cast<char>(kNil)); }
void append_bool(std::string& out, bool value) { out.push_back(static_cast<char>(value ? kTrue : kFalse)); }

// msgpack-python's Packer: unsigned forms for non-negative values, signed
// forms for negative ones, the narrowest that holds the value.
void append_uint(std::string& out, uint64_t value) {
  if (value <= kPositiveFixintMax) {
    out.push_back(static_cast<char>(value));
  } else if (value <= 0xff) {
    out.push_back(static_cast<char>(kUInt8));
    put_big_endian(out, value, 1);
  } else if (value <= 0xffff) {
    out.push_back(static_cast<char>(kUInt16));
    put_big_endian(out, value, 2);
  } else if (value <= 0xffffffff) {
    out.push_back(static_cast<char>(kUInt32));
    put_big_endian(out, value, 4);
  } else {
    out.push_back(static_cast<char>(kUInt64));
    put_big_endian(out, value, 8);
  }
}

void append_int(std::string& out, int64_t value) {
  if (value >= 0) return append_uint(out, static_cast<uint64_t>(value));
  const auto bits = static_cast<uint64_t>(value);
  if (value >= -32) {
    out.push_back(static_cast<char>(value));
  } else if (value >= INT8_MIN) {
    out.push_back(static_cast<char>(kInt8));
    put_big_endian(out, bits, 1);
  } else if (value >= INT16_MIN) {
    out.push_back(static_cast<char>(kInt16));
    put_big_endian(out, bits, 2);
  } else if (value >= INT32_MIN) {
    out.push_back(static_cast<char>(kInt32));
    put_big_endian(out, bits, 4);
  } else {
    out.push_back(static_cast<char>(kInt64));
    put_big_endian(out, bits, 8);
  }
}

void append_float64(std::string& out, double value) {
  out.push_back(static_cast<char>(kFloat64));
  put_big_endian(out, std::bit_cast<uint64_t>(value), 8);
}

void append_str(std::string& out, std::string_view text) {
  if (text.size() <= 31) {
    out.push_back(static_cast<char>(kFixstr | text.size()));
  } else {
    sized_header(out, kStr8, text.size());
  }
  out += text;
}

void append_bin_header(std::string& out, uint64_t size) { sized_header(out, kBin8, size); }

void append_array_header(std::string& out, uint64_t count) {
  if (count <= 15) {
    out.push_back(static_cast<char>(kFixarray | count));
  } else if (count <= 0xffff) {
    out.push_back(static_cast<char>(kArray16));
    put_big_endian(out, count, 2);
  } else {
    out.push_back(static_cast<char>(kArray32));
    put_big_endian(out, count, 4);
  }
}

void append_map_header(std::string& out, uint64_t count) {
  if (count <= 15) {
    out.push_back(static_cast<char>(kFixmap | count));
  } else if (count <= 0xffff) {
    out.push_back(static_cast<char>(kMap16));
    put_big_endian(out, count, 2);
  } else {
    out.push_back(static_cast<char>(kMap32));
    put_big_endian(out, count, 4);
  }
}

void append_ext_header(std::string& out, int8_t type, uint64_t size) {
  switch (size) {
    case 1: out.push_back(static_cast<char>(kFixext1)); break;
    case 2: out.push_back(static_cast<char>(kFixext2)); break;
    case 4: out.push_back(static_cast<char>(kFixext4)); break;
    case 8: out.push_back(static_cast<char>(kFixext8)); break;
    case 16: out.push_back(static_cast<char>(kFixext16)); break;
    default: sized_header(out, kExt8, size);
  }
  out.push_back(static_cast<char>(type));
}

}  // namespace ckpt::flax_detail
