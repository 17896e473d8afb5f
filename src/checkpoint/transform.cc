// Transforms (include/ckpt/transform.h): renaming and dropping leaves by name.
//
// apply(const Tree&) works in three passes:
//  1. walk the tree: every leaf (empty containers included) with its dotted
//     name and its path of steps (key, container);
//  2. give each leaf its new name and, if renamed, its place in the new tree
//     (a Placement), checking that no two leaves get one name;
//  3. insert the leaves in tree order into a Builder, a trie that remembers
//     which source container each of its nodes copies, and emit it: a node
//     copying a list whose items all stayed in place becomes a list again,
//     and leaves whose path runs through another leaf become flat keys.

#include "ckpt/transform.h"

#include <algorithm>
#include <charconv>
#include <memory>
#include <regex>
#include <unordered_map>
#include <unordered_set>

#include "ckpt/error.h"
#include "checkpoint/glob.h"

namespace ckpt {
namespace {

using detail::Glob;

// std::regex_replace's format with sed's group references: "\1".."\9"
// become "$1".."$9" and "\\" a backslash.
std::string ecmascript_format(std::string_view replacement) {
  std::string format;
  for (size_t i = 0; i < replacement.size(); ++i) {
    const char next = i + 1 < replacement.size() ? replacement[i + 1] : '\0';
    if (replacement[i] == '\\' && next >= '1' && next <= '9') {
      format += '$';
      format += replacement[++i];
    } else if (replacement[i] == '\\' && next == '\\') {
      format += replacement[++i];
    } else {
      format += replacement[i];
    }
  }
  return format;
}

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

}  // namespace

struct Transforms::Step {
  enum class Kind { kRenamePrefix, kRenameRegex, kRenameTable, kDrop, kAddPrefix, kStripPrefix };
  Kind kind;
  std::string first;   // the prefix, pattern or glob
  std::string second;  // the new prefix or the replacement (as written)
  std::shared_ptr<const std::regex> regex;
  std::string format;  // the replacement for std::regex_replace
  std::shared_ptr<const std::map<std::string, std::string>> table;
  std::shared_ptr<const Glob> glob;

  std::string describe() const {
    switch (kind) {
      case Kind::kRenamePrefix: return "rename prefix " + in_quotes(first) + " -> " + in_quotes(second);
      case Kind::kRenameRegex: return "rename regex " + in_quotes(first) + " -> " + in_quotes(second);
      case Kind::kRenameTable:
        return "rename table of " + std::to_string(table->size()) + (table->size() == 1 ? " name" : " names");
      case Kind::kDrop: return "drop " + in_quotes(first);
      case Kind::kAddPrefix: return "add prefix " + in_quotes(first);
      case Kind::kStripPrefix: return "strip prefix " + in_quotes(first);
    }
    return {};
  }

  // `name` after this step, or nullopt if it drops it.
  std::optional<std::string> apply(std::string name) const {
    switch (kind) {
      case Kind::kRenamePrefix:
        if (first.empty()) {
          name = join_name(second, name);
        } else if (name_under(name, first)) {
          if (second.empty()) {
            name.erase(0, std::min(first.size() + 1, name.size()));
          } else {
            name.replace(0, first.size(), second);
          }
        }
        return name;
      case Kind::kRenameRegex: return std::regex_replace(name, *regex, format);
      case Kind::kRenameTable: {
        const auto found = table->find(name);
        return found == table->end() ? name : found->second;
      }
      case Kind::kDrop:
        if (glob->matches(name)) return std::nullopt;
        return name;
      case Kind::kAddPrefix: return join_name(first, name);
      case Kind::kStripPrefix:
        if (!first.empty() && name.size() > first.size() && name_under(name, first)) name.erase(0, first.size() + 1);
        return name;
    }
    return name;
  }
};

Transforms::Transforms() = default;
Transforms::Transforms(const Transforms&) = default;
Transforms::Transforms(Transforms&&) noexcept = default;
Transforms& Transforms::operator=(const Transforms&) = default;
Transforms& Transforms::operator=(Transforms&&) noexcept = default;
Transforms::~Transforms() = default;

Transforms& Transforms::rename_prefix(std::string from, std::string to) {
  steps_.push_back({Step::Kind::kRenamePrefix, std::move(from), std::move(to)});
  return *this;
}

Transforms& Transforms::rename_regex(std::string_view pattern, std::string replacement) {
  std::shared_ptr<const std::regex> regex;
  try {
    regex = std::make_shared<const std::regex>(pattern.begin(), pattern.end(), std::regex::ECMAScript);
  } catch (const std::regex_error& error) {
    throw Error(ErrorCode::kInvalidArgument,
                "invalid regular expression " + in_quotes(pattern) + ": " + error.what());
  }
  std::string format = ecmascript_format(replacement);
  steps_.push_back({Step::Kind::kRenameRegex, std::string(pattern), std::move(replacement), std::move(regex),
                    std::move(format)});
  return *this;
}

Transforms& Transforms::rename(std::map<std::string, std::string> table) {
  Step step{Step::Kind::kRenameTable};
  step.table = std::make_shared<const std::map<std::string, std::string>>(std::move(table));
  steps_.push_back(std::move(step));
  return *this;
}

Transforms& Transforms::drop(std::string glob) {
  Step step{Step::Kind::kDrop, std::move(glob)};
  step.glob = std::make_shared<const Glob>(step.first);
  steps_.push_back(std::move(step));
  return *this;
}

Transforms& Transforms::add_prefix(std::string prefix) {
  steps_.push_back({Step::Kind::kAddPrefix, std::move(prefix)});
  return *this;
}

Transforms& Transforms::strip_prefix(std::string prefix) {
  steps_.push_back({Step::Kind::kStripPrefix, std::move(prefix)});
  return *this;
}

std::vector<std::string> Transforms::describe() const {
  std::vector<std::string> lines;
  for (const Step& step : steps_) lines.push_back(step.describe());
  return lines;
}

std::optional<std::string> Transforms::apply(std::string_view name) const {
  std::string current(name);
  for (const Step& step : steps_) {
    const bool was_empty = current.empty();
    std::optional<std::string> next = step.apply(std::move(current));
    if (!next) return std::nullopt;
    if (next->empty() && !was_empty) {
      throw Error(ErrorCode::kInvalidArgument, "'" + step.describe() + "' leaves an empty name for " + in_quotes(name));
    }
    current = std::move(*next);
  }
  return current;
}

namespace {

constexpr size_t kNone = static_cast<size_t>(-1);

// One step down the source tree: a key and the container that holds it.
struct PathStep {
  const Tree* container;
  Key key;
  size_t parent;    // the step above, or kNone
  size_t name_end;  // the dotted name down to this key is name.substr(0, name_end) of any leaf below
};

// A leaf of the source tree (an empty container counts).
struct SourceLeaf {
  const Tree* value;
  size_t step;  // its last step
  std::string name;
};

struct SourceTree {
  std::vector<PathStep> steps;
  std::vector<SourceLeaf> leaves;

  void collect(const Tree& container, size_t parent, std::string& name) {
    for (const TreeEntry& entry : container.entries()) {
      const size_t mark = name.size();
      if (parent != kNone || mark != 0) name += '.';
      name += key_to_string(entry.key);
      steps.push_back({&container, entry.key, parent, name.size()});
      if (entry.value.is_container() && entry.value.size() > 0) {
        collect(entry.value, steps.size() - 1, name);
      } else {
        leaves.push_back({&entry.value, steps.size() - 1, name});
      }
      name.resize(mark);
    }
  }

  // The steps from the root down to `step`, into `path`.
  void path_to(size_t step, std::vector<const PathStep*>& path) const {
    path.clear();
    for (; step != kNone; step = steps[step].parent) path.push_back(&steps[step]);
    std::reverse(path.begin(), path.end());
  }
};

// Where a leaf goes in the new tree. An unchanged leaf keeps its path; a
// renamed one keeps the first `kept` keys of its path, in copies of the
// source's containers, and continues with `keys`.
struct Placement {
  std::optional<std::string> name;  // nullopt: dropped
  bool renamed = false;
  size_t kept = 0;
  std::vector<Key> keys;
};

// `part` as an integer key if it is one printed in decimal ("7", "-1"; not "07").
std::optional<int64_t> decimal(std::string_view part) {
  int64_t number = 0;
  const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), number);
  if (error != std::errc() || end != part.data() + part.size() || std::to_string(number) != part) return std::nullopt;
  return number;
}

// The header's rule for a renamed leaf: keep the containers of the longest
// path prefix that the new name starts with; below, one key per part when
// the parts are as many as the old path's; else the old path's last keys
// that the new name still ends with stay keys of their own, and what is left
// in between becomes one key.
void place_renamed(const std::vector<const PathStep*>& path, const std::string& old_name, Placement& placement) {
  const std::string& name = *placement.name;
  size_t kept = path.size() - 1;
  for (; kept > 0; --kept) {
    const size_t end = path[kept - 1]->name_end;
    if (name.size() > end && name[end] == '.' && name.compare(0, end, old_name, 0, end) == 0) break;
  }
  const std::string_view rest = std::string_view(name).substr(kept == 0 ? 0 : path[kept - 1]->name_end + 1);
  const size_t parts = static_cast<size_t>(std::count(rest.begin(), rest.end(), '.')) + 1;
  placement.kept = kept;
  if (parts == path.size() - kept) {
    size_t start = 0;
    for (size_t t = 0; t < parts; ++t) {
      const size_t dot = std::min(rest.find('.', start), rest.size());
      const std::string_view part = rest.substr(start, dot - start);
      const std::optional<int64_t> number = decimal(part);
      if (number && std::holds_alternative<int64_t>(path[kept + t]->key)) {
        placement.keys.emplace_back(*number);
      } else {
        placement.keys.emplace_back(std::string(part));
      }
      start = dot + 1;
    }
    return;
  }
  // Trailing keys that the new name still ends with ("model.encoder.w" ->
  // "enc.w" keeps "w" a key of its own under "enc").
  std::string_view head = rest;
  size_t suffix = 0;
  for (size_t i = path.size(); i > kept; --i) {
    const std::string key = key_to_string(path[i - 1]->key);
    if (head.size() <= key.size() || !head.ends_with(key) || head[head.size() - key.size() - 1] != '.') break;
    head.remove_suffix(key.size() + 1);
    ++suffix;
  }
  placement.keys.emplace_back(std::string(head));
  for (size_t i = path.size() - suffix; i < path.size(); ++i) placement.keys.push_back(path[i]->key);
}

struct KeyHash {
  size_t operator()(const Key& key) const noexcept { return std::hash<Key>{}(key); }
};

// The new tree, as a trie whose nodes remember the source container they
// copy. A slot may hold a leaf and a child node at once (a new name needs a
// leaf as a container): emit() then keeps the leaf under the key and the
// child's leaves beside it, each as one key holding the rest of its name.
class Builder {
 public:
  Builder(const Tree& root, const SourceTree& source, const std::vector<Placement>& placements)
      : source_(source), placements_(placements) {
    nodes_.push_back({&root});
  }

  void insert(size_t leaf_index, const std::vector<const PathStep*>& path) {
    const SourceLeaf& leaf = source_.leaves[leaf_index];
    const Placement& placement = placements_[leaf_index];
    const bool container = leaf.value->is_container();  // an empty one
    const size_t depth = placement.renamed ? placement.kept + placement.keys.size() : path.size();
    const size_t old_keys = placement.renamed ? placement.kept : path.size();
    const size_t copied = placement.renamed ? placement.kept : path.size() - 1;
    size_t node = 0;
    for (size_t d = 0; d < depth; ++d) {
      const Key& key = d < old_keys ? path[d]->key : placement.keys[d - old_keys];
      const bool last = d + 1 == depth;
      if (d >= old_keys || nodes_[node].source != path[d]->container) nodes_[node].altered = true;
      size_t slot = find(node, key);
      if (slot == kNone) {
        slot = add_slot(node, key, leaf_index);
        if (last && !container) {
          nodes_[node].slots[slot].leaf = leaf.value;
          return;
        }
      } else if (last && !container) {
        Slot& existing = nodes_[node].slots[slot];
        if (existing.leaf != nullptr) collision(leaf_index, existing.origin);
        existing.leaf = leaf.value;
        existing.origin = leaf_index;
        return;
      }
      if (nodes_[node].slots[slot].child == kNone) {
        // A copy of the source's container while the old path goes on (an
        // empty container copies itself), else a new map.
        const Tree* copy = last ? leaf.value : d + 1 <= copied ? path[d + 1]->container : nullptr;
        nodes_.push_back({copy});
        nodes_[node].slots[slot].child = nodes_.size() - 1;
      }
      node = nodes_[node].slots[slot].child;
    }
  }

  Tree emit(size_t index = 0) const {
    const Node& node = nodes_[index];
    bool flattened = false;
    for (const Slot& slot : node.slots) flattened = flattened || (slot.leaf != nullptr && slot.child != kNone);
    const bool list = node.source != nullptr && node.source->is_list() && !node.altered && !flattened &&
                      node.slots.size() == node.source->size();
    Tree out = list ? Tree::list() : Tree::map();
    out.reserve(node.slots.size());
    for (const Slot& slot : node.slots) {
      if (list) {
        out.push_back(slot.leaf != nullptr ? *slot.leaf : emit(slot.child));
      } else if (!flattened) {
        out.set(slot.key, slot.leaf != nullptr ? *slot.leaf : emit(slot.child));
      } else {
        if (slot.leaf != nullptr) add_unique(out, slot.key, *slot.leaf, slot.origin);
        if (slot.child != kNone && slot.leaf == nullptr) add_unique(out, slot.key, emit(slot.child), slot.origin);
        if (slot.child != kNone && slot.leaf != nullptr) flatten(slot.child, key_to_string(slot.key), out);
      }
    }
    return out;
  }

 private:
  struct Slot {
    Key key;
    const Tree* leaf = nullptr;
    size_t child = kNone;
    size_t origin = kNone;  // the leaf that made it
  };
  struct Node {
    const Tree* source;     // the source container this node copies, if any
    bool altered = false;   // holds a key that is not the source's own
    std::vector<Slot> slots;
    std::unique_ptr<std::unordered_map<Key, size_t, KeyHash>> index;  // for nodes with many slots
  };
  static constexpr size_t kIndexFrom = 16;

  size_t find(size_t node, const Key& key) const {
    const Node& n = nodes_[node];
    if (n.index) {
      const auto found = n.index->find(key);
      return found == n.index->end() ? kNone : found->second;
    }
    for (size_t i = 0; i < n.slots.size(); ++i) {
      if (n.slots[i].key == key) return i;
    }
    return kNone;
  }

  size_t add_slot(size_t node, const Key& key, size_t origin) {
    Node& n = nodes_[node];
    n.slots.push_back({key, nullptr, kNone, origin});
    if (n.index) {
      n.index->emplace(key, n.slots.size() - 1);
    } else if (n.slots.size() >= kIndexFrom) {
      n.index = std::make_unique<std::unordered_map<Key, size_t, KeyHash>>();
      n.index->reserve(std::max(n.source != nullptr ? n.source->size() : 0, 4 * kIndexFrom));
      for (size_t i = 0; i < n.slots.size(); ++i) n.index->emplace(n.slots[i].key, i);
    }
    return n.slots.size() - 1;
  }

  // The leaves below `node` as keys "prefix.rest" of `out`.
  void flatten(size_t node, const std::string& prefix, Tree& out) const {
    for (const Slot& slot : nodes_[node].slots) {
      const std::string name = prefix + "." + key_to_string(slot.key);
      if (slot.leaf != nullptr) add_unique(out, name, *slot.leaf, slot.origin);
      if (slot.child == kNone) continue;
      if (nodes_[slot.child].slots.empty()) {
        if (slot.leaf == nullptr) add_unique(out, name, emit(slot.child), slot.origin);
      } else {
        flatten(slot.child, name, out);
      }
    }
  }

  void add_unique(Tree& out, const Key& key, Tree value, size_t origin) const {
    if (out.find(key) != nullptr) {
      throw Error(ErrorCode::kInvalidArgument, "cannot place " + in_quotes(source_.leaves[origin].name) +
                                                   " renamed " + in_quotes(*placements_[origin].name) +
                                                   ": another leaf holds " + in_quotes(key_to_string(key)));
    }
    out.set(key, std::move(value));
  }

  [[noreturn]] void collision(size_t leaf, size_t other) const {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot place " + in_quotes(source_.leaves[leaf].name) + " renamed " +
                    in_quotes(*placements_[leaf].name) + ": it collides with " +
                    in_quotes(source_.leaves[other].name) + " renamed " + in_quotes(*placements_[other].name));
  }

  const SourceTree& source_;
  const std::vector<Placement>& placements_;
  std::vector<Node> nodes_;
};

[[noreturn]] void ambiguous(const SourceLeaf& first, const SourceLeaf& second, const std::string& name) {
  throw Error(ErrorCode::kInvalidArgument, "leaves " + in_quotes(first.name) + " and " + in_quotes(second.name) +
                                               " would both be named " + in_quotes(name));
}

}  // namespace

Tree Transforms::apply(const Tree& tree) const {
  if (steps_.empty() || !tree.is_container()) return tree;
  SourceTree source;
  std::string name;
  source.collect(tree, kNone, name);
  const std::vector<SourceLeaf>& leaves = source.leaves;

  std::vector<Placement> placements(leaves.size());
  std::vector<const PathStep*> path;
  // The new names of renamed leaves, each taken once; an unchanged leaf may
  // share its name only with other unchanged ones (an escaped pair of tree.h).
  std::unordered_map<std::string_view, size_t> renamed_names;
  renamed_names.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    Placement& placement = placements[i];
    placement.name = apply(std::string_view(leaves[i].name));
    placement.renamed = placement.name && *placement.name != leaves[i].name;
    if (!placement.renamed) continue;
    const auto [found, inserted] = renamed_names.emplace(*placement.name, i);
    if (!inserted) ambiguous(leaves[found->second], leaves[i], *placement.name);
    source.path_to(leaves[i].step, path);
    place_renamed(path, leaves[i].name, placement);
  }
  if (!renamed_names.empty()) {
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!placements[i].name || placements[i].renamed) continue;
      const auto found = renamed_names.find(*placements[i].name);
      if (found != renamed_names.end()) {
        ambiguous(leaves[std::min(i, found->second)], leaves[std::max(i, found->second)], *placements[i].name);
      }
    }
  }

  Builder builder(tree, source, placements);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!placements[i].name) continue;
    source.path_to(leaves[i].step, path);
    builder.insert(i, path);
  }
  return builder.emit();
}

}  // namespace ckpt
