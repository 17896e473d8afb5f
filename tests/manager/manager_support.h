#pragma once
// What the manager's tests share: tiny states that tell steps apart, and
// looks at run directories.

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ckpt/run_directory.h"
#include "ckpt/tree.h"

namespace ckpt::testing {

// A tiny state that tells steps apart.
inline Tree small_state(int64_t step, int64_t elements = 8) {
  Tree tree = Tree::map();
  std::vector<float> weights(static_cast<size_t>(elements));
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(step) + 0.25f * static_cast<float>(i);
  tree.set("w", Tensor::from_values<float>(DType::kFloat32, {elements}, weights));
  tree.set("step", step);
  return tree;
}

inline std::vector<int64_t> listed_steps(const std::vector<CheckpointEntry>& entries) {
  std::vector<int64_t> steps;
  for (const CheckpointEntry& entry : entries) steps.push_back(*entry.step);
  return steps;
}

inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline ino_t inode_of(const std::filesystem::path& path) {
  struct stat status {};
  EXPECT_EQ(::stat(path.c_str(), &status), 0) << path;
  return status.st_ino;
}

inline bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace ckpt::testing
