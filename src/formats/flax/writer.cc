// Writing Flax msgpack files as flax.serialization.to_bytes does:
// to_state_dict's maps of string keys (lists as maps keyed "0".."n-1",
// integer keys as their decimal strings), then msgpack_serialize's smallest
// encodings, insertion order, use_bin_type. The writer lays the
// whole file out first (the msgpack text around the array bytes), then
// hands text and array bytes to AtomicFile::write_parallel as positioned
// writes; array bytes are never copied into the text.

#include "formats/flax/writer.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <variant>
#include <vector>

#include "ckpt/error.h"
#include "core/text.h"
#include "formats/flax/layout.h"
#include "formats/flax/msgpack.h"
#include "formats/ties.h"
#include "io/atomic_file.h"

namespace ckpt::flax_detail {
namespace {

[[noreturn]] void unsupported(std::string message, const std::string& entry) {
  throw Error(ErrorCode::kUnsupported, std::move(message), {.entry = entry});
}

// After text_[previous piece's text_end, text_end) come `bytes` (maybe none).
struct Piece {
  size_t text_end = 0;
  std::span<const std::byte> bytes;
};

class Encoder {
 public:
  Encoder(const Tree& tree, const SaveOptions& options, uint64_t max_chunk_size)
      : leaves_(tree.tensor_leaves()), max_chunk_size_(max_chunk_size) {
    tied_to_ = options.extras ? detail::find_ties(leaves_) : std::vector<size_t>(leaves_.size(), detail::kNotTied);
  }

  // Appends `node`, at `depth` below the root, as to_bytes writes the state
  // dict of the same Python value.
  void encode(const Tree& node, const std::string& name, size_t depth) {
    if (depth > kMaxDepth) unsupported("tree nested deeper than " + std::to_string(kMaxDepth) + " levels", name);
    switch (node.kind()) {
      case Tree::Kind::kNone: return append_nil(text_);
      case Tree::Kind::kBool: return append_bool(text_, node.boolean());
      case Tree::Kind::kInt: return append_int(text_, node.integer());
      case Tree::Kind::kFloat: return append_float64(text_, node.real());
      case Tree::Kind::kString:
        if (!detail::valid_utf8(node.string())) unsupported("string leaf is not valid UTF-8 (msgpack str)", name);
        return append_str(text_, node.string());
      case Tree::Kind::kBytes:
        check_length(node.bytes().data.size(), name);
        append_bin_header(text_, node.bytes().data.size());
        text_ += node.bytes().data;
        return;
      case Tree::Kind::kTensor: return tensor(node.tensor(), name);
      case Tree::Kind::kList:
        // _list_state_dict: {str(i): x}, for lists and tuples alike.
        append_map_header(text_, node.size());
        for (size_t i = 0; i < node.size(); ++i) {
          const std::string key = std::to_string(i);
          append_str(text_, key);
          encode(node.entries()[i].value, join_name(name, key), depth + 1);
        }
        return;
      case Tree::Kind::kMap:
        check_string_keys_unique(node, name);
        append_map_header(text_, node.size());
        for (const TreeEntry& entry : node.entries()) {
          // _dict_state_dict: {str(key): x}; an integer key is its decimal.
          const std::string key = key_to_string(entry.key);
          if (!detail::valid_utf8(key)) unsupported("map key is not valid UTF-8 (msgpack str)", join_name(name, key));
          append_str(text_, key);
          encode(entry.value, join_name(name, key), depth + 1);
        }
        return;
    }
  }

  const std::string& text() const { return text_; }
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  static void check_length(uint64_t size, const std::string& name) {
    if (size > 0xffffffffull) unsupported("a msgpack bin or ext holds at most 2^32 - 1 bytes", name);
  }

  // A map with integer keys must not get one key twice as strings ({1: a,
  // "1": b}): _dict_state_dict refuses it too ("Dict keys do not have a
  // unique string representation").
  static void check_string_keys_unique(const Tree& map, const std::string& name) {
    const auto& entries = map.entries();
    if (std::none_of(entries.begin(), entries.end(),
                     [](const TreeEntry& entry) { return std::holds_alternative<int64_t>(entry.key); })) {
      return;
    }
    std::unordered_set<std::string> seen;
    seen.reserve(entries.size());
    for (const TreeEntry& entry : entries) {
      std::string key = key_to_string(entry.key);
      if (!seen.insert(key).second) {
        unsupported("the integer key and the string key '" + key +
                        "' would be one msgpack key (Flax writes keys as strings)",
                    join_name(name, key));
      }
    }
  }

  // A tensor of more than max_chunk_size_ bytes is chunked wherever it is:
  // every container of a state dict is a dict, which
  // _chunk_array_leaves_in_place recurses into.
  void tensor(const Tensor& tensor, const std::string& name) {
    const size_t index = tensor_index_++;
    if (!tensor.has_data()) unsupported("tensor has no data (a spec)", name);
    if (tied_to_[index] != detail::kNotTied) {
      std::string payload;
      append_str(payload, leaves_[tied_to_[index]].name);
      append_ext_header(text_, kExtCkptAlias, payload.size());
      text_ += payload;
      return;
    }
    const size_t element = dtype_size(tensor.dtype());
    if (tensor.nbytes() > max_chunk_size_) {
      // _chunk: a map of marker, shape and flat chunks of max_chunk_size /
      // itemsize elements each.
      append_map_header(text_, 3);
      append_str(text_, kChunkedMarkerKey);
      append_bool(text_, true);
      append_str(text_, kChunkedShapeKey);
      append_map_header(text_, tensor.ndim());
      for (size_t i = 0; i < tensor.ndim(); ++i) {
        append_str(text_, std::to_string(i));
        append_int(text_, tensor.shape()[i]);
      }
      append_str(text_, kChunkedChunksKey);
      const uint64_t per_chunk = std::max<uint64_t>(1, max_chunk_size_ / element) * element;
      const uint64_t count = (tensor.nbytes() + per_chunk - 1) / per_chunk;
      append_map_header(text_, count);
      for (uint64_t i = 0; i < count; ++i) {
        append_str(text_, std::to_string(i));
        const uint64_t begin = i * per_chunk;
        const uint64_t size = std::min<uint64_t>(per_chunk, tensor.nbytes() - begin);
        array(tensor.dtype(), {static_cast<int64_t>(size / element)}, tensor.bytes().subspan(begin, size), name);
      }
      return;
    }
    array(tensor.dtype(), tensor.shape(), tensor.bytes(), name);
  }

  // ext 1: (shape, dtype name, bytes) as _ndarray_to_bytes packs them.
  void array(DType dtype, const Shape& shape, std::span<const std::byte> bytes, const std::string& name) {
    std::string head;
    append_array_header(head, 3);
    append_array_header(head, shape.size());
    for (int64_t dimension : shape) append_int(head, dimension);
    append_str(head, dtype_name(dtype));
    append_bin_header(head, bytes.size());
    check_length(head.size() + bytes.size(), name);
    append_ext_header(text_, kExtNdarray, head.size() + bytes.size());
    text_ += head;
    pieces_.push_back({text_.size(), bytes});
  }

  std::vector<Tree::Leaf> leaves_;
  std::vector<size_t> tied_to_;
  uint64_t max_chunk_size_;
  size_t tensor_index_ = 0;
  std::string text_;
  std::vector<Piece> pieces_;
};

}  // namespace

void write_file(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options,
                uint64_t max_chunk_size) {
  Encoder encoder(tree, options, max_chunk_size);
  encoder.encode(tree, "", 0);
  const std::string& text = encoder.text();
  const auto text_bytes = std::as_bytes(std::span(text));

  std::vector<detail::WriteSpan> spans;
  spans.reserve(2 * encoder.pieces().size() + 1);
  uint64_t offset = 0;
  size_t text_at = 0;
  const auto add = [&](std::span<const std::byte> bytes) {
    if (bytes.empty()) return;
    spans.push_back({bytes, offset, nullptr});
    offset += bytes.size();
  };
  for (const Piece& piece : encoder.pieces()) {
    add(text_bytes.subspan(text_at, piece.text_end - text_at));
    text_at = piece.text_end;
    add(piece.bytes);
  }
  add(text_bytes.subspan(text_at));

  detail::AtomicFile file(path, {.fsync = options.fsync});
  file.resize(offset);
  file.write_parallel(spans, options.threads);
  file.commit();
}

}  // namespace ckpt::flax_detail
