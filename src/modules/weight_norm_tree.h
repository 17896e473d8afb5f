#pragma once
// Rewriting some leaves of a tree by name, for weight norm's converters
// (weight_norm.cc): leaves removed, and new leaves put where one of the
// removed ones was, the rest of the tree untouched (leaves shared).

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/tree.h"

namespace ckpt::detail {

struct TreeEdit {
  // Dotted names (join_name of the keys, as tree.h names leaves) of the
  // leaves to leave out.
  std::set<std::string> removed;
  // Per removed leaf (its name), the new leaves that take its place, in order.
  std::map<std::string, std::vector<std::pair<std::string, Tree>>> added;
};

// `tree` with `edit` applied. A new leaf goes into the deepest map on the
// removed leaf's path whose dotted name its own name lies under: the rest of
// its name one key there (flat), or one nested map per part of it (`nested`;
// maps there already are gone into). Containers that held nothing but
// removed leaves are left out.
// Throws Error{kUnsupported} naming the leaf where a new leaf would have to
// go into a list.
Tree apply_tree_edit(const Tree& tree, const TreeEdit& edit, bool nested);

}  // namespace ckpt::detail
