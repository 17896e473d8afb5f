#pragma once
// Whole-file helpers for tests.

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ckpt::testing {

// The bytes of `path` ("" if it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Replaces `path` with `bytes`; throws std::runtime_error if that fails.
inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// The bytes of every file of the checkpoint at `path`, by file name: the
// file and the files beside it named "<its stem>.*" (a TF bundle's
// PREFIX.index and PREFIX.data-*), or every file under `path` when it is a
// directory (by path relative to it).
inline std::map<std::string, std::string> checkpoint_files(const std::filesystem::path& path) {
  std::map<std::string, std::string> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& item : std::filesystem::recursive_directory_iterator(path)) {
      if (item.is_regular_file()) files[item.path().lexically_relative(path).string()] = read_file(item.path());
    }
    return files;
  }
  files[path.filename().string()] = read_file(path);
  const std::string stem = path.stem().string() + ".";
  for (const auto& item : std::filesystem::directory_iterator(path.parent_path())) {
    const std::string name = item.path().filename().string();
    if (item.is_regular_file() && name.starts_with(stem)) files[name] = read_file(item.path());
  }
  return files;
}

}  // namespace ckpt::testing
