#include "formats/orbax/metadata.h"

#include <simdjson.h>

#include <charconv>
#include <map>
#include <memory>
#include <optional>

#include "core/text.h"
#include "formats/extras_json.h"

namespace ckpt::orbax_detail {
namespace {

using simdjson::dom::element;

[[noreturn]] void corrupt(const std::string& message, const ErrorContext& context, std::string_view entry = {}) {
  ErrorContext where = context;
  if (!entry.empty()) where.entry = std::string(entry);
  throw Error(ErrorCode::kCorrupt, message, where);
}

// Parses Python's repr of a tuple of strings; nullopt if `text` is not one.
std::optional<std::vector<std::string>> parse_tuple_repr(std::string_view text) {
  size_t at = 0;
  const auto skip_spaces = [&] {
    while (at < text.size() && text[at] == ' ') ++at;
  };
  if (text.empty() || text[0] != '(') return std::nullopt;
  ++at;
  std::vector<std::string> items;
  while (true) {
    skip_spaces();
    if (at < text.size() && text[at] == ')') break;
    if (at >= text.size() || (text[at] != '\'' && text[at] != '"')) return std::nullopt;
    const char quote = text[at++];
    std::string item;
    while (true) {
      if (at >= text.size()) return std::nullopt;
      const char c = text[at++];
      if (c == quote) break;
      if (c != '\\') {
        item += c;
        continue;
      }
      if (at >= text.size()) return std::nullopt;
      const char escaped = text[at++];
      switch (escaped) {
        case 'n': item += '\n'; break;
        case 'r': item += '\r'; break;
        case 't': item += '\t'; break;
        case 'x': {
          unsigned value = 0;
          if (at + 2 > text.size() || std::from_chars(text.data() + at, text.data() + at + 2, value, 16).ptr !=
                                          text.data() + at + 2) {
            return std::nullopt;
          }
          item += static_cast<char>(value);
          at += 2;
          break;
        }
        default: item += escaped;
      }
    }
    items.push_back(std::move(item));
    skip_spaces();
    if (at < text.size() && text[at] == ',') {
      ++at;
      continue;
    }
    if (at < text.size() && text[at] == ')') break;
    return std::nullopt;
  }
  if (at + 1 != text.size()) return std::nullopt;
  // "('a')" is a parenthesized string, not a tuple.
  if (items.size() == 1 && text.find(',') == std::string_view::npos) return std::nullopt;
  return items;
}

// The tree under construction: a node is a dict, a sequence or a leaf.
struct Node {
  enum class Kind { kUnset, kDict, kSequence, kLeaf } kind = Kind::kUnset;
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> children;
  std::map<std::string, size_t> index;
  Tree leaf;
};

Tree to_tree(Node& node, const std::string& name, const ErrorContext& context) {
  if (node.kind == Node::Kind::kLeaf) return std::move(node.leaf);
  if (node.kind == Node::Kind::kDict) {
    Tree out = Tree::map();
    for (auto& [key, child] : node.children) {
      out.set(key, to_tree(*child, join_name(name, key), context));
    }
    return out;
  }
  std::map<int64_t, Node*> ordered;
  for (auto& [key, child] : node.children) {
    int64_t position = -1;
    const auto parsed = std::from_chars(key.data(), key.data() + key.size(), position);
    if (parsed.ec != std::errc() || parsed.ptr != key.data() + key.size() || position < 0) {
      corrupt("sequence index " + detail::quoted(key) + " is not a non-negative integer", context, name);
    }
    ordered[position] = child.get();
  }
  Tree out = Tree::list();
  int64_t expected = 0;
  for (auto& [position, child] : ordered) {
    if (position != expected) {
      corrupt("list lacks index " + std::to_string(expected) + " (next is " + std::to_string(position) + ")", context,
              name);
    }
    ++expected;
    out.push_back(to_tree(*child, join_name(name, std::to_string(position)),
                          context));
  }
  return out;
}

void flatten(element value, const std::string& prefix, std::string_view skip, Metadata& out) {
  if (!skip.empty() && prefix == skip) return;
  simdjson::dom::object object;
  if (!value.get_object().get(object)) {
    for (const auto field : object) {
      flatten(field.value, join_name(prefix, field.key), skip, out);
    }
    return;
  }
  std::string_view text;
  if (!value.get_string().get(text)) {
    out[prefix] = std::string(text);
  } else {
    out[prefix] = simdjson::minify(value);
  }
}

}  // namespace

std::string MetadataLeaf::param_name() const {
  std::string name;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) name += '.';
    name += keys[i].name;
  }
  return name;
}

std::vector<MetadataLeaf> parse_tree_metadata(std::string_view json, const ErrorContext& context) {
  simdjson::dom::parser parser;
  element root;
  if (parser.parse(json.data(), json.size()).get(root)) corrupt("_METADATA is not valid JSON", context);
  simdjson::dom::object entries;
  if (root["tree_metadata"].get_object().get(entries)) corrupt("_METADATA lacks a tree_metadata object", context);
  std::vector<MetadataLeaf> leaves;
  for (const auto field : entries) {
    MetadataLeaf leaf;
    leaf.tuple = std::string(field.key);
    const std::optional<std::vector<std::string>> names = parse_tuple_repr(leaf.tuple);
    if (!names) corrupt("tree_metadata key is not a tuple of strings", context, leaf.tuple);
    simdjson::dom::array key_metadata;
    if (field.value["key_metadata"].get_array().get(key_metadata)) {
      for (const std::string& name : *names) leaf.keys.push_back({name, false});
    } else {
      for (element key : key_metadata) {
        std::string_view name;
        int64_t type = 0;
        if (key["key"].get_string().get(name) || key["key_type"].get_int64().get(type) ||
            (type != kKeyTypeSequence && type != kKeyTypeDict)) {
          corrupt("key_metadata entry lacks a string key or a key_type of 1 or 2", context, leaf.tuple);
        }
        leaf.keys.push_back({std::string(name), type == kKeyTypeSequence});
      }
      if (leaf.keys.size() != names->size()) {
        corrupt("key_metadata has " + std::to_string(leaf.keys.size()) + " keys, the tuple " +
                    std::to_string(names->size()),
                context, leaf.tuple);
      }
      for (size_t i = 0; i < leaf.keys.size(); ++i) {
        if (leaf.keys[i].name != (*names)[i]) corrupt("key_metadata disagrees with the tuple", context, leaf.tuple);
      }
    }
    std::string_view value_type;
    if (field.value["value_metadata"]["value_type"].get_string().get(value_type)) {
      corrupt("value_metadata lacks a value_type", context, leaf.tuple);
    }
    leaf.value_type = std::string(value_type);
    bool skip = false;
    if (!field.value["value_metadata"]["skip_deserialize"].get_bool().get(skip)) leaf.skip_deserialize = skip;
    leaves.push_back(std::move(leaf));
  }
  return leaves;
}

Tree build_tree(const std::vector<MetadataLeaf>& leaves, const std::function<Tree(const MetadataLeaf&)>& value,
                const ErrorContext& context) {
  Node root;
  for (const MetadataLeaf& leaf : leaves) {
    Node* node = &root;
    for (const MetadataKey& key : leaf.keys) {
      const Node::Kind kind = key.sequence ? Node::Kind::kSequence : Node::Kind::kDict;
      if (node->kind == Node::Kind::kUnset) node->kind = kind;
      if (node->kind != kind) {
        corrupt(std::string("a container holds both ") + (key.sequence ? "sequence indices" : "dict keys") +
                    " and other children or a value",
                context, leaf.tuple);
      }
      auto found = node->index.find(key.name);
      if (found == node->index.end()) {
        found = node->index.emplace(key.name, node->children.size()).first;
        node->children.emplace_back(key.name, std::make_unique<Node>());
      }
      node = node->children[found->second].second.get();
    }
    if (node->kind != Node::Kind::kUnset) corrupt("two entries claim one place in the tree", context, leaf.tuple);
    node->kind = Node::Kind::kLeaf;
    node->leaf = value(leaf);
  }
  if (root.kind == Node::Kind::kUnset) return Tree::map();
  return to_tree(root, "", context);
}

Metadata flatten_checkpoint_metadata(std::string_view json, const ErrorContext& context, std::string_view skip) {
  simdjson::dom::parser parser;
  element root;
  if (parser.parse(json.data(), json.size()).get(root) || !root.is_object()) {
    corrupt("_CHECKPOINT_METADATA is not a JSON object", context);
  }
  Metadata out;
  flatten(root, "", skip, out);
  return out;
}

std::optional<Record> find_record(element root, const ErrorContext& context) {
  simdjson::dom::object custom;
  element value;
  if (root["custom_metadata"].get_object().get(custom) || custom[kRecordKey].get(value)) return std::nullopt;
  ErrorContext where = context;
  where.entry = std::string(kRecordEntry);
  const auto bad = [&](const std::string& message) {
    throw Error(ErrorCode::kCorrupt, std::string(kRecordEntry) + ": " + message, where);
  };
  simdjson::dom::object fields;
  if (value.get_object().get(fields)) return std::nullopt;  // the caller's own "ckpt"
  element ignored;
  if (fields["version"].get(ignored) || fields["tree"].get(ignored)) return std::nullopt;
  std::optional<element> version, tree;
  detail::read_fields(fields, {{"version", &version}, {"tree", &tree}}, bad);
  Record record;
  record.version = detail::read_version(version, kRecordVersion, "record", where, bad);
  record.tree = *tree;  // present: checked above
  return record;
}

std::vector<std::string> item_names(std::string_view json) {
  simdjson::dom::parser parser;
  element root;
  simdjson::dom::object handlers;
  std::vector<std::string> names;
  if (parser.parse(json.data(), json.size()).get(root) || root["item_handlers"].get_object().get(handlers)) {
    return names;
  }
  for (const auto field : handlers) names.emplace_back(field.key);
  return names;
}

std::string python_tuple_repr(const std::vector<std::string>& items) {
  std::string out = "(";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    const std::string& item = items[i];
    const bool has_single = item.find('\'') != std::string::npos;
    const char quote = has_single && item.find('"') == std::string::npos ? '"' : '\'';
    out += quote;
    for (const char c : item) {
      const auto byte = static_cast<unsigned char>(c);
      if (c == '\\' || c == quote) {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (byte < 0x20 || byte == 0x7f) {
        out += "\\x" + detail::hex_digits(byte, 2);
      } else {
        out += c;
      }
    }
    out += quote;
  }
  if (items.size() == 1) out += ',';
  out += ')';
  return out;
}

}  // namespace ckpt::orbax_detail
