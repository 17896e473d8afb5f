// average_checkpoints and select_for_average (ckpt/average.h): means
// computed here by hand in double, integer and non-tensor leaves from the
// newest input, inputs of different formats, the recorded inputs, and the
// mismatches named by tensor and both files.

#include "ckpt/average.h"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "ckpt/cast.h"
#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

Tensor floats(DType dtype, std::vector<double> values) {
  const Tensor wide = Tensor::from_values(DType::kFloat64, {static_cast<int64_t>(values.size())}, std::span<const double>(values));
  return cast(wide, dtype);
}

std::vector<double> values_of(const Tensor& tensor) {
  const Tensor wide = cast(tensor, DType::kFloat64).copy();
  const auto span = wide.values<double>();
  return {span.begin(), span.end()};
}

Tree state(double scale, int64_t epoch) {
  Tree model = Tree::map();
  model.set(std::string("w"), Tree(floats(DType::kFloat32, {1.0 * scale, -2.0 * scale, 0.1 * scale})));
  model.set(std::string("h"), Tree(floats(DType::kBFloat16, {scale, 3.0 * scale})));
  const std::vector<std::complex<float>> phases = {{static_cast<float>(scale), -1.0f}, {0.5f, static_cast<float>(scale)}};
  model.set(std::string("z"),
            Tree(Tensor::from_values(DType::kComplex64, {2}, std::span<const std::complex<float>>(phases))));
  const std::vector<int64_t> counts = {epoch, epoch * 10};
  model.set(std::string("count"), Tree(Tensor::from_values(DType::kInt64, {2}, std::span<const int64_t>(counts))));
  Tree tree = Tree::map();
  tree.set(std::string("model"), std::move(model));
  tree.set(std::string("epoch"), Tree(epoch));
  tree.set(std::string("name"), Tree(std::string("run ") + std::to_string(epoch)));
  return tree;
}

TEST(AverageTest, MeanOfThreeCheckpointsOfDifferentFormats) {
  TempDir dir;
  save(dir / "a.safetensors", state(1.0, 1));
  save(dir / "b.pt", state(2.0, 2));
  save(dir / "c.msgpack", state(4.0, 3));
  std::vector<size_t> progress;
  const AverageResult result = average_checkpoints(
      {{.path = dir / "a.safetensors", .step = 100, .epoch = 1},
       {.path = dir / "b.pt", .step = std::nullopt, .epoch = 2},
       {.path = dir / "c.msgpack"}},
      {.progress = [&](size_t done, size_t total) {
         progress.push_back(done);
         EXPECT_EQ(total, 4u);
       }});
  EXPECT_EQ(progress, (std::vector<size_t>{1, 2, 3, 4}));
  // float32: the float64 mean of the float32 inputs, rounded once.
  const std::vector<double> w = values_of(result.tree.at("model.w").tensor());
  const double inputs[3][3] = {{1.0, -2.0, 0.1}, {2.0, -4.0, 0.2}, {4.0, -8.0, 0.4}};
  for (size_t i = 0; i < 3; ++i) {
    const double mean = (static_cast<double>(static_cast<float>(inputs[0][i])) +
                         static_cast<double>(static_cast<float>(inputs[1][i])) +
                         static_cast<double>(static_cast<float>(inputs[2][i]))) / 3.0;
    EXPECT_EQ(w[i], static_cast<double>(static_cast<float>(mean))) << i;
  }
  EXPECT_EQ(result.tree.at("model.w").tensor().dtype(), DType::kFloat32);
  // bfloat16: (1 + 2 + 4) / 3 = 2.333..., nearest bfloat16 2.328125; (3 + 6 + 12) / 3 = 7.
  EXPECT_EQ(result.tree.at("model.h").tensor().dtype(), DType::kBFloat16);
  EXPECT_EQ(values_of(result.tree.at("model.h").tensor()), (std::vector<double>{2.328125, 7.0}));
  // complex64: per component, (1 + 2 + 4) / 3 and -1; 0.5 and 7 / 3, rounded to float.
  const Tensor z = result.tree.at("model.z").tensor().copy();
  EXPECT_EQ(z.dtype(), DType::kComplex64);
  const auto phases = z.values<std::complex<float>>();
  EXPECT_EQ(phases[0], std::complex<float>(static_cast<float>(7.0 / 3.0), -1.0f));
  EXPECT_EQ(phases[1], std::complex<float>(0.5f, static_cast<float>(7.0 / 3.0)));
  // Integers and non-tensor leaves: the newest's.
  EXPECT_EQ(result.tree.at("model.count").tensor().copy().values<int64_t>()[1], 30);
  EXPECT_EQ(result.tree.at("epoch").integer(), 3);
  EXPECT_EQ(result.tree.at("name").string(), "run 3");
  EXPECT_EQ(result.metadata.at(kAveragedFromKey),
            "[{\"path\":\"" + (dir / "a.safetensors").string() + "\",\"step\":100,\"epoch\":1},{\"path\":\"" +
                (dir / "b.pt").string() + "\",\"step\":null,\"epoch\":2},{\"path\":\"" + (dir / "c.msgpack").string() +
                "\",\"step\":null,\"epoch\":null}]");
  // The result saves, and the record goes with it.
  save(dir / "avg.safetensors", result.tree, {.metadata = result.metadata});
  EXPECT_EQ(open(dir / "avg.safetensors").metadata.at(kAveragedFromKey), result.metadata.at(kAveragedFromKey));
}

TEST(AverageTest, OneInputIsItself) {
  TempDir dir;
  save(dir / "a.safetensors", state(3.0, 7));
  const AverageResult result = average_checkpoints({{.path = dir / "a.safetensors"}});
  EXPECT_TRUE(result.tree.at("model.w").tensor().equals(load(dir / "a.safetensors").at("model.w").tensor()));
}

TEST(AverageTest, NoInputsIsInvalid) {
  try {
    average_checkpoints({});
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  }
}

void expect_mismatch(const std::vector<AverageInput>& inputs, const std::string& tensor,
                     const std::vector<std::string>& parts) {
  try {
    average_checkpoints(inputs);
    FAIL() << "expected kMismatch";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kMismatch) << error.what();
    EXPECT_EQ(error.context().entry, tensor);
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
    }
  }
}

TEST(AverageTest, MismatchesNameTheTensorAndBothFiles) {
  TempDir dir;
  save(dir / "good.safetensors", state(1.0, 1));

  Tree shape = state(1.0, 2);
  shape.find(std::string("model"))->set(std::string("w"), Tree(floats(DType::kFloat32, {1.0, 2.0})));
  save(dir / "shape.safetensors", shape);
  expect_mismatch({{.path = dir / "good.safetensors"}, {.path = dir / "shape.safetensors"}}, "model.w",
                  {"shape [3] vs [2]", "good.safetensors", "shape.safetensors"});

  Tree dtype = state(1.0, 2);
  dtype.find(std::string("model"))->set(std::string("w"), Tree(floats(DType::kFloat64, {1.0, 2.0, 3.0})));
  save(dir / "dtype.safetensors", dtype);
  expect_mismatch({{.path = dir / "good.safetensors"}, {.path = dir / "dtype.safetensors"}}, "model.w",
                  {"dtype float32 vs float64", "good.safetensors", "dtype.safetensors"});

  Tree extra = state(1.0, 2);
  extra.find(std::string("model"))->set(std::string("extra"), Tree(floats(DType::kFloat32, {1.0})));
  save(dir / "extra.safetensors", extra);
  expect_mismatch({{.path = dir / "good.safetensors"}, {.path = dir / "extra.safetensors"}}, "model.extra",
                  {"tensor missing", "good.safetensors", "extra.safetensors"});
  expect_mismatch({{.path = dir / "extra.safetensors"}, {.path = dir / "good.safetensors"}}, "model.extra",
                  {"tensor missing", "good.safetensors", "extra.safetensors"});
}

TEST(AverageTest, UnreadableInputNamesIt) {
  TempDir dir;
  save(dir / "good.safetensors", state(1.0, 1));
  try {
    average_checkpoints({{.path = dir / "good.safetensors"}, {.path = dir / "missing.pt"}});
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(error.what()).find("missing.pt"), std::string::npos) << error.what();
  }
}

RunListing listing_of(std::vector<std::pair<int64_t, double>> epochs_and_scores) {
  RunListing listing{.run_dir = "/run", .layout = "returnn", .checkpoints = {}};
  for (const auto& [epoch, score] : epochs_and_scores) {
    CheckpointEntry entry;
    entry.epoch = epoch;
    entry.path = "/run/epoch." + std::to_string(epoch) + ".pt";
    if (!std::isnan(score)) entry.metrics["dev_score"] = score;
    listing.checkpoints.push_back(entry);
  }
  return listing;
}

std::vector<int64_t> epochs_of(const std::vector<AverageInput>& inputs) {
  std::vector<int64_t> epochs;
  for (const AverageInput& input : inputs) epochs.push_back(*input.epoch);
  return epochs;
}

TEST(AverageSelectionTest, LastAndBest) {
  const double none = std::nan("");
  const RunListing listing = listing_of({{1, 3.0}, {2, 1.0}, {3, none}, {4, 2.0}, {5, 1.0}, {6, 5.0}});
  EXPECT_EQ(epochs_of(select_for_average(listing, {.last = 3})), (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(epochs_of(select_for_average(listing, {.last = 10})), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  // Lowest first, the newer of equal scores first; returned oldest first.
  EXPECT_EQ(epochs_of(select_for_average(listing, {.best = 2, .metric = "dev_score"})), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(epochs_of(select_for_average(listing, {.best = 1, .metric = "dev_score"})), (std::vector<int64_t>{5}));
  EXPECT_EQ(epochs_of(select_for_average(listing, {.best = 2, .metric = "dev_score", .maximize = true})),
            (std::vector<int64_t>{1, 6}));
}

TEST(AverageSelectionTest, Refusals) {
  const RunListing listing = listing_of({{1, 3.0}});
  const auto code_of = [&](const RunListing& from, const AverageSelection& selection) {
    try {
      select_for_average(from, selection);
    } catch (const Error& error) {
      return error.code();
    }
    ADD_FAILURE() << "expected an Error";
    return ErrorCode::kIo;
  };
  EXPECT_EQ(code_of(listing, {}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(listing, {.last = 1, .best = 1, .metric = "dev_score"}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(listing, {.best = 1}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(listing, {.best = 1, .metric = "wer"}), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(listing_of({}), {.last = 1}), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ckpt
