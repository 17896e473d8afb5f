// Declared defaults (src/restore/defaults.h): covering, values, whole fields.

#include "restore/defaults.h"

#include <utility>

#include "ckpt/error.h"
#include "ckpt/transform.h"

namespace ckpt::detail {
namespace {

bool is_glob(std::string_view pattern) { return pattern.find_first_of("*?[") != std::string_view::npos; }

std::string describe(const FieldSelector& selector) {
  if (const auto* name = std::get_if<std::string>(&selector)) return "'" + *name + "'";
  return "the key path '" + path_text(std::get<KeyPath>(selector)) + "'";
}

// The child of `node` at `key`, or else at a key that prints as `key` does
// (the string "0", the integer key 0 and a list's first item are one).
const Tree* child_like(const Tree& node, const Key& key) {
  if (const Tree* child = node.find(key)) return child;
  const std::string text = key_to_string(key);
  for (const TreeEntry& entry : node.entries()) {
    if (key_to_string(entry.key) == text) return &entry.value;
  }
  return nullptr;
}

// Collects into `path` the keys from `node` down to `wanted`; false if
// `wanted` is not in the tree.
bool find_keys(const Tree& node, const Tree* wanted, KeyPath& path) {
  if (&node == wanted) return true;
  for (const TreeEntry& entry : node.entries()) {
    path.push_back(entry.key);
    if (find_keys(entry.value, wanted, path)) return true;
    path.pop_back();
  }
  return false;
}

// The cover of a leaf by the declared name `declared` (which it lies under).
Cover cover_by_name(size_t index, std::string_view declared, std::string_view name, const KeyPath& path) {
  Cover cover{.index = index};
  if (declared.empty()) {
    cover.relative_keys = path;
    return cover;
  }
  std::string joined;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i > 0) joined += '.';
    joined += key_to_string(path[i]);
    if (joined.size() < declared.size()) continue;
    if (joined != declared) break;
    cover.relative_keys.assign(path.begin() + static_cast<std::ptrdiff_t>(i) + 1, path.end());
    return cover;
  }
  // The declared name ends inside a key (or names an escaped leaf).
  if (name.size() > declared.size()) cover.relative_name = std::string(name.substr(declared.size() + 1));
  return cover;
}

}  // namespace

bool path_under(const KeyPath& path, const KeyPath& prefix) {
  if (path.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (path[i] != prefix[i]) return false;
  }
  return true;
}

std::string path_text(const KeyPath& path) {
  std::string text;
  for (const Key& key : path) append_name(text, key_to_string(key));
  return text;
}

std::optional<Cover> DeclaredDefaults::cover(std::string_view name, const KeyPath& path) const {
  for (size_t i = 0; i < declared_.size(); ++i) {
    const FieldSelector& selector = declared_[i].first;
    if (const auto* keys = std::get_if<KeyPath>(&selector)) {
      if (!path_under(path, *keys)) continue;
      const auto below = path.begin() + static_cast<std::ptrdiff_t>(keys->size());
      return Cover{.index = i, .relative_keys = KeyPath(below, path.end())};
    }
    const std::string& declared = std::get<std::string>(selector);
    if (is_glob(declared)) {
      if (glob_match(declared, name)) return Cover{.index = i};
    } else if (name_under(name, declared)) {
      return cover_by_name(i, declared, name, path);
    }
  }
  return std::nullopt;
}

const Tree& DeclaredDefaults::whole_value(size_t index) {
  const FieldDefault& declared = declared_[index].second;
  if (declared.kind() == FieldDefault::Kind::kValue) return declared.value_;
  if (declared.kind() != FieldDefault::Kind::kFactory) {
    throw Error(ErrorCode::kInvalidArgument, "a keep or init default has no value of its own");
  }
  if (!made_[index]) made_[index] = declared.factory_();
  return *made_[index];
}

Tree DeclaredDefaults::leaf_value(const Cover& cover, std::string_view name, const Tree& current) {
  const FieldDefault& declared = declared_[cover.index].second;
  Tree value;
  switch (declared.kind()) {
    case FieldDefault::Kind::kKeep: return current;
    case FieldDefault::Kind::kInit: value = declared.initializer_(name, current); break;
    case FieldDefault::Kind::kValue:
    case FieldDefault::Kind::kFactory: {
      const Tree* part = &whole_value(cover.index);
      if (!cover.relative_name.empty()) {
        part = part->find_path(cover.relative_name);
      } else {
        for (const Key& key : cover.relative_keys) {
          part = child_like(*part, key);
          if (part == nullptr) break;
        }
      }
      if (part == nullptr) {
        const std::string relative = cover.relative_name.empty() ? path_text(cover.relative_keys) : cover.relative_name;
        throw Error(ErrorCode::kInvalidArgument,
                    "the default declared for " + describe(declared_[cover.index].first) + " has no '" + relative + "'",
                    {.entry = std::string(name)});
      }
      value = *part;
      break;
    }
  }
  if (current.is_tensor() && value.is_tensor() && value.tensor().shape() != current.tensor().shape()) {
    throw Error(ErrorCode::kInvalidArgument,
                "the default has shape " + shape_text(value.tensor().shape()) + ", the target " +
                    shape_text(current.tensor().shape()),
                {.entry = std::string(name)});
  }
  return value;
}

std::vector<WholeField> DeclaredDefaults::whole_fields(const Tree& target, const std::vector<KeyPath>& leaf_paths,
                                                       const std::vector<std::optional<size_t>>& defaulted_by) {
  std::vector<WholeField> fields;
  for (size_t i = 0; i < declared_.size(); ++i) {
    const FieldDefault::Kind kind = declared_[i].second.kind();
    if (kind != FieldDefault::Kind::kValue && kind != FieldDefault::Kind::kFactory) continue;
    WholeField field{.index = i};
    const Tree* node = nullptr;
    if (const auto* keys = std::get_if<KeyPath>(&declared_[i].first)) {
      field.path = *keys;
      node = target.find_key_path(field.path);
    } else {
      const std::string& declared = std::get<std::string>(declared_[i].first);
      if (is_glob(declared)) continue;
      node = target.find_path(declared);
      if (node != nullptr && !find_keys(target, node, field.path)) node = nullptr;
    }
    if (node == nullptr || !node->is_container()) continue;
    bool any = false, all = true;
    for (size_t leaf = 0; leaf < leaf_paths.size() && all; ++leaf) {
      if (!path_under(leaf_paths[leaf], field.path)) continue;
      any = true;
      all = defaulted_by[leaf] == i;
    }
    if (any && all && !whole_value(i).is_container()) fields.push_back(std::move(field));
  }
  return fields;
}

}  // namespace ckpt::detail
