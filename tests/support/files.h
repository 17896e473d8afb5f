#pragma once
// Whole-file helpers for tests.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ckpt::testing {

// The bytes of `path` ("" if it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ckpt::testing
