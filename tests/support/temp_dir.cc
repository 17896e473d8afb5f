#include "support/temp_dir.h"

#include <stdlib.h>

#include <algorithm>
#include <stdexcept>

namespace ckpt::testing {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ckpt-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<std::string> TempDir::list() const {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path_)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ckpt::testing
