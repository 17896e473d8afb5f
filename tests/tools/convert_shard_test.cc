// `ckpt convert ... --max-shard-size SIZE` (SaveOptions::max_shard_bytes),
// run as a subprocess (CKPT_TOOL_PATH) in a temporary directory, as
// tests/tools/cli_test.cc does: the size's parsing (bytes, K/M/G suffixes),
// the shards it gives a TF bundle, and the usage errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "formats/tf/shard_trailer.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "support/tool_run.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

using testing::run_tool;
using testing::ToolRun;

// Three float32 tensors of 600 bytes each and a non-tensor leaf.
Tree model_state() {
  Tree tree = Tree::map();
  for (int i = 0; i < 3; ++i) {
    std::vector<float> values(150);
    for (size_t j = 0; j < values.size(); ++j) values[j] = static_cast<float>(i * 1000 + static_cast<int>(j));
    tree.set("w" + std::to_string(i), Tensor::from_values<float>(DType::kFloat32, {150}, values));
  }
  tree.set("step", int64_t{9});
  return tree;
}

class ConvertShardTest : public ::testing::Test {
 protected:
  void SetUp() override { save(dir_ / "in.safetensors", model_state()); }
  ToolRun convert(const std::string& destination, std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), {"convert", "in.safetensors", destination});
    return run_tool(dir_.path(), arguments);
  }
  // The data shards of prefix `name`, sorted.
  std::vector<std::string> shards(const std::string& name) const {
    std::vector<std::string> found;
    for (const std::string& file : dir_.list()) {
      if (file.starts_with(name + ".data-")) found.push_back(file);
    }
    return found;
  }
  // A refused run: exit 2, nothing on stdout, one stderr line holding each of `needles`.
  static void expect_usage_error(const ToolRun& run, const std::vector<std::string>& needles) {
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
    EXPECT_TRUE(run.err.starts_with("ckpt: ")) << run.err;
    for (const std::string& needle : needles) {
      EXPECT_NE(run.err.find(needle), std::string::npos) << needle << " in " << run.err;
    }
  }
  testing::TempDir dir_;
};

TEST_F(ConvertShardTest, SizesInBytesAndWithSuffixes) {
  // 600-byte tensors: 1200 bytes hold two, 1K (1024) one, 2K (2048) all three.
  const std::vector<std::pair<std::string, size_t>> cases = {
      {"1200", 2}, {"1199", 3}, {"1K", 3}, {"1k", 3}, {"1KiB", 3}, {"2K", 1}, {"2kb", 1}, {"1M", 1}, {"3G", 1}};
  for (const auto& [size, count] : cases) {
    SCOPED_TRACE(size);
    const ToolRun run = convert("out", {"--to", "tf", "--max-shard-size", size});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const std::vector<std::string> files = shards("out");
    ASSERT_EQ(files.size(), count);
    const std::string of = "-of-0000" + std::to_string(count);
    EXPECT_TRUE(std::all_of(files.begin(), files.end(), [&](const std::string& file) { return file.ends_with(of); }))
        << "an earlier conversion's shards were left behind";
    EXPECT_TRUE(load(dir_ / "out", {.verify = true}) == model_state());
  }
  // Two shards: w0 and w1 (1200 bytes) in the first, w2 in the second, each
  // followed by ckpt's trailer (docs/formats/tf.md, "Torn overwrites"),
  // which the size limit, a limit on tensors' bytes, does not count.
  ASSERT_EQ(convert("two", {"--to", "tf", "--max-shard-size", "1200"}).exit_code, 0);
  EXPECT_EQ(fs::file_size(dir_ / "two.data-00000-of-00002"), 1200u + tf_detail::kShardTrailerSize);
  EXPECT_EQ(fs::file_size(dir_ / "two.data-00001-of-00002"), 600u + tf_detail::kShardTrailerSize);
  // Without the option: one shard.
  ASSERT_EQ(convert("one", {"--to", "tf"}).exit_code, 0);
  EXPECT_EQ(shards("one"), (std::vector<std::string>{"one.data-00000-of-00001"}));
}

TEST_F(ConvertShardTest, BadSizesAndTargetsAreUsageErrors) {
  expect_usage_error(convert("out", {"--to", "tf", "--max-shard-size", "0"}), {"--max-shard-size", "at least 1"});
  expect_usage_error(convert("out", {"--to", "tf", "--max-shard-size", "12Q"}), {"q unit not recognized"});
  expect_usage_error(convert("out", {"--to", "tf", "--max-shard-size", "lots"}), {"--max-shard-size"});
  expect_usage_error(convert("out", {"--to", "tf", "--max-shard-size", "-5"}), {"--max-shard-size", "must not be negative"});
  expect_usage_error(convert("out", {"--to", "tf", "--max-shard-size", "99999999E"}), {"overflow"});
  // (safetensors with a shard size writes Hugging Face's sharded directory: hf_sharded_test.cc.)
  expect_usage_error(convert("out.npz", {"--max-shard-size", "1M"}),
                     {"out.npz", "--max-shard-size", "'npz' writes one file"});
  EXPECT_TRUE(shards("out").empty());
  EXPECT_FALSE(fs::exists(dir_ / "out.index"));
  EXPECT_FALSE(fs::exists(dir_ / "out.npz"));
}

}  // namespace
}  // namespace ckpt
