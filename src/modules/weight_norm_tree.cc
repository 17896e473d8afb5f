// apply_tree_edit (weight_norm_tree.h).

#include "modules/weight_norm_tree.h"

#include "ckpt/error.h"
#include "ckpt/transform.h"

namespace ckpt::detail {
namespace {

struct PendingLeaf {
  std::string name;
  Tree value;
};

// Puts `value` at `rest` (a dotted name relative to `map`).
void insert_edited_leaf(Tree& map, const std::string& rest, Tree value, bool nested) {
  Tree* node = &map;
  std::string remaining = rest;
  while (nested) {
    const size_t dot = remaining.find('.');
    if (dot == std::string::npos) break;
    const std::string part = remaining.substr(0, dot);
    Tree* next = node->find(part);
    if (next == nullptr) next = &node->set(part, Tree::map());
    if (!next->is_map()) break;  // a leaf of that name: the rest stays one key
    node = next;
    remaining = remaining.substr(dot + 1);
  }
  node->set(remaining, std::move(value));
}

// Places the pending leaves that lie under `name` (a map's) into `out`,
// hands the others up.
void place_pending(Tree& out, const std::string& name, std::vector<PendingLeaf>& pending,
                   std::vector<PendingLeaf>& up, bool nested) {
  for (PendingLeaf& leaf : pending) {
    if (out.is_map() && leaf.name != name && name_under(leaf.name, name)) {
      const std::string rest = name.empty() ? leaf.name : leaf.name.substr(name.size() + 1);
      insert_edited_leaf(out, rest, std::move(leaf.value), nested);
    } else {
      up.push_back(std::move(leaf));
    }
  }
  pending.clear();
}

Tree rebuild_edited(const Tree& node, const std::string& name, const TreeEdit& edit, bool nested,
                    std::vector<PendingLeaf>& up) {
  Tree out = node.is_map() ? Tree::map() : Tree::list();
  std::vector<PendingLeaf> pending;
  for (size_t position = 0; position < node.size(); ++position) {
    const Tree& child = node.child(position);
    const Key key = node.key_at(position);
    const std::string child_name = join_name(name, key_to_string(key));
    bool keep = true;
    Tree value;
    if (child.is_container() && child.size() > 0) {
      value = rebuild_edited(child, child_name, edit, nested, pending);
      keep = value.size() > 0;  // it held removed leaves only
    } else {
      keep = edit.removed.count(child_name) == 0;
      if (keep) value = child;
      if (const auto added = edit.added.find(child_name); added != edit.added.end()) {
        for (const auto& [new_name, new_value] : added->second) pending.push_back({new_name, new_value});
      }
    }
    if (keep) {
      if (out.is_map()) {
        out.set(key, std::move(value));
      } else {
        out.push_back(std::move(value));
      }
    }
    place_pending(out, name, pending, up, nested);
  }
  return out;
}

}  // namespace

Tree apply_tree_edit(const Tree& tree, const TreeEdit& edit, bool nested) {
  if (!tree.is_container()) return tree;
  std::vector<PendingLeaf> up;
  Tree out = rebuild_edited(tree, "", edit, nested, up);
  if (!up.empty()) {
    throw Error(ErrorCode::kUnsupported, "cannot put a new leaf into a list", {.entry = up.front().name});
  }
  return out;
}

}  // namespace ckpt::detail
