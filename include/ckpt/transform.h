#pragma once
// Transforms: renaming and dropping a tree's leaves by name, applied in order.
// Used on load, by restore() (on the source's names, before matching) and by
// `ckpt convert --rename/--rename-regex/--drop/--add-prefix/--strip-prefix`.
//
// Names are the dotted leaf names of tree.h. Empty maps and lists count as
// leaves here too (so that `{"opt": {"state": {}}}` keeps its empty state
// through a rename).

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/tree.h"

namespace ckpt {

// True if `name` matches the glob `pattern`, as Python's fnmatch.fnmatchcase:
// `*` any run of characters (dots included), `?` one character, `[abc]`,
// `[a-z]`, `[!abc]` one character from (or not from) a set. Anything else
// matches itself.
bool glob_match(std::string_view pattern, std::string_view name);

// True if `name` is `prefix` or lies under it: "a.b" is under "a", "a.bc" is
// not. Every name lies under the empty prefix.
bool name_under(std::string_view name, std::string_view prefix);

class Transforms {
 public:
  // A name equal to `from`, or starting with `from` + ".", gets `to` in place
  // of `from` ("encoder" -> "enc" turns "encoder.w" into "enc.w", and leaves
  // "encoders.w" alone). An empty `to` removes the prefix and its dot; an
  // empty `from` adds `to` + "." in front of every name.
  Transforms& rename_prefix(std::string from, std::string to);
  // ECMAScript regular expression, every match replaced as
  // std::regex_replace does ("$1" or "\1" for a group, "$&" for the match,
  // "\\" for a backslash).
  // Throws Error{kInvalidArgument} if `pattern` does not compile.
  Transforms& rename_regex(std::string_view pattern, std::string replacement);
  // Exact names only: each name that is a key gets its value.
  Transforms& rename(std::map<std::string, std::string> table);
  // Removes the leaves whose name matches `glob` (glob_match).
  Transforms& drop(std::string glob);
  // `prefix` + "." in front of every name (an empty prefix changes nothing).
  Transforms& add_prefix(std::string prefix);
  // Removes `prefix` + "." where a name starts with it (others unchanged).
  Transforms& strip_prefix(std::string prefix);

  bool empty() const noexcept { return steps_.empty(); }
  // One line per step ("rename prefix 'a' -> 'b'", "drop 'x.*'"), for messages.
  std::vector<std::string> describe() const;

  // The name after every step in order, or nullopt if a step drops it.
  // Throws Error{kInvalidArgument} if a step would leave an empty name.
  std::optional<std::string> apply(std::string_view name) const;
  // The same for strings and literals, which would otherwise be ambiguous
  // with apply(const Tree&) (Tree converts from strings).
  std::optional<std::string> apply(const std::string& name) const { return apply(std::string_view(name)); }
  std::optional<std::string> apply(const char* name) const { return apply(std::string_view(name)); }

  // A new tree holding `tree`'s leaves under their new names (tensors are
  // shared, not copied). Leaves whose name is unchanged keep their place and
  // containers. A renamed leaf keeps the containers of the longest part of
  // its path that its new name still starts with; below that, the new name's
  // remaining parts become nested maps when they are as many as the old
  // path's remaining parts (integer keys stay integers where the part is
  // still a decimal number); otherwise the old path's last keys that the new
  // name still ends with stay keys of their own, and the part of the new name
  // before them becomes one key. So {"params": {"Dense_0": {"kernel": k}}}
  // with rename_prefix("params.Dense_0", "params.dense") gives
  // {"params": {"dense": {"kernel": k}}}; {"model": {"encoder": {"w": w}}}
  // with rename_prefix("model.encoder", "enc") gives {"enc": {"w": w}};
  // add_prefix("ema") on {"model": {"w": w}} gives {"ema": {"model": {"w": w}}};
  // and a flat torch state dict stays flat. A list whose items are renamed or
  // dropped becomes a map with integer keys. Order is tree order.
  // Where a new name would need a leaf as a container ("a" and "a.b" both
  // present), the deeper one is kept as one key holding the rest of its name;
  // an empty map or list that a new path runs through is filled instead.
  // A tree that is a single leaf is returned as it is.
  // Throws Error{kInvalidArgument} naming the old and new names if two
  // leaves get the same new name.
  Tree apply(const Tree& tree) const;

 private:
  struct Step;
  std::vector<Step> steps_;

 public:
  Transforms();
  Transforms(const Transforms&);
  Transforms(Transforms&&) noexcept;
  Transforms& operator=(const Transforms&);
  Transforms& operator=(Transforms&&) noexcept;
  ~Transforms();
};

}  // namespace ckpt
