#pragma once
// The expected tree for formats without FormatCapabilities::lists_and_int_keys,
// computed independently of any writer.

#include <string>

#include "ckpt/tree.h"

namespace ckpt::testing {

// `tree` with every list a map keyed "0", "1", ... and every integer key its
// decimal string: what Flax's to_state_dict makes of the same value, and so
// what a format without lists_and_int_keys gives back for it.
inline Tree string_keyed(const Tree& tree) {
  if (!tree.is_container()) return tree;
  Tree out = Tree::map();
  size_t position = 0;
  for (const TreeEntry& entry : tree.entries()) {
    const std::string key = tree.is_list() ? std::to_string(position++) : key_to_string(entry.key);
    out.set(key, string_keyed(entry.value));
  }
  return out;
}

}  // namespace ckpt::testing
