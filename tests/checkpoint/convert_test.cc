// convert (ckpt/convert.h): the target format, what goes along, what is
// refused before anything is written, and the report. Every pair of formats:
// tests/formats/convert_pairs_test.cc; the CLI's summary: tests/tools/.

#include "ckpt/convert.h"

#include <gtest/gtest.h>

#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "support/random_tensor.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::random_tensor;
using testing::TempDir;

class ConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tree model = Tree::map();
    model.set("w", random_tensor(DType::kFloat32, {3, 2}, 1));
    model.set("b", random_tensor(DType::kFloat32, {2}, 2));
    state_ = Tree::map();
    state_.set("model", model);
    state_.set("epoch", int64_t{4});
    save(src_, state_, {.metadata = {{"note", "kept"}}, .fsync = false});
  }

  ErrorCode code_of(const std::filesystem::path& dst, const ConvertOptions& options, std::string* message) {
    try {
      convert(src_, dst, options);
    } catch (const Error& error) {
      *message = error.what();
      return error.code();
    }
    ADD_FAILURE() << "converted to " << dst;
    return ErrorCode::kIo;
  }

  TempDir dir_;
  std::filesystem::path src_ = dir_ / "state.safetensors";
  Tree state_;
};

TEST_F(ConvertTest, TheTreeAndMetadataGoAlongToATargetThatHoldsThem) {
  const ConvertReport report = convert(src_, dir_ / "state.pt");
  EXPECT_EQ(report.source_format, "safetensors");
  EXPECT_EQ(report.target_format, "torch");
  EXPECT_EQ(report.tensors, 2u);
  EXPECT_EQ(report.nbytes, 8 * 4u);
  EXPECT_TRUE(report.dropped.empty());
  const Contents written = open(dir_ / "state.pt");
  EXPECT_EQ(written.tree, state_);
  EXPECT_EQ(written.metadata.at("note"), "kept");
}

TEST_F(ConvertTest, RenamesApplyAndAreCounted) {
  ConvertOptions options;
  options.rename.strip_prefix("model");
  options.rename.drop("epoch");
  const ConvertReport report = convert(src_, dir_ / "renamed.safetensors", options);
  EXPECT_EQ(report.renamed, 2u);
  EXPECT_EQ(report.removed, 1u);
  const Tree written = load(dir_ / "renamed.safetensors");
  EXPECT_EQ(written.at("w"), state_.at("model.w"));
  EXPECT_EQ(written.find_path("epoch"), nullptr);
}

TEST_F(ConvertTest, ATensorsOnlyTargetRefusesToLoseValuesUnlessAskedTo) {
  std::string message;
  EXPECT_EQ(code_of(dir_ / "out.npz", {}, &message), ErrorCode::kUnsupported);
  EXPECT_NE(message.find("'epoch'"), std::string::npos) << message;
  EXPECT_NE(message.find("out.npz"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out.npz"));

  const ConvertReport report = convert(src_, dir_ / "out.npz", {.drop_unsupported = true});
  EXPECT_EQ(report.dropped, std::vector<std::string>{"epoch"});
  const Tree written = load(dir_ / "out.npz");
  EXPECT_EQ(written.at("model.w"), state_.at("model.w"));
  EXPECT_EQ(written.find_path("epoch"), nullptr);
}

TEST_F(ConvertTest, ADtypeTheTargetLacksIsNamedNotBlamedOnTheValues) {
  Tree state = state_;
  state.set("half", Tensor::empty(DType::kBFloat16, {2}));
  save(src_, state, {.fsync = false});
  for (const bool drop : {false, true}) {
    try {
      convert(src_, dir_ / "out.npz", {.drop_unsupported = drop});
      FAIL() << "wrote bfloat16 into npz";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
      EXPECT_EQ(error.context().entry, "half");
      EXPECT_NE(std::string(error.what()).find("bfloat16"), std::string::npos) << error.what();
      EXPECT_EQ(std::string(error.what()).find("non-tensor"), std::string::npos) << error.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out.npz"));
}

TEST_F(ConvertTest, WithoutExtrasTheTargetHoldsTensorsOnly) {
  std::string message;
  EXPECT_EQ(code_of(dir_ / "plain.safetensors", {.save = {.extras = false}}, &message), ErrorCode::kUnsupported);
  EXPECT_NE(message.find("without extras"), std::string::npos) << message;
  convert(src_, dir_ / "plain.safetensors", {.save = {.extras = false}, .drop_unsupported = true});
  EXPECT_EQ(open(dir_ / "plain.safetensors").format_version, 0);
}

TEST_F(ConvertTest, AnUnknownExtensionIsRefusedNotGuessed) {
  std::string message;
  EXPECT_EQ(code_of(dir_ / "out.weights", {}, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("cannot tell the target format"), std::string::npos) << message;
  convert(src_, dir_ / "out.weights", {.save = {.format = "safetensors"}});
  EXPECT_EQ(load(dir_ / "out.weights"), state_);
}

TEST_F(ConvertTest, AShardSizeNeedsAFormatWrittenInShards) {
  std::string message;
  EXPECT_EQ(code_of(dir_ / "out.pt", {.save = {.max_shard_bytes = 16}}, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("'torch' writes one file"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out.pt"));
}

TEST_F(ConvertTest, TheReportNamesTheLayoutTheWriterPicked) {
  // safetensors with a maximum shard size writes Hugging Face's sharded
  // directory, which the report names as a reader detects it.
  const ConvertReport report = convert(src_, dir_ / "sharded", {.save = {.format = "safetensors", .max_shard_bytes = 16}});
  EXPECT_EQ(report.target_format, "hf_sharded");
  EXPECT_EQ(report.target_format, std::string(detect(dir_ / "sharded").id()));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "sharded" / "model.safetensors.index.json"));
  EXPECT_EQ(convert(src_, dir_ / "one.safetensors").target_format, "safetensors");
}

TEST_F(ConvertTest, ReadErrorsNameTheSourceAndWriteErrorsTheTarget) {
  try {
    convert(dir_ / "missing.pt", dir_ / "out.safetensors");
    FAIL() << "converted a missing file";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
    EXPECT_EQ(error.context().path, dir_ / "missing.pt");
  }
  try {
    convert(src_, dir_ / "no" / "such" / "dir" / "out.safetensors");
    FAIL() << "wrote into a missing directory";
  } catch (const Error& error) {
    EXPECT_EQ(error.context().path, dir_ / "no" / "such" / "dir" / "out.safetensors");
  }
}

}  // namespace
}  // namespace ckpt
