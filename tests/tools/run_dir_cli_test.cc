// `ckpt ls` and `ckpt average`, run as the tool (CKPT_TOOL_PATH) in a
// temporary directory: the JSON listing field by field, the table, the
// averaged file read back, and the failures as one stderr line with their
// exit codes.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "support/tool_run.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::run_tool;
using testing::TempDir;
using testing::ToolRun;
using testing::write_file;

void expect_one_error_line(const ToolRun& run, const std::string& needle) {
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << "stderr: " << run.err;
  EXPECT_TRUE(run.err.starts_with("ckpt: ")) << "stderr: " << run.err;
  EXPECT_NE(run.err.find(needle), std::string::npos) << "stderr lacks '" << needle << "': " << run.err;
  EXPECT_TRUE(run.out.empty()) << "stdout: " << run.out;
}

Tree state(float value, int64_t epoch) {
  Tree tree = Tree::map();
  const std::vector<float> values = {value, 2 * value};
  tree.set(std::string("w"), Tree(Tensor::from_values(DType::kFloat32, {2}, std::span<const float>(values))));
  tree.set(std::string("epoch"), Tree(epoch));
  return tree;
}

// A RETURNN directory: epochs 1..3 with optimizer states and scores.
void make_returnn_run(const TempDir& dir) {
  fs::create_directory(dir / "models");
  for (int epoch = 1; epoch <= 3; ++epoch) {
    const std::string name = "epoch.00" + std::to_string(epoch);
    save(dir / "models" / (name + ".pt"), state(static_cast<float>(epoch), epoch));
    save(dir / "models" / (name + ".opt.pt"), state(0, epoch));
  }
  write_file(dir / "models" / "learning_rates",
             "{1: EpochData(learningRate=0.1, error={'dev_score': 3.0}),\n"
             " 2: EpochData(learningRate=0.1, error={'dev_score': 1.0}),\n"
             " 3: EpochData(learningRate=0.1, error={'dev_score': 2.0})}\n");
}

TEST(RunDirCliTest, LsJson) {
  TempDir dir;
  make_returnn_run(dir);
  const ToolRun run = run_tool(dir.path(), {"ls", (dir / "models").string(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(run.out);
  EXPECT_EQ(std::string_view(root["run_dir"]), (dir / "models").string());
  EXPECT_EQ(std::string_view(root["layout"]), "returnn");
  simdjson::dom::array checkpoints = root["checkpoints"];
  ASSERT_EQ(checkpoints.size(), 3u);
  int64_t epoch = 0;
  for (simdjson::dom::element entry : checkpoints) {
    ++epoch;
    EXPECT_TRUE(entry["step"].is_null());
    EXPECT_EQ(int64_t(entry["epoch"]), epoch);
    const std::string path = (dir / "models" / ("epoch.00" + std::to_string(epoch) + ".pt")).string();
    EXPECT_EQ(std::string_view(entry["path"]), path);
    EXPECT_EQ(uint64_t(entry["size"]),
              fs::file_size(path) + fs::file_size(dir / "models" / ("epoch.00" + std::to_string(epoch) + ".opt.pt")));
    EXPECT_GT(double(entry["time"]), 1.6e9);
    EXPECT_EQ(simdjson::dom::array(entry["kept_by"]).size(), 0u);
  }
  EXPECT_EQ(double(checkpoints.at(1)["metrics"]["dev_score"]), 1.0);
}

TEST(RunDirCliTest, LsTable) {
  TempDir dir;
  make_returnn_run(dir);
  const ToolRun run = run_tool(dir.path(), {"ls", "models"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("run dir: models (layout returnn, 3 checkpoints)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("dev_score=1.0"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("models/epoch.003.pt"), std::string::npos) << run.out;
}

TEST(RunDirCliTest, LsFailures) {
  TempDir dir;
  ToolRun run = run_tool(dir.path(), {"ls", "missing"});
  EXPECT_EQ(run.exit_code, 2);
  expect_one_error_line(run, "missing");
  make_returnn_run(dir);
  write_file(dir / "models" / "learning_rates", "{1: EpochData(learningRate=0.1, error={'dev_score': })}\n");
  run = run_tool(dir.path(), {"ls", "models", "--json"});
  EXPECT_EQ(run.exit_code, 1);
  expect_one_error_line(run, "learning_rates: learning_rates file, line 1, column 53");
  run = run_tool(dir.path(), {"ls"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("usage: ckpt ls RUN_DIR [--json]"), std::string::npos) << run.err;
}

TEST(RunDirCliTest, AverageBestOfARunDirectory) {
  TempDir dir;
  make_returnn_run(dir);
  const ToolRun run = run_tool(dir.path(), {"average", "avg.safetensors", "models", "--best", "2", "--metric", "dev_score"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.err.empty()) << "no progress line without a terminal: " << run.err;
  EXPECT_NE(run.out.find("averaged 2 checkpoints -> avg.safetensors (safetensors): 1 tensor"), std::string::npos)
      << run.out;
  // Epochs 2 (dev_score 1.0) and 3 (2.0): w = mean of (2, 4) and (3, 6); epoch from the newest.
  const Contents contents = open(dir / "avg.safetensors");
  const Tensor w = contents.tree.at("w").tensor().copy();
  EXPECT_EQ(w.values<float>()[0], 2.5f);
  EXPECT_EQ(w.values<float>()[1], 5.0f);
  EXPECT_EQ(contents.tree.at("epoch").integer(), 3);
  EXPECT_NE(contents.metadata.at("ckpt.averaged_from").find("epoch.002.pt\",\"step\":null,\"epoch\":2"),
            std::string::npos);
}

TEST(RunDirCliTest, AverageIntoAFormatWithoutMetadataSaysSo) {
  TempDir dir;
  make_returnn_run(dir);
  const ToolRun run = run_tool(dir.path(), {"average", "avg.msgpack", "models/epoch.001.pt", "models/epoch.003.pt"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("keeps no metadata"), std::string::npos) << run.out;
  EXPECT_EQ(load(dir / "avg.msgpack").at("w").tensor().copy().values<float>()[0], 2.0f);
}

TEST(RunDirCliTest, AverageUsageErrors) {
  TempDir dir;
  make_returnn_run(dir);
  struct Case {
    std::vector<std::string> arguments;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"average", "a.safetensors", "models", "models", "--last", "2"}, "one RUN_DIR"},
      {{"average", "a.safetensors", "models", "--best", "2"}, "need a metric"},
      {{"average", "a.safetensors", "models", "--best", "2", "--metric", "m", "--mode", "up"}, "--mode"},
      {{"average", "a.safetensors", "models", "--last", "2", "--best", "1", "--metric", "dev_score"}, "either"},
      {{"average", "a.safetensors", "models", "--best", "1", "--metric", "wer"}, "'wer'"},
      {{"average", "a.safetensors", "models/epoch.001.pt", "--metric", "dev_score"}, "--metric goes with --best"},
      {{"average", "a.safetensors", "models/epoch.001.pt", "models/missing.pt"}, "missing.pt"},
  };
  for (const Case& c : cases) {
    const ToolRun run = run_tool(dir.path(), c.arguments);
    EXPECT_EQ(run.exit_code, 2) << c.needle << ": " << run.err;
    expect_one_error_line(run, c.needle);
    EXPECT_FALSE(fs::exists(dir / "a.safetensors"));
  }
}

}  // namespace
}  // namespace ckpt
