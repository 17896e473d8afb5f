#pragma once
// A fresh directory under the system temp dir, removed with its contents.

#include <filesystem>
#include <string>
#include <vector>

namespace ckpt::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Names of the entries in the directory (hidden ones included), sorted.
  std::vector<std::string> list() const;

 private:
  std::filesystem::path path_;
};

}  // namespace ckpt::testing
