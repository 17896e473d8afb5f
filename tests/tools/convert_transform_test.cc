// `ckpt convert` with the naming options (--rename, --rename-regex,
// --rename-table, --drop, --add-prefix, --strip-prefix), run as a subprocess
// (CKPT_TOOL_PATH) in a temporary directory, as tests/tools/cli_test.cc does.


#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
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
using testing::ToolRun;

Tensor tensor_of(std::vector<float> values) {
  return Tensor::from_values<float>(DType::kFloat32, {static_cast<int64_t>(values.size())}, values);
}

// {"encoder": {"w", "b"}, "decoder": {"w"}, "step": 5}
Tree model_state() {
  Tree tree = Tree::map();
  Tree& encoder = tree.set("encoder", Tree::map());
  encoder.set("w", tensor_of({1, 2}));
  encoder.set("b", tensor_of({3}));
  tree.set("decoder", Tree::map()).set("w", tensor_of({4, 5, 6}));
  tree.set("step", int64_t{5});
  return tree;
}

std::vector<std::string> names_in(const fs::path& path) {
  std::vector<std::string> names;
  for (const Tree::Leaf& leaf : load(path).leaves()) names.push_back(leaf.name);
  return names;
}

using Names = std::vector<std::string>;

class ConvertTransformTest : public ::testing::Test {
 protected:
  void SetUp() override { save(dir_ / "in.safetensors", model_state()); }
  ToolRun ckpt(std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), {"convert", "in.safetensors", "out.safetensors"});
    return run_tool(dir_.path(), arguments);
  }
  fs::path path(const std::string& name) const { return dir_ / name; }
  // A failed run: exit 2, nothing on stdout, one stderr line mentioning each of `needles`, no output file.
  void expect_refused(const ToolRun& run, const std::vector<std::string>& needles) {
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_TRUE(run.err.starts_with("ckpt: ")) << run.err;
    for (const std::string& needle : needles) EXPECT_NE(run.err.find(needle), std::string::npos) << needle << " in " << run.err;
    EXPECT_FALSE(fs::exists(path("out.safetensors")));
  }

  testing::TempDir dir_;
};

TEST_F(ConvertTransformTest, RenameDropAndAddPrefixInOrder) {
  const ToolRun run = ckpt({"--rename", "encoder=enc", "--drop", "decoder.*", "--add-prefix", "model"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.err.empty()) << run.err;
  EXPECT_NE(run.out.find("renamed 3 leaves, dropped 1 leaf"), std::string::npos) << run.out;
  EXPECT_EQ(names_in(path("out.safetensors")), (Names{"model.enc.w", "model.enc.b", "model.step"}));
  const Tree out = load(path("out.safetensors"));
  EXPECT_TRUE(out.at("model.enc.w").tensor().equals(tensor_of({1, 2})));
  EXPECT_EQ(out.at("model.step").integer(), 5);
  // Then back, with the other two steps.
  const ToolRun back = run_tool(dir_.path(), {"convert", "out.safetensors", "back.safetensors", "--strip-prefix",
                                             "model", "--rename-regex", "^enc\\.(\\w)$=encoder.\\1"});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(names_in(path("back.safetensors")), (Names{"encoder.w", "encoder.b", "step"}));
}

TEST_F(ConvertTransformTest, OrderOnTheCommandLineMatters) {
  ToolRun run = ckpt({"--rename", "encoder=enc", "--drop", "enc.*"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(names_in(path("out.safetensors")), (Names{"decoder.w", "step"}));
  run = ckpt({"--drop", "enc.*", "--rename", "encoder=enc"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(names_in(path("out.safetensors")), (Names{"enc.w", "enc.b", "decoder.w", "step"}));
  // Dropping the non-tensor value lets a tensors-only target take the rest.
  run = run_tool(dir_.path(), {"convert", "in.safetensors", "out.npz", "--drop", "step"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(names_in(path("out.npz")), (Names{"encoder.w", "encoder.b", "decoder.w"}));
}

TEST_F(ConvertTransformTest, MalformedValuesAreUsageErrors) {
  testing::write_file(path("list.json"), R"(["a", "b"])");
  testing::write_file(path("number.json"), R"({"a": 1})");
  testing::write_file(path("broken.json"), R"({"a": )");
  expect_refused(ckpt({"--rename", "encoder"}), {"--rename", "OLD=NEW", "'encoder'"});
  expect_refused(ckpt({"--rename", "=enc"}), {"--rename", "'=enc'"});
  expect_refused(ckpt({"--rename-regex", "abc"}), {"--rename-regex", "PATTERN=REPLACEMENT"});
  expect_refused(ckpt({"--rename-regex", "(enc=x"}), {"(enc"});
  expect_refused(ckpt({"--add-prefix", ""}), {"--add-prefix"});
  expect_refused(ckpt({"--rename-table", "missing.json"}), {"missing.json"});
  expect_refused(ckpt({"--rename-table", "list.json"}), {"list.json", "JSON object"});
  expect_refused(ckpt({"--rename-table", "number.json"}), {"number.json", "'a'"});
  expect_refused(ckpt({"--rename-table", "broken.json"}), {"broken.json", "not valid JSON"});
  // A missing value is CLI11's usage error, with the synopsis after it.
  const ToolRun run = ckpt({"--drop"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(run.err.starts_with("ckpt: ")) << run.err;
  EXPECT_NE(run.err.find("usage: ckpt convert"), std::string::npos) << run.err;
}

TEST_F(ConvertTransformTest, TwoLeavesToOneNameIsRefused) {
  expect_refused(ckpt({"--rename", "encoder=decoder"}),
                 {"in.safetensors", "'encoder.w'", "'decoder.w'", "both be named"});
  testing::write_file(path("clash.json"), R"({"encoder.b": "bias", "decoder.w": "bias"})");
  expect_refused(ckpt({"--rename-table", "clash.json"}), {"'encoder.b'", "'decoder.w'", "'bias'"});
}

TEST_F(ConvertTransformTest, RenameTableFromJson) {
  testing::write_file(path("table.json"),
                      R"({"encoder.w": "enc.weight", "step": "global_step", "absent": "x", "encoder": "e"})");
  const ToolRun run = ckpt({"--rename-table", "table.json", "--rename-table", "table.json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("renamed 2 leaves, dropped 0 leaves"), std::string::npos) << run.out;
  // Exact names only: "encoder" names no leaf, so encoder.b stays.
  EXPECT_EQ(names_in(path("out.safetensors")), (Names{"enc.weight", "encoder.b", "decoder.w", "global_step"}));
}

}  // namespace
}  // namespace ckpt
