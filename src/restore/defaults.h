#pragma once
// The declared defaults of one restore() (RestoreOptions::defaults) against
// its target: which declaration covers a leaf, the value a defaulted leaf
// takes, and the declared subtrees that take their value whole. See
// FieldDefault in include/ckpt/restore.h for the rules.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/restore.h"

namespace ckpt::detail {

// Where a covered leaf lies below the declaration that covers it.
struct Cover {
  size_t index = 0;  // into RestoreOptions::defaults
  // The leaf's keys below the declared node; or, where a declared name ends
  // inside one of the leaf's keys, the rest of the leaf's dotted name.
  KeyPath relative_keys;
  std::string relative_name;
  bool whole() const noexcept { return relative_keys.empty() && relative_name.empty(); }
};

// A declared subtree that takes its default's value whole.
struct WholeField {
  size_t index = 0;  // into RestoreOptions::defaults
  KeyPath path;      // the subtree in the target
};

class DeclaredDefaults {
 public:
  using Declarations = std::vector<std::pair<FieldSelector, FieldDefault>>;

  explicit DeclaredDefaults(const Declarations& declared) : declared_(declared), made_(declared.size()) {}

  // The first declaration that covers the leaf named `name` at `path`, or
  // nullopt if none does.
  std::optional<Cover> cover(std::string_view name, const KeyPath& path) const;

  // The kind of declaration `index`.
  FieldDefault::Kind kind(size_t index) const { return declared_[index].second.kind(); }

  // The value the defaulted leaf `name` takes; `current` is the target's
  // leaf. Makes a factory's value the first time it is needed.
  // Throws Error{kInvalidArgument} if a value has nothing at the leaf's
  // relative path, or has a tensor of another shape for a tensor leaf.
  Tree leaf_value(const Cover& cover, std::string_view name, const Tree& current);

  // The whole value of declaration `index` (a value or factory default).
  const Tree& whole_value(size_t index);

  // The declared subtrees (names and key paths, not globs, of value and
  // factory defaults) whose node in `target` is a container with leaves, all
  // of them defaulted by that declaration (the first to cover them), and
  // whose value is not a map or list: each takes its value whole (a map or
  // list value gives each leaf its part instead). Makes the factory values
  // it looks at. No two of them overlap. `leaf_paths` and `defaulted_by`
  // (the index of the declaration that defaulted the leaf, if one did) are
  // per leaf of `target`, in tree order.
  std::vector<WholeField> whole_fields(const Tree& target, const std::vector<KeyPath>& leaf_paths,
                                       const std::vector<std::optional<size_t>>& defaulted_by);

 private:
  const Declarations& declared_;
  std::vector<std::optional<Tree>> made_;  // factory values, once made
};

// True if `path` starts with `prefix` (keys compared exactly).
bool path_under(const KeyPath& path, const KeyPath& prefix);

// "a.b.0": a key path as text, for messages.
std::string path_text(const KeyPath& path);

}  // namespace ckpt::detail
