// Foreign run directories (list_run_directory over RETURNN, TensorFlow,
// Flax, Lightning and Orbax layouts), on directories the tests build with
// ckpt::save and plain file writes: which checkpoints are listed, in which
// order, with which step, epoch, metrics, path and files; what is left out
// (incomplete checkpoints, unknown files); and the errors.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/document.h"
#include "ckpt/error.h"
#include "ckpt/run_directory.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_file;

Tree small_state(float value) {
  Tree tree = Tree::map();
  tree.set(std::string("w"), Tree(Tensor::from_values(DType::kFloat32, {2}, std::span<const float>(std::vector<float>{value, value}))));
  return tree;
}

std::vector<std::optional<int64_t>> epochs_of(const RunListing& listing) {
  std::vector<std::optional<int64_t>> epochs;
  for (const CheckpointEntry& entry : listing.checkpoints) epochs.push_back(entry.epoch);
  return epochs;
}

std::vector<std::optional<int64_t>> steps_of(const RunListing& listing) {
  std::vector<std::optional<int64_t>> steps;
  for (const CheckpointEntry& entry : listing.checkpoints) steps.push_back(entry.step);
  return steps;
}

std::vector<std::string> file_names(const CheckpointEntry& entry) {
  std::vector<std::string> names;
  for (const fs::path& file : entry.files) names.push_back(file.filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t bytes_of(const std::vector<fs::path>& files) {
  uint64_t total = 0;
  for (const fs::path& file : files) total += fs::file_size(file);
  return total;
}

using Epochs = std::vector<std::optional<int64_t>>;

TEST(ForeignRunTest, ReturnnTorchEpochsWithOptimizerStatesAndScores) {
  TempDir run;
  for (int epoch = 1; epoch <= 3; ++epoch) {
    char name[32];
    std::snprintf(name, sizeof name, "epoch.%03d.pt", epoch);
    save(run / name, small_state(static_cast<float>(epoch)));
  }
  save(run / "epoch.002.opt.pt", small_state(0));
  save(run / "epoch.003.opt.pt", small_state(0));
  write_file(run / "epoch.004.pt.tmp_write", "half");  // RETURNN's temporary: not a model
  write_file(run / "notes.txt", "unknown files are left alone");
  write_file(run / "learning_rates",
             "{\n1: EpochData(learningRate=0.001, error={'dev_score': 1.5, 'train_score': 2.0}),\n"
             "3: EpochData(learningRate=0.001, error={'dev_score': 1.25, ':meta:effective_learning_rate': 0.0001}),\n}\n");

  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "returnn");
  EXPECT_EQ(listing.run_dir, run.path());
  ASSERT_EQ(epochs_of(listing), (Epochs{1, 2, 3}));
  for (const CheckpointEntry& entry : listing.checkpoints) EXPECT_FALSE(entry.step.has_value());
  const CheckpointEntry& first = listing.checkpoints[0];
  EXPECT_EQ(first.path, run / "epoch.001.pt");
  EXPECT_EQ(file_names(first), std::vector<std::string>{"epoch.001.pt"});
  EXPECT_EQ(first.metrics, (std::map<std::string, double>{{"dev_score", 1.5}, {"train_score", 2.0}}));
  EXPECT_TRUE(listing.checkpoints[1].metrics.empty());  // no record for epoch 2
  const CheckpointEntry& last = listing.checkpoints[2];
  EXPECT_EQ(file_names(last), (std::vector<std::string>{"epoch.003.opt.pt", "epoch.003.pt"}));
  EXPECT_EQ(last.size, bytes_of(last.files));
  EXPECT_GT(last.size, 0u);
  EXPECT_GT(last.time, 1.6e9);
  // The learning rate and meta entries are not metrics.
  EXPECT_EQ(last.metrics, (std::map<std::string, double>{{"dev_score", 1.25}}));
  EXPECT_TRUE(last.kept_by.empty());
  EXPECT_TRUE(fs::exists(run / "notes.txt"));
}

TEST(ForeignRunTest, ReturnnModelSavedWithoutItsOptimizerStateIsCutShort) {
  TempDir run;
  save(run / "epoch.001.pt", small_state(1));
  save(run / "epoch.001.opt.pt", small_state(0));
  save(run / "epoch.002.pt", small_state(2));  // killed before epoch.002.opt.pt
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(epochs_of(listing), (Epochs{1}));
}

TEST(ForeignRunTest, ReturnnModelsWithoutAnyOptimizerStateAreAllListed) {
  TempDir run;
  save(run / "epoch.001.pt", small_state(1));
  save(run / "epoch.010.pt", small_state(2));
  save(run / "epoch.1000.pt", small_state(3));
  save(run / "epoch.01.pt", small_state(4));  // fewer than three digits: not RETURNN's name
  EXPECT_EQ(epochs_of(list_run_directory(run.path())), (Epochs{1, 10, 1000}));
}

TEST(ForeignRunTest, ReturnnLearningRatesBesideTheModelsDirectory) {
  TempDir output;
  fs::create_directory(output / "models");
  save(output / "models" / "epoch.002.pt", small_state(1));
  write_file(output / "learning_rates", "{2: EpochData(learningRate=0.1, error={'dev_score': 0.5})}\n");
  const RunListing listing = list_run_directory(output / "models");
  ASSERT_EQ(listing.checkpoints.size(), 1u);
  EXPECT_EQ(listing.checkpoints[0].metrics.at("dev_score"), 0.5);
}

TEST(ForeignRunTest, ReturnnPretrainNamesAndThePlainNameFirst) {
  TempDir run;
  save(run / "epoch.pretrain.001.pt", small_state(1));
  save(run / "epoch.pretrain.002.pt", small_state(2));
  save(run / "epoch.002.pt", small_state(3));
  const RunListing listing = list_run_directory(run.path());
  ASSERT_EQ(epochs_of(listing), (Epochs{1, 2}));
  EXPECT_EQ(listing.checkpoints[0].path, run / "epoch.pretrain.001.pt");
  EXPECT_EQ(listing.checkpoints[1].path, run / "epoch.002.pt");
}

TEST(ForeignRunTest, ReturnnTensorFlowBundlesAndOrbaxDirectories) {
  TempDir run;
  save(run / "epoch.001", small_state(1), {.format = "tf"});
  write_file(run / "epoch.001.meta", "graph");
  write_file(run / "epoch.002.index", "an index without its data");
  write_file(run / "checkpoint", "model_checkpoint_path: \"epoch.001\"\n");  // RETURNN's Saver writes one
  save(run / "epoch.003.orbax", small_state(3), {.format = "orbax"});
  fs::create_directory(run / "epoch.004.orbax");  // no _CHECKPOINT_METADATA yet
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "returnn");
  ASSERT_EQ(epochs_of(listing), (Epochs{1, 3}));
  EXPECT_EQ(listing.checkpoints[0].path, run / "epoch.001");
  EXPECT_EQ(file_names(listing.checkpoints[0]),
            (std::vector<std::string>{"epoch.001.data-00000-of-00001", "epoch.001.index", "epoch.001.meta"}));
  EXPECT_EQ(listing.checkpoints[1].path, run / "epoch.003.orbax");
  // What the listing names, ckpt::load opens.
  for (const CheckpointEntry& entry : listing.checkpoints) {
    EXPECT_EQ(load(entry.path).at("w").tensor().copy().values<float>()[0], static_cast<float>(*entry.epoch)) << entry.path;
  }
}

TEST(ForeignRunTest, ReturnnCorruptLearningRatesNamesTheFile) {
  TempDir run;
  save(run / "epoch.001.pt", small_state(1));
  write_file(run / "learning_rates", "{1: EpochData(learningRate=0.1,\nerror={'a': }}");
  try {
    list_run_directory(run.path());
    FAIL() << "expected kCorrupt";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().path, run / "learning_rates");
    EXPECT_NE(std::string(error.what()).find("line 2"), std::string::npos) << error.what();
  }
}

TEST(ForeignRunTest, TensorFlowCheckpointManagerDirectory) {
  TempDir run;
  save(run / "ckpt-1", small_state(1), {.format = "tf"});
  save(run / "ckpt-2", small_state(2), {.format = "tf"});
  save(run / "ckpt-4", small_state(4), {.format = "tf"});  // not named by the state file
  write_file(run / "checkpoint",
             "model_checkpoint_path: \"ckpt-3\"\n"
             "all_model_checkpoint_paths: \"ckpt-1\"\n"
             "all_model_checkpoint_paths: \"/elsewhere/ckpt-2\"\n"
             "all_model_checkpoint_paths: \"ckpt-3\"\n"
             "all_model_checkpoint_timestamps: 1700000001.5\n"
             "all_model_checkpoint_timestamps: 1700000002.5\n"
             "all_model_checkpoint_timestamps: 1700000003.5\n"
             "last_preserved_timestamp: 1699999999.0\n");
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "tf");
  ASSERT_EQ(steps_of(listing), (Epochs{1, 2}));  // ckpt-3 is gone, ckpt-4 not TF's
  EXPECT_EQ(listing.checkpoints[0].path, run / "ckpt-1");
  EXPECT_EQ(listing.checkpoints[1].path, run / "ckpt-2");  // taken by its name in the run directory
  EXPECT_EQ(listing.checkpoints[0].time, 1700000001.5);
  EXPECT_EQ(file_names(listing.checkpoints[1]),
            (std::vector<std::string>{"ckpt-2.data-00000-of-00001", "ckpt-2.index"}));
  EXPECT_FALSE(listing.checkpoints[0].epoch.has_value());
}

TEST(ForeignRunTest, TensorFlowBundleMissingAShardIsLeftOut) {
  TempDir run;
  save(run / "ckpt-1", small_state(1), {.format = "tf"});
  fs::rename(run / "ckpt-1.data-00000-of-00001", run / "ckpt-1.data-00000-of-00002");
  write_file(run / "checkpoint", "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n");
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "tf");
  EXPECT_TRUE(listing.checkpoints.empty());
}

TEST(ForeignRunTest, TensorFlowCorruptStateFileNamesIt) {
  TempDir run;
  save(run / "ckpt-1", small_state(1), {.format = "tf"});
  write_file(run / "checkpoint", "model_checkpoint_path: ckpt-1 {\n");
  try {
    list_run_directory(run.path());
    FAIL() << "expected kCorrupt";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().path, run / "checkpoint");
  }
}

TEST(ForeignRunTest, OversizedRecordsAreCorruptWithoutBeingRead) {
  // Sparse files: the size is refused before a byte is read.
  TempDir tf_run;
  write_file(tf_run / "checkpoint", "");
  fs::resize_file(tf_run / "checkpoint", (16u << 20) + 1);
  TempDir returnn_run;
  save(returnn_run / "epoch.001.pt", small_state(1));
  write_file(returnn_run / "learning_rates", "");
  fs::resize_file(returnn_run / "learning_rates", (64u << 20) + 1);
  TempDir orbax_run;
  fs::create_directory(orbax_run / "1");
  write_file(orbax_run / "1" / "_CHECKPOINT_METADATA", "");
  fs::resize_file(orbax_run / "1" / "_CHECKPOINT_METADATA", (16u << 20) + 1);
  for (const auto& [run, record] : {std::pair{tf_run.path(), tf_run / "checkpoint"},
                                    std::pair{returnn_run.path(), returnn_run / "learning_rates"},
                                    std::pair{orbax_run.path(), orbax_run / "1" / "_CHECKPOINT_METADATA"}}) {
    try {
      list_run_directory(run);
      ADD_FAILURE() << "expected kCorrupt for " << record;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
      EXPECT_EQ(error.context().path, record);
      EXPECT_NE(std::string(error.what()).find("limit"), std::string::npos) << error.what();
    }
  }
}

TEST(ForeignRunTest, FlaxCheckpointsInStepOrder) {
  TempDir run;
  save(run / "checkpoint_10", small_state(10), {.format = "flax"});
  save(run / "checkpoint_2", small_state(2), {.format = "flax"});
  write_file(run / "checkpoint_tmp", "a save in progress");
  fs::create_directory(run / "checkpoint_30.orbax-checkpoint-tmp-1");
  fs::create_directory(run / "checkpoint_10_gda");  // its multiprocess arrays
  write_file(run / "checkpoint_10_gda" / "array", "1234");
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "flax");
  ASSERT_EQ(steps_of(listing), (Epochs{2, 10}));
  EXPECT_EQ(listing.checkpoints[1].path, run / "checkpoint_10");
  EXPECT_EQ(file_names(listing.checkpoints[1]), (std::vector<std::string>{"checkpoint_10", "checkpoint_10_gda"}));
  EXPECT_EQ(listing.checkpoints[1].size, fs::file_size(run / "checkpoint_10") + 4);
  EXPECT_EQ(load(listing.checkpoints[1].path).at("w").tensor().copy().values<float>()[0], 10.0f);
}

TEST(ForeignRunTest, LightningNamesAndLastCkpt) {
  TempDir run;
  save(run / "epoch=0-step=10.ckpt", small_state(0), {.format = "torch"});
  save(run / "epoch=1-step=20-v1.ckpt", small_state(1), {.format = "torch"});
  save(run / "epoch=2-step=30-val_loss=0.25.ckpt", small_state(2), {.format = "torch"});
  Tree last = small_state(2);
  last.set(std::string("epoch"), Tree(int64_t{2}));
  last.set(std::string("global_step"), Tree(int64_t{30}));
  save(run / "last.ckpt", last, {.format = "torch"});
  write_file(run / "model.ckpt", "no epoch or step in the name");
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "lightning");
  ASSERT_EQ(epochs_of(listing), (Epochs{0, 1, 2, 2}));
  EXPECT_EQ(steps_of(listing), (Epochs{10, 20, 30, 30}));
  EXPECT_EQ(listing.checkpoints[2].metrics, (std::map<std::string, double>{{"val_loss", 0.25}}));
  EXPECT_EQ(listing.checkpoints[3].path, run / "last.ckpt");  // the newest copy of step 30
}

TEST(ForeignRunTest, LightningNumbersOutOfRangeAreUnknown) {
  TempDir run;
  save(run / "epoch=1e300-step=5.ckpt", small_state(0), {.format = "torch"});
  save(run / "epoch=-1.ckpt", small_state(0), {.format = "torch"});  // no epoch or step left
  save(run / "epoch=1.5-step=x.ckpt", small_state(0), {.format = "torch"});  // not a number
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "lightning");
  ASSERT_EQ(listing.checkpoints.size(), 1u);
  EXPECT_FALSE(listing.checkpoints[0].epoch.has_value());
  EXPECT_EQ(listing.checkpoints[0].step, 5);
}

TEST(ForeignRunTest, OrbaxCheckpointManagerSteps) {
  TempDir run;
  for (int step : {5, 100}) {
    save(run / std::to_string(step), small_state(static_cast<float>(step)), {.format = "orbax"});
  }
  // Orbax's CheckpointManager records metrics and the commit time.
  write_file(run / "100" / "_CHECKPOINT_METADATA",
             R"({"item_handlers": null, "metrics": {"loss": 0.5, "acc": 1}, "performance_metrics": {},)"
             R"( "init_timestamp_nsecs": 1700000000000000000, "commit_timestamp_nsecs": 1700000001000000000,)"
             R"( "custom_metadata": {}})");
  fs::create_directory(run / "200.orbax-checkpoint-tmp-1700000002");
  fs::create_directory(run / "300");  // no _CHECKPOINT_METADATA
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "orbax");
  ASSERT_EQ(steps_of(listing), (Epochs{5, 100}));
  EXPECT_EQ(listing.checkpoints[1].path, run / "100");
  EXPECT_EQ(listing.checkpoints[1].metrics, (std::map<std::string, double>{{"acc", 1.0}, {"loss", 0.5}}));
  EXPECT_DOUBLE_EQ(listing.checkpoints[1].time, 1700000001.0);
  EXPECT_EQ(file_names(listing.checkpoints[0]), std::vector<std::string>{"5"});
  EXPECT_EQ(load(listing.checkpoints[0].path).at("w").tensor().copy().values<float>()[0], 5.0f);
}

TEST(ForeignRunTest, OrbaxCorruptStepRecordNamesIt) {
  TempDir run;
  fs::create_directory(run / "1");
  write_file(run / "1" / "_CHECKPOINT_METADATA", "{not json");
  try {
    list_run_directory(run.path());
    FAIL() << "expected kCorrupt";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().path, run / "1" / "_CHECKPOINT_METADATA");
  }
}

TEST(ForeignRunTest, UnknownAndEmptyDirectories) {
  TempDir run;
  EXPECT_EQ(list_run_directory(run.path()).layout, "empty");
  write_file(run / "readme.txt", "x");
  fs::create_directory(run / "7");  // a number, but nothing of Orbax's
  write_file(run / "model.safetensors", "x");
  const RunListing listing = list_run_directory(run.path());
  EXPECT_EQ(listing.layout, "empty");
  EXPECT_TRUE(listing.checkpoints.empty());
  try {
    list_run_directory(run / "missing");
    FAIL() << "expected kNotFound";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  }
}

TEST(ForeignRunTest, ListingDocument) {
  TempDir run;
  save(run / "epoch.001.pt", small_state(1));
  write_file(run / "learning_rates", "{1: EpochData(learningRate=0.1, error={'dev_score': 0.5})}\n");
  RunListing listing = list_run_directory(run.path());
  listing.checkpoints[0].kept_by = {"last"};
  listing.checkpoints[0].time = 12.5;
  const uint64_t size = listing.checkpoints[0].size;
  EXPECT_EQ(to_json(listing_document(listing)),
            "{\"run_dir\":\"" + run.path().string() + "\",\"layout\":\"returnn\",\"checkpoints\":[{\"step\":null,"
            "\"epoch\":1,\"metrics\":{\"dev_score\":0.5},\"path\":\"" + (run / "epoch.001.pt").string() +
            "\",\"size\":" + std::to_string(size) + ",\"time\":12.5,\"kept_by\":[\"last\"]}]}");
}

}  // namespace
}  // namespace ckpt
