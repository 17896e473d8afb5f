#include "formats/tree_json.h"

#include <simdjson.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "core/text.h"

namespace ckpt::detail {
namespace {

// Tags of the skeleton's tagged values (see tree_json.h).
constexpr std::string_view kMapTag = "map";
constexpr std::string_view kFloatTag = "float";
constexpr std::string_view kBytesTag = "bytes";
constexpr std::string_view kTensorTag = "tensor";
// Non-finite floats.
constexpr std::string_view kInfText = "inf";
constexpr std::string_view kNegativeInfText = "-inf";
constexpr std::string_view kNanText = "nan";
constexpr std::string_view kNanBitsPrefix = "nan:";
constexpr uint64_t kQuietNanBits = 0x7ff8000000000000ull;

constexpr char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

class SkeletonWriter {
 public:
  SkeletonWriter(JsonWriter& out, std::span<const Tree::Leaf> tensor_leaves)
      : out_(out), tensor_leaves_(tensor_leaves) {}

  void write(const Tree& node) {
    switch (node.kind()) {
      case Tree::Kind::kNone: out_.null(); break;
      case Tree::Kind::kBool: out_.boolean(node.boolean()); break;
      case Tree::Kind::kInt: out_.integer(node.integer()); break;
      case Tree::Kind::kFloat: write_float(node.real()); break;
      case Tree::Kind::kString:
        require_utf8(node.string(), "string leaf");
        out_.string(node.string());
        break;
      case Tree::Kind::kBytes:
        out_.begin_object();
        out_.key(kBytesTag);
        out_.string(base64_encode(node.bytes().data));
        out_.end_object();
        break;
      case Tree::Kind::kTensor: write_tensor(node); break;
      case Tree::Kind::kList:
        out_.begin_array();
        for (const TreeEntry& entry : node.entries()) visit_child(entry, Keys::kLeftOut);
        out_.end_array();
        break;
      case Tree::Kind::kMap:
        out_.begin_object();
        out_.key(kMapTag);
        out_.begin_array();
        for (const TreeEntry& entry : node.entries()) visit_child(entry, Keys::kWritten);
        out_.end_array();
        out_.end_object();
        break;
    }
  }

  void finish() const {
    if (next_tensor_ != tensor_leaves_.size()) {
      throw Error(ErrorCode::kInvalidArgument, "tensor leaf list names " + std::to_string(tensor_leaves_.size()) +
                                                   " tensors, the tree has " + std::to_string(next_tensor_));
    }
  }

 private:
  // A list's children are written bare, a map's as [key, value] pairs.
  enum class Keys { kLeftOut, kWritten };

  void visit_child(const TreeEntry& entry, Keys keys) {
    path_.push_back(&entry.key);
    if (keys == Keys::kWritten) {
      out_.begin_array();
      if (const auto* text = std::get_if<std::string>(&entry.key)) {
        require_utf8(*text, "map key");
        out_.string(*text);
      } else {
        out_.integer(std::get<int64_t>(entry.key));
      }
      write(entry.value);
      out_.end_array();
    } else {
      write(entry.value);
    }
    path_.pop_back();
  }

  void write_float(double value) {
    out_.begin_object();
    out_.key(kFloatTag);
    if (std::isfinite(value)) {
      out_.real(value);
    } else if (std::isinf(value)) {
      out_.string(value > 0 ? kInfText : kNegativeInfText);
    } else {
      const auto bits = std::bit_cast<uint64_t>(value);
      if (bits == kQuietNanBits) {
        out_.string(kNanText);
      } else {
        out_.string(std::string(kNanBitsPrefix) + detail::hex_digits(bits, 16));
      }
    }
    out_.end_object();
  }

  void write_tensor(const Tree& node) {
    if (next_tensor_ >= tensor_leaves_.size() || tensor_leaves_[next_tensor_].value != &node) {
      throw Error(ErrorCode::kInvalidArgument, "tensor leaf list does not match the tree",
                  {.entry = path()});
    }
    const std::string& name = tensor_leaves_[next_tensor_++].name;
    require_utf8(name, "tensor name");
    out_.begin_object();
    out_.key(kTensorTag);
    out_.string(name);
    out_.end_object();
  }

  void require_utf8(std::string_view text, std::string_view what) const {
    if (!detail::valid_utf8(text)) {
      throw Error(ErrorCode::kUnsupported, std::string(what) + " is not valid UTF-8, which JSON cannot hold",
                  {.entry = path()});
    }
  }

  std::string path() const {
    std::vector<std::string> parts;
    for (const Key* key : path_) parts.push_back(key_to_string(*key));
    return join_names(parts);
  }

  JsonWriter& out_;
  std::span<const Tree::Leaf> tensor_leaves_;
  size_t next_tensor_ = 0;
  std::vector<const Key*> path_;  // keys (list entries: positions) down to the node
};

class SkeletonReader {
 public:
  explicit SkeletonReader(const TensorResolver& resolve) : resolve_(resolve) {}

  Tree read(const simdjson::dom::element& node) {
    using Type = simdjson::dom::element_type;
    switch (node.type()) {
      case Type::NULL_VALUE: return Tree();
      case Type::BOOL: return Tree(bool(node.get_bool().value_unsafe()));
      case Type::INT64: return Tree(node.get_int64().value_unsafe());
      case Type::UINT64: fail("integer leaf does not fit in int64");
      case Type::DOUBLE: fail("bare number with a fraction or exponent; floats are written {\"float\": x}");
      case Type::STRING: return Tree(std::string(node.get_string().value_unsafe()));
      case Type::ARRAY: return read_list(node.get_array().value_unsafe());
      case Type::OBJECT: return read_tagged(node.get_object().value_unsafe());
    }
    fail("unknown JSON value");
  }

 private:
  // One step of the path to the node being read: a string key, or an
  // integer key / list position. Kept cheap; turned into text on errors only.
  struct Step {
    std::string_view text;
    int64_t number = 0;
    bool is_text = false;
  };

  std::string path() const {
    std::vector<std::string> parts;
    parts.reserve(path_.size());
    for (const Step& step : path_) parts.push_back(step.is_text ? std::string(step.text) : std::to_string(step.number));
    return join_names(parts);
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(ErrorCode::kCorrupt, "tree skeleton: " + message, {.entry = path()});
  }

  Tree read_list(const simdjson::dom::array& items) {
    Tree list = Tree::list();
    size_t position = 0;
    for (simdjson::dom::element item : items) {
      path_.push_back(Step{.number = static_cast<int64_t>(position++)});
      list.push_back(read(item));
      path_.pop_back();
    }
    return list;
  }

  Tree read_tagged(const simdjson::dom::object& object) {
    if (object.size() != 1) fail("an object must have exactly one key (map, float, bytes or tensor)");
    const simdjson::dom::key_value_pair field = *object.begin();
    if (field.key == kMapTag) return read_map(field.value);
    if (field.key == kFloatTag) return Tree(read_float(field.value));
    if (field.key == kBytesTag) {
      std::string_view text;
      if (field.value.get_string().get(text)) fail("\"bytes\" must be a base64 string");
      try {
        return Tree(Bytes{base64_decode(text)});
      } catch (Error& error) {
        fail(error.message());
      }
    }
    if (field.key == kTensorTag) {
      std::string_view name;
      if (field.value.get_string().get(name)) fail("\"tensor\" must be a string naming a stored tensor");
      try {
        return Tree(resolve_(name));
      } catch (Error& error) {
        error.with_entry(path());
        throw;
      }
    }
    fail("unknown tag \"" + std::string(field.key) + "\"");
  }

  Tree read_map(const simdjson::dom::element& value) {
    simdjson::dom::array pairs;
    if (value.get_array().get(pairs)) fail("\"map\" must be an array of [key, value] pairs");
    Tree map = Tree::map();
    for (simdjson::dom::element pair_element : pairs) {
      simdjson::dom::array pair;
      if (pair_element.get_array().get(pair) || pair.size() != 2) fail("map entry is not a [key, value] pair");
      const simdjson::dom::element key_element = pair.at(0).value_unsafe();
      Step step;
      if (!key_element.get_string().get(step.text)) {
        step.is_text = true;
      } else if (key_element.type() != simdjson::dom::element_type::INT64 || key_element.get_int64().get(step.number)) {
        fail("map key must be a string or an int64 integer");
      }
      path_.push_back(step);
      Tree child = read(pair.at(1).value_unsafe());
      path_.pop_back();
      const size_t before = map.size();
      map.set(step.is_text ? Key(std::string(step.text)) : Key(step.number), std::move(child));
      if (map.size() == before) {
        std::string key = step.is_text ? std::string(step.text) : std::to_string(step.number);
        if (step.is_text) key = std::string("\"").append(key).append("\"");
        fail("duplicate map key " + key);
      }
    }
    return map;
  }

  double read_float(const simdjson::dom::element& value) {
    if (value.type() == simdjson::dom::element_type::DOUBLE) return value.get_double().value_unsafe();
    std::string_view text;
    if (value.get_string().get(text)) fail("\"float\" must be a number with a fraction or exponent, or a string");
    if (text == kInfText) return std::numeric_limits<double>::infinity();
    if (text == kNegativeInfText) return -std::numeric_limits<double>::infinity();
    if (text == kNanText) return std::bit_cast<double>(kQuietNanBits);
    if (text.starts_with(kNanBitsPrefix) && text.size() == kNanBitsPrefix.size() + 16) {
      const std::string_view hex = text.substr(kNanBitsPrefix.size());
      uint64_t bits = 0;
      const auto result = std::from_chars(hex.data(), hex.data() + hex.size(), bits, 16);
      const bool lower_case = hex.find_first_of("ABCDEF") == std::string_view::npos;
      if (result.ec == std::errc() && result.ptr == hex.data() + hex.size() && lower_case &&
          std::isnan(std::bit_cast<double>(bits))) {
        return std::bit_cast<double>(bits);
      }
    }
    fail("unknown float text \"" + std::string(text) + "\"");
  }

  const TensorResolver& resolve_;
  std::vector<Step> path_;
};

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

void write_tree_json(JsonWriter& out, const Tree& tree, std::span<const Tree::Leaf> tensor_leaves) {
  SkeletonWriter writer(out, tensor_leaves);
  writer.write(tree);
  writer.finish();
}

std::string tree_to_json(const Tree& tree) {
  JsonWriter out;
  const std::vector<Tree::Leaf> leaves = tree.tensor_leaves();
  write_tree_json(out, tree, leaves);
  return out.take();
}

Tree tree_from_json(std::string_view json, const TensorResolver& resolve) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto error = parser.parse(json.data(), json.size()).get(root)) {
    throw Error(ErrorCode::kCorrupt, std::string("tree skeleton is not valid JSON: ") + simdjson::error_message(error));
  }
  return tree_from_json(root, resolve);
}

Tree tree_from_json(const simdjson::dom::element& json, const TensorResolver& resolve) {
  SkeletonReader reader(resolve);
  return reader.read(json);
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t group = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out += kBase64Alphabet[(group >> shift) & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t group = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) group |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kBase64Alphabet[(group >> 18) & 63];
    out += kBase64Alphabet[(group >> 12) & 63];
    out += rest == 2 ? kBase64Alphabet[(group >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) throw Error(ErrorCode::kCorrupt, "base64 length is not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (padding == 1 && text[i + 2] == '=') throw Error(ErrorCode::kCorrupt, "misplaced base64 padding");
    uint32_t group = 0;
    for (int j = 0; j < 4 - padding; ++j) {
      const int value = base64_value(text[i + j]);
      if (value < 0) throw Error(ErrorCode::kCorrupt, "invalid base64 character");
      group |= uint32_t(value) << (18 - 6 * j);
    }
    out += char(group >> 16);
    if (padding < 2) out += char(group >> 8);
    if (padding < 1) out += char(group);
    // Canonical form only: the bits below the last byte must be zero.
    if ((padding == 1 && (group & 0xff)) || (padding == 2 && (group & 0xffff))) {
      throw Error(ErrorCode::kCorrupt, "non-canonical base64 padding bits");
    }
  }
  return out;
}

}  // namespace ckpt::detail
