// Reading Flax msgpack files: one pass of the validating tokenizer over the
// mapped file, building the tree as it goes. Array bytes are never copied:
// every tensor views its ext payload's bytes in the mapping (unaligned where
// msgpack put them), except chunked arrays (a deferred buffer that gathers
// the chunks when first used) and complex scalars (16 bytes on the heap).
// Detection (detect_head) walks a file's head with the same tokenizer.

#include "formats/flax/reader.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/error.h"
#include "core/text.h"
#include "formats/flax/layout.h"
#include "formats/flax/msgpack.h"
#include "io/mapped_file.h"

namespace ckpt::flax_detail {
namespace {

// Children reserved up front at most: a count is only known to fit the
// bytes left (one byte per item), and a container's entries are far larger.
constexpr uint64_t kMaxReserve = 4096;

[[noreturn]] void fail(ErrorCode code, std::string message, uint64_t offset) {
  throw Error(code, std::move(message), {.offset = offset});
}

// A chunked array's bytes: its chunks (views of the mapped file) back to
// back, gathered into one heap block only when first asked for; copy_to()
// gathers straight into the caller's memory.
class ChunkedStorage final : public Storage {
 public:
  explicit ChunkedStorage(std::vector<Buffer> chunks) : chunks_(std::move(chunks)) {}
  StorageKind kind() const override { return StorageKind::kDeferred; }
  void copy_out(const std::byte* src, std::span<std::byte> dst) const override {
    if (src != nullptr) {  // a slice of the gathered bytes
      std::memcpy(dst.data(), src, dst.size());
      return;
    }
    gather(dst);
  }
  const std::byte* materialize() const override {
    std::call_once(once_, [this] {
      uint64_t total = 0;
      for (const Buffer& chunk : chunks_) total += chunk.size();
      Buffer buffer = Buffer::allocate(total);
      gather(buffer.mutable_bytes());
      gathered_ = std::move(buffer);
    });
    return gathered_.data();
  }

 private:
  void gather(std::span<std::byte> dst) const {
    size_t at = 0;
    for (const Buffer& chunk : chunks_) {
      chunk.copy_to(dst.subspan(at, chunk.size()));
      at += chunk.size();
    }
  }
  std::vector<Buffer> chunks_;
  mutable std::once_flag once_;
  mutable Buffer gathered_;
};

// One tensor leaf in document (= tree) order.
struct Record {
  uint64_t offset = 0;  // of the array bytes in the file; 0 if assembled
  uint64_t nbytes = 0;
  bool alias = false;
  std::string target;   // alias: the dotted name of the tied leaf
  uint64_t at = 0;      // alias: offset of the ext, for messages
};

// The parts of an ext 1 / ext 3 payload.
struct NdarrayPayload {
  Shape shape;
  DType dtype;
  uint64_t data = 0;  // file offset of the bytes
  uint64_t size = 0;
};

class Reader {
 public:
  explicit Reader(std::shared_ptr<const detail::MappedFile> file)
      : file_(std::move(file)), cursor_(file_->bytes(), file_->size()) {}

  Contents read() {
    Contents contents;
    contents.format = "flax";
    contents.tree = value(0);
    if (!cursor_.at_end()) {
      fail(ErrorCode::kCorrupt,
           std::to_string(cursor_.remaining()) + " unexpected bytes after the msgpack object (a Flax file "
           "holds exactly one)", cursor_.position());
    }
    resolve_aliases(contents.tree);
    const std::vector<Tree::Leaf> leaves = contents.tree.tensor_leaves();
    for (size_t i = 0; i < leaves.size() && i < records_.size(); ++i) {
      if (records_[i].alias) continue;
      const Tensor& tensor = leaves[i].value->tensor();
      contents.entries.push_back({.name = leaves[i].name, .dtype = tensor.dtype(), .shape = tensor.shape(),
                                  .offset = records_[i].offset, .nbytes = records_[i].nbytes});
    }
    return contents;
  }

  // The dotted path of the value being read, for messages.
  std::string entry() const {
    return join_names(keys_);
  }

 private:
  Tree value(size_t depth) {
    const Token token = cursor_.next();
    switch (token.kind) {
      case TokenKind::kNil: return Tree();
      case TokenKind::kBool: return Tree(token.boolean);
      case TokenKind::kUInt:
        if (token.uint > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail(ErrorCode::kUnsupported, "integer " + std::to_string(token.uint) + " exceeds 2^63 - 1, ckpt's int64",
               token.offset);
        }
        return Tree(static_cast<int64_t>(token.uint));
      case TokenKind::kInt: return Tree(token.integer);
      case TokenKind::kFloat: return Tree(token.real);
      case TokenKind::kStr: return Tree(std::string(utf8(token)));
      case TokenKind::kBin: return Tree(Bytes{std::string(*cursor_.text(token))});
      case TokenKind::kArray: return list(token, depth + 1);
      case TokenKind::kMap: return map(token, depth + 1);
      case TokenKind::kExt: return ext(token);
    }
    fail(ErrorCode::kCorrupt, "unknown token", token.offset);
  }

  void check_depth(size_t depth, const Token& token) const {
    if (depth > kMaxDepth) {
      fail(ErrorCode::kUnsupported, "containers nested deeper than " + std::to_string(kMaxDepth) +
                                        " levels (ckpt's limit)", token.offset);
    }
  }

  std::string_view utf8(const Token& token) const {
    const std::string_view text = *cursor_.text(token);
    if (!detail::valid_utf8(text)) fail(ErrorCode::kCorrupt, "msgpack str is not valid UTF-8", token.offset);
    return text;
  }

  Tree list(const Token& token, size_t depth) {
    check_depth(depth, token);
    Tree tree = Tree::list();
    tree.reserve(std::min<uint64_t>(token.count, kMaxReserve));
    for (uint64_t i = 0; i < token.count; ++i) {
      keys_.push_back(std::to_string(i));
      tree.push_back(value(depth));
      keys_.pop_back();
    }
    return tree;
  }

  Tree map(const Token& token, size_t depth) {
    check_depth(depth, token);
    Tree tree = Tree::map();
    tree.reserve(std::min<uint64_t>(token.count, kMaxReserve));
    for (uint64_t i = 0; i < token.count; ++i) {
      const Token key_token = cursor_.next();
      Key key;
      if (key_token.kind == TokenKind::kStr) {
        key = std::string(utf8(key_token));
      } else if (key_token.kind == TokenKind::kUInt &&
                 key_token.uint <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        key = static_cast<int64_t>(key_token.uint);
      } else if (key_token.kind == TokenKind::kInt) {
        key = key_token.integer;
      } else {
        fail(ErrorCode::kUnsupported, "map key is a msgpack " + std::string(token_kind_name(key_token.kind)) +
                                          "; ckpt keeps str and int64 keys (flax writes str keys)",
             key_token.offset);
      }
      if (tree.find(key) != nullptr) {
        fail(ErrorCode::kCorrupt, "duplicate map key " + detail::quoted(key_to_string(key)), key_token.offset);
      }
      keys_.push_back(key_to_string(key));
      tree.set(key, value(depth));
      keys_.pop_back();
    }
    if (tree.find(std::string(kChunkedMarkerKey)) != nullptr) return unchunk(tree, token.offset);
    return tree;
  }

  Tree ext(const Token& token) {
    switch (token.ext_type) {
      case kExtNdarray:
      case kExtNpScalar: {
        const NdarrayPayload array = ndarray(token);
        records_.push_back({.offset = array.data, .nbytes = array.size});
        return Tree(Tensor(array.dtype, array.shape, file_->slice(array.data, array.size)));
      }
      case kExtNativeComplex: return complex(token);
      case kExtCkptAlias: {
        Cursor inner = payload_cursor(token);
        const Token name = inner.next();
        if (name.kind != TokenKind::kStr || !inner.at_end()) {
          fail(ErrorCode::kCorrupt, "ckpt alias ext payload is not one msgpack str", token.offset);
        }
        records_.push_back({.alias = true, .target = std::string(*inner.text(name)), .at = token.offset});
        return Tree(Tensor::spec(DType::kFloat32, {}));
      }
      default:
        fail(ErrorCode::kUnsupported, "msgpack ext type " + std::to_string(token.ext_type) +
                                          " is not one of flax's (1 ndarray, 2 complex, 3 numpy scalar)",
             token.offset);
    }
  }

  Cursor payload_cursor(const Token& token) const {
    return Cursor(file_->bytes().subspan(token.data, token.size), token.size, token.data);
  }

  // (shape, dtype name, bytes): _ndarray_to_bytes.
  NdarrayPayload ndarray(const Token& token) const {
    Cursor inner = payload_cursor(token);
    const auto expect = [&](bool ok, const Token& at, const std::string& what) {
      if (!ok) fail(ErrorCode::kCorrupt, "ndarray ext payload: " + what, inner.file_offset(at.offset));
    };
    const Token tuple = inner.next();
    expect(tuple.kind == TokenKind::kArray && tuple.count == 3, tuple,
           "expected an array of 3 (shape, dtype, bytes), found a " + std::string(token_kind_name(tuple.kind)) +
               (tuple.kind == TokenKind::kArray ? " of " + std::to_string(tuple.count) : ""));
    const Token shape = inner.next();
    expect(shape.kind == TokenKind::kArray, shape, "shape is a " + std::string(token_kind_name(shape.kind)));
    if (shape.count > kMaxDimensions) {
      fail(ErrorCode::kUnsupported, "shape has " + std::to_string(shape.count) + " dimensions (numpy's limit is 64)",
           inner.file_offset(shape.offset));
    }
    NdarrayPayload array;
    for (uint64_t i = 0; i < shape.count; ++i) {
      const Token dimension = inner.next();
      expect(dimension.kind == TokenKind::kUInt, dimension, "shape holds a " +
                 std::string(token_kind_name(dimension.kind)) + (dimension.kind == TokenKind::kInt ? " below 0" : ""));
      expect(dimension.uint <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), dimension,
             "dimension " + std::to_string(dimension.uint) + " exceeds 2^63 - 1");
      array.shape.push_back(static_cast<int64_t>(dimension.uint));
    }
    const Token name = inner.next();
    expect(name.kind == TokenKind::kStr || name.kind == TokenKind::kBin, name,
           "dtype name is a " + std::string(token_kind_name(name.kind)));
    const std::string_view dtype_name = *inner.text(name);
    const std::optional<DType> dtype = dtype_from_name(dtype_name);
    if (!dtype) {
      fail(ErrorCode::kUnsupported, "dtype " + detail::quoted(dtype_name, {.max_bytes = 40}) + " is not one ckpt has",
           inner.file_offset(name.offset));
    }
    array.dtype = *dtype;
    const Token data = inner.next();
    expect(data.kind == TokenKind::kBin || data.kind == TokenKind::kStr, data,
           "array bytes are a " + std::string(token_kind_name(data.kind)));
    expect(inner.at_end(), data, std::to_string(inner.remaining()) + " unexpected bytes after the array bytes");
    uint64_t expected = 0;
    try {
      expected = checked_numel(array.shape, dtype_size(array.dtype)) * dtype_size(array.dtype);
    } catch (const Error&) {
      fail(ErrorCode::kCorrupt, "shape times the element size overflows 64 bits", inner.file_offset(shape.offset));
    }
    if (expected != data.size) {
      fail(ErrorCode::kCorrupt, "array bytes are " + std::to_string(data.size) + ", the shape and dtype " +
                                    std::string(dtype_name) + " need " + std::to_string(expected),
           inner.file_offset(data.offset));
    }
    array.data = inner.file_offset(data.data);
    array.size = data.size;
    return array;
  }

  // (real, imag): a Python complex, as a 0-d complex128 tensor.
  Tree complex(const Token& token) {
    Cursor inner = payload_cursor(token);
    const Token pair = inner.next();
    if (pair.kind != TokenKind::kArray || pair.count != 2) {
      fail(ErrorCode::kCorrupt, "complex ext payload is not an array of 2 (real, imag)", token.offset);
    }
    double parts[2];
    for (double& part : parts) {
      const Token number = inner.next();
      if (number.kind != TokenKind::kFloat) fail(ErrorCode::kCorrupt, "complex ext payload holds a non-float", token.offset);
      part = number.real;
    }
    if (!inner.at_end()) fail(ErrorCode::kCorrupt, "unexpected bytes after the complex ext payload", token.offset);
    records_.push_back({.offset = token.data, .nbytes = sizeof(parts)});
    return Tree(Tensor::from_bytes(DType::kComplex128, {}, std::as_bytes(std::span(parts))));
  }

  // {"__msgpack_chunked_array__": True, "shape": {"0": d0, ...}, "chunks":
  // {"0": flat array, ...}}: _chunk. One deferred buffer over the chunks.
  Tree unchunk(const Tree& tree, uint64_t offset) {
    const auto bad = [&](const std::string& what) {
      fail(ErrorCode::kCorrupt, "chunked array: " + what, offset);
    };
    const Tree* marker = tree.find(std::string(kChunkedMarkerKey));
    const Tree* shape_map = tree.find(std::string(kChunkedShapeKey));
    const Tree* chunks = tree.find(std::string(kChunkedChunksKey));
    if (marker->kind() != Tree::Kind::kBool || !marker->boolean()) bad("the marker is not True");
    if (tree.size() != 3 || shape_map == nullptr || chunks == nullptr) bad("expected exactly the keys marker, shape, chunks");
    if (!shape_map->is_map() || !chunks->is_map() || chunks->size() == 0) bad("shape and chunks must be maps, chunks not empty");
    Shape shape;
    for (size_t i = 0; i < shape_map->size(); ++i) {
      const TreeEntry& entry = shape_map->entries()[i];
      if (entry.key != Key(std::to_string(i)) || entry.value.kind() != Tree::Kind::kInt || entry.value.integer() < 0) {
        bad("shape is not {\"0\": d0, \"1\": d1, ...} with dimensions >= 0");
      }
      shape.push_back(entry.value.integer());
    }
    if (shape.size() > kMaxDimensions) bad("shape has more than 64 dimensions");
    const DType dtype = chunks->entries()[0].value.is_tensor() ? chunks->entries()[0].value.tensor().dtype() : DType::kBool;
    uint64_t total = 0;
    for (size_t i = 0; i < chunks->size(); ++i) {
      const TreeEntry& entry = chunks->entries()[i];
      if (entry.key != Key(std::to_string(i)) || !entry.value.is_tensor() || entry.value.tensor().ndim() != 1 ||
          entry.value.tensor().dtype() != dtype) {
        bad("chunks are not {\"0\": 1-d array, ...} of one dtype");
      }
      total += entry.value.tensor().nbytes();
    }
    uint64_t expected = 0;
    try {
      expected = checked_numel(shape, dtype_size(dtype)) * dtype_size(dtype);
    } catch (const Error&) {
      bad("shape times the element size overflows 64 bits");
    }
    if (expected != total) bad("chunks hold " + std::to_string(total) + " bytes, the shape needs " + std::to_string(expected));
    std::vector<Buffer> pieces;
    for (const TreeEntry& entry : chunks->entries()) pieces.push_back(entry.value.tensor().buffer());
    Buffer buffer = Buffer::deferred(std::make_shared<ChunkedStorage>(std::move(pieces)), total);
    const uint64_t first = records_[records_.size() - chunks->size()].offset;
    records_.resize(records_.size() - chunks->size());
    records_.push_back({.offset = first, .nbytes = total});
    return Tree(Tensor(dtype, std::move(shape), std::move(buffer)));
  }

  // Replaces alias placeholders by the tensors they name (earlier leaves).
  void resolve_aliases(Tree& tree) {
    std::vector<Tensor*> tensors;
    tree.for_each_tensor([&](Tensor& tensor) { tensors.push_back(&tensor); });
    std::vector<Tree::Leaf> leaves;
    for (size_t i = 0; i < records_.size() && i < tensors.size(); ++i) {
      if (!records_[i].alias) continue;
      const Tree* target = tree.find_path(records_[i].target);
      if (target == nullptr || !target->is_tensor() || !target->tensor().has_data()) {
        if (leaves.empty()) leaves = tree.tensor_leaves();
        throw Error(ErrorCode::kCorrupt, "ckpt alias names " + detail::quoted(records_[i].target) + ", which is not a stored tensor",
                    {.entry = leaves[i].name, .offset = records_[i].at});
      }
      *tensors[i] = target->tensor();
    }
  }

  std::shared_ptr<const detail::MappedFile> file_;
  Cursor cursor_;
  std::vector<std::string> keys_;
  std::vector<Record> records_;
};

// ---- Detection: does a file start as a Flax checkpoint? ----

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

Contents read_file(const std::filesystem::path& path, const LoadOptions& options) {
  std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(path);
  Reader reader(file);
  try {
    return reader.read();
  } catch (Error& error) {
    error.with_path(path).with_entry(reader.entry());
    throw;
  } catch (const OutOfHead&) {
    throw Error(ErrorCode::kCorrupt, "msgpack data is truncated", {.path = path, .entry = reader.entry()});
  }
}

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

}  // namespace ckpt::flax_detail
