// The flax Format: detection by content (a Flax checkpoint_<step> has no
// extension); reading in reader.cc, writing in writer.cc.

#include "formats/flax/flax_format.h"

#include <algorithm>

#include "ckpt/error.h"
#include "core/dtype_sets.h"
#include "core/text.h"
#include "formats/flax/layout.h"
#include "formats/flax/msgpack.h"

namespace ckpt {
namespace flax_detail {
namespace {

// An ext 1/3 payload: (shape of unsigned ints, a known dtype name, bytes).
// Not `whole`: only its start is in the head, and a name cut off by the
// head's end passes.
bool plausible_array_payload(Cursor& inner, bool whole) {
  const Token tuple = inner.next();
  if (tuple.kind != TokenKind::kArray || tuple.count != 3) return false;
  const Token shape = inner.next();
  if (shape.kind != TokenKind::kArray) return false;
  for (uint64_t i = 0; i < shape.count; ++i) {
    if (inner.next().kind != TokenKind::kUInt) return false;
  }
  const Token name = inner.next();
  const auto text = inner.text(name);
  if (name.kind != TokenKind::kStr || (text ? !dtype_from_name(*text).has_value() : whole)) return false;
  if (!whole) return true;
  const Token data = inner.next();
  return data.kind == TokenKind::kBin && inner.at_end();
}

// Walks one value of the head, validating what it can see. Throws Error or
// OutOfHead (see Cursor), or returns false for what a Flax file never holds.
bool plausible_value(Cursor& cursor, size_t depth) {
  if (depth > kMaxDepth) return false;
  const Token token = cursor.next();
  switch (token.kind) {
    case TokenKind::kStr: {
      // Strings and bytes are small in Flax files: one that runs past the
      // head is more likely a random length than a Flax leaf.
      const auto text = cursor.text(token);
      return text && detail::valid_utf8(*text);
    }
    case TokenKind::kBin: return cursor.payload(token).has_value();
    case TokenKind::kArray:
      for (uint64_t i = 0; i < token.count; ++i) {
        if (!plausible_value(cursor, depth + 1)) return false;
      }
      return true;
    case TokenKind::kMap:
      for (uint64_t i = 0; i < token.count; ++i) {
        const Token key = cursor.next();
        if (key.kind == TokenKind::kStr) {
          const auto text = cursor.text(key);
          if (!text || !detail::valid_utf8(*text)) return false;
        } else if (depth == 0 && i == 0) {
          return false;  // flax's keys are strings: the first one must be
        } else if (key.kind != TokenKind::kUInt && key.kind != TokenKind::kInt) {
          return false;
        }
        if (!plausible_value(cursor, depth + 1)) return false;
      }
      return true;
    case TokenKind::kExt: {
      if (token.ext_type != kExtNdarray && token.ext_type != kExtNpScalar) {
        return token.ext_type == kExtNativeComplex || token.ext_type == kExtCkptAlias;
      }
      const auto payload = cursor.payload(token);
      if (!payload) {
        // Only its start is in the head: check (shape, dtype name, ...) there.
        const auto seen = cursor.bytes().subspan(std::min<uint64_t>(token.data, cursor.bytes().size()));
        Cursor inner(seen, token.size);
        try {
          return plausible_array_payload(inner, /*whole=*/false);
        } catch (const OutOfHead&) {
          return true;
        }
      }
      Cursor inner(*payload, payload->size());
      return plausible_array_payload(inner, /*whole=*/true);
    }
    default:
      return true;
  }
}

}  // namespace

bool detect_head(std::span<const std::byte> head, uint64_t file_size) {
  if (head.empty() || head.size() > file_size) return false;
  const auto first = std::to_integer<uint8_t>(head[0]);
  if ((first & 0xf0) != kFixmap && first != kMap16 && first != kMap32) return false;
  Cursor cursor(head, file_size);
  try {
    if (!plausible_value(cursor, 0)) return false;
    return cursor.at_end();  // one msgpack object, exactly the whole file
  } catch (const OutOfHead&) {
    return true;  // valid as far as the head reaches
  } catch (const Error&) {
    return false;
  }
}

}  // namespace flax_detail

namespace {

class FlaxFormat final : public Format {
 public:
  std::string_view id() const override { return "flax"; }
  std::string_view description() const override {
    return "Flax msgpack (flax.serialization.to_bytes, flax.training.checkpoints checkpoint_<step>)";
  }
  std::vector<std::string_view> extensions() const override { return {".msgpack"}; }
  FormatCapabilities capabilities() const override {
    return {.read = true, .write = true, .nested_tree = true, .checksums = false, .metadata = false,
            .colliding_names = true, .ties = true};
  }
  std::vector<DType> dtypes() const override { return detail::numpy_and_ml_dtypes(); }

  bool detect(std::span<const std::byte> head, uint64_t file_size) const override {
    return flax_detail::detect_head(head, file_size);
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    return flax_detail::read_file(path, options);
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    try {
      flax_detail::write_file(path, tree, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }
};

}  // namespace

const Format& flax_format() {
  static const FlaxFormat kFormat;
  return kFormat;
}

}  // namespace ckpt
