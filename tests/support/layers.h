#pragma once
// The layering of ckpt's sources (../shared/DESIGN.md), as a check:
//   core ← io ← formats ← checkpoint ← restore / manager / modules / distributed ← tools, python
// A file may include its own layer and those below it, never one above;
// tools/ and python/ stand side by side and include neither each other's
// files nor anything but public headers (include/ckpt/) and their own;
// public headers include public headers only. Every public header has a
// layer in the table in layers.cc, so a new one must be placed.

#include <filesystem>
#include <string>
#include <vector>

namespace ckpt::testing {

struct LayerViolation {
  std::string file;     // relative to the root, '/'-separated
  int line = 0;
  std::string include;  // as written between the quotes
  std::string why;      // "core includes io (src/io/parallel.h)", ...
};

// Every quoted #include in src/, include/, tools/ and python/src/ under
// `root` (a checkout, or a test's tree laid out like one) that breaks the
// rules above. Includes in <> (system and third-party headers) are not
// checked; tests/ and bench/ are outside the layers.
std::vector<LayerViolation> layering_violations(const std::filesystem::path& root);

// One line per violation, for a test's failure message.
std::string describe(const std::vector<LayerViolation>& violations);

}  // namespace ckpt::testing
