// The manager's "returnn" layout: epoch.NNN.pt files as RETURNN's torch
// engine writes them, scores merged into its learning_rates file, retention
// that removes only the epochs the manager committed, and the refusals.
// (tests/interop/test_returnn_interop.py reads the result with the real
// RETURNN.)

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/manager.h"
#include "manager/learning_rates.h"
#include "manager/manager_support.h"
#include "support/error_of.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using namespace ckpt::testing;

ManagerOptions returnn_options(ManagerOptions options = {}) {
  options.layout = "returnn";
  options.format = "";
  options.fsync = false;
  return options;
}

SaveStepOptions epoch_metrics(int64_t epoch, double dev_score, double learning_rate = 1e-3) {
  return {.metrics = {{"dev_score", dev_score}, {"learning_rate", learning_rate}}, .epoch = epoch};
}

// The message of the ckpt::Error `body` throws.
template <class Body>
std::string message_of(Body&& body) {
  return error_of(std::forward<Body>(body)).what();
}

std::vector<int64_t> listed_epochs(const std::vector<CheckpointEntry>& entries) {
  std::vector<int64_t> epochs;
  for (const CheckpointEntry& entry : entries) epochs.push_back(*entry.epoch);
  return epochs;
}

TEST(ManagerReturnnTest, WritesEpochFilesAsReturnnsTorchEngine) {
  TempDir dir;
  Manager manager(dir.path(), returnn_options());
  manager.save(100, small_state(1), epoch_metrics(1, 2.5, 0.001));
  manager.save(250, small_state(2), epoch_metrics(2, 1.5, 0.0005));
  ASSERT_TRUE(fs::is_regular_file(dir / "epoch.001.pt"));
  ASSERT_TRUE(fs::is_regular_file(dir / "epoch.002.pt"));
  EXPECT_FALSE(fs::exists(dir / "step-00000250"));

  // What RETURNN's _save_model writes: the model under "model", epoch, step, lr.
  const Tree file = load(dir / "epoch.002.pt");
  EXPECT_TRUE(file.at("model") == small_state(2));
  EXPECT_EQ(file.at("epoch").integer(), 2);
  EXPECT_EQ(file.at("step").integer(), 250);
  EXPECT_DOUBLE_EQ(file.at("effective_learning_rate").real(), 0.0005);

  // learning_rates: one record per epoch, scores and learningRate.
  const detail::LearningRates rates = detail::read_learning_rates(dir / "learning_rates");
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_DOUBLE_EQ(*rates.at(1).learning_rate, 0.001);
  EXPECT_DOUBLE_EQ(rates.at(1).scores.at("dev_score"), 2.5);
  EXPECT_EQ(rates.at(2).scores.count("learning_rate"), 0u) << "the learning rate is not a score";

  // The listing is RETURNN's, with the manager's steps; loads give the model.
  const std::vector<CheckpointEntry> entries = manager.list();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].path, dir / "epoch.002.pt");
  EXPECT_EQ(entries[1].step, 250);
  EXPECT_EQ(entries[1].epoch, 2);
  EXPECT_DOUBLE_EQ(entries[1].metrics.at("dev_score"), 1.5);
  EXPECT_TRUE(manager.load(100) == small_state(1));
  EXPECT_EQ(list_run_directory(dir.path()).layout, "returnn");
  EXPECT_EQ(manager.best("dev_score")->epoch, 2);
  manager.close();

  // Another process reads it read-only, the layout taken from the run's config.
  Manager reader(dir.path(), {.read_only = true});
  EXPECT_TRUE(reader.load(250) == small_state(2));
  ASSERT_TRUE(reader.latest());
  EXPECT_EQ(reader.latest()->step, 250);
}

TEST(ManagerReturnnTest, ContinuesARunReturnnWroteAndNeverRemovesItsEpochs) {
  TempDir dir;
  // RETURNN's own epochs 1 and 2, and its learning_rates with a meta entry
  // and a record of the coming epoch 3 (its learning rate, set in advance).
  Tree own = Tree::map();
  own.set("model", small_state(-1));
  own.set("epoch", int64_t{1});
  save(dir / "epoch.001.pt", own);
  own.set("epoch", int64_t{2});
  save(dir / "epoch.002.pt", own);
  write_file(dir / "learning_rates",
             "{\n1: EpochData(learningRate=0.01, error={'dev_score': 0.5, ':meta:effective_learning_rate': 0.01}),\n"
             "2: EpochData(learningRate=0.01, error={'dev_score': 0.9}),\n"
             "3: EpochData(learningRate=0.005, error={}),\n}\n");

  Manager manager(dir.path(), returnn_options({.keep_last = 1}));
  EXPECT_NE(message_of([&] { manager.save(1, small_state(3), {.epoch = 2}); }).find("not newer than epoch 2"),
            std::string::npos);
  // Epoch 3's learning rate is in the file already: a score alone will do.
  manager.save(10, small_state(3), {.metrics = {{"dev_score", 0.7}}, .epoch = 3});
  manager.save(20, small_state(4), epoch_metrics(4, 0.8));
  manager.save(30, small_state(5), epoch_metrics(5, 0.6));
  manager.wait();
  // keep_last=1 kept only epoch 5 of the manager's own; RETURNN's 1 and 2 stay.
  EXPECT_TRUE(fs::exists(dir / "epoch.001.pt"));
  EXPECT_TRUE(fs::exists(dir / "epoch.002.pt"));
  EXPECT_FALSE(fs::exists(dir / "epoch.003.pt"));
  EXPECT_FALSE(fs::exists(dir / "epoch.004.pt"));
  EXPECT_EQ(listed_epochs(manager.list()), (std::vector<int64_t>{1, 2, 5}));

  // learning_rates keeps RETURNN's records and meta, and every epoch's record.
  const detail::LearningRates rates = detail::read_learning_rates(dir / "learning_rates");
  ASSERT_EQ(rates.size(), 5u);
  EXPECT_EQ(rates.at(1).meta.at("effective_learning_rate"), "0.01");
  EXPECT_DOUBLE_EQ(*rates.at(3).learning_rate, 0.005);
  EXPECT_DOUBLE_EQ(rates.at(3).scores.at("dev_score"), 0.7);
  EXPECT_DOUBLE_EQ(rates.at(4).scores.at("dev_score"), 0.8) << "a pruned epoch's record stays";

  // A restarted manager goes on from epoch 5 and step 30.
  manager.close();
  Manager again(dir.path(), returnn_options({.keep_last = 1}));
  EXPECT_NE(message_of([&] { again.save(30, small_state(6), epoch_metrics(6, 1)); }).find("not newer than step 30"),
            std::string::npos);
  again.save(40, small_state(6), epoch_metrics(6, 1));
  again.wait();
  EXPECT_EQ(listed_epochs(again.list()), (std::vector<int64_t>{1, 2, 6}));
}

TEST(ManagerReturnnTest, OptimizerPartAndAsyncSaves) {
  TempDir dir;
  Manager manager(dir.path(), returnn_options({.max_in_flight = 2}));
  Tree optimizer = Tree::map();
  optimizer.set("lr", 0.1);
  for (int64_t epoch = 1; epoch <= 4; ++epoch) {
    manager.save(epoch * 10,
                 std::vector<StatePart>{{.name = "model", .state = small_state(epoch)},
                                        {.name = "optimizer", .state = optimizer}},
                 {.epoch = epoch, .blocking = false});
  }
  manager.wait();
  for (int64_t epoch = 1; epoch <= 4; ++epoch) {
    const fs::path base = dir / ("epoch.00" + std::to_string(epoch));
    EXPECT_TRUE(load(base.string() + ".pt").at("model") == small_state(epoch));
    EXPECT_TRUE(load(base.string() + ".opt.pt") == optimizer);
  }
  const std::vector<CheckpointEntry> entries = manager.list();
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[3].files.size(), 2u) << "the model and its optimizer state";
  EXPECT_FALSE(fs::exists(dir / "learning_rates")) << "no metrics, no records";
  // With optimizer states in the directory, RETURNN resumes only from an
  // epoch that has one: a save without it is refused.
  EXPECT_NE(message_of([&] { manager.save(50, small_state(5), {.epoch = 5}); }).find("optimizer"), std::string::npos);
}

TEST(ManagerReturnnTest, Refusals) {
  TempDir dir;
  {
    Manager manager(dir.path(), returnn_options());
    EXPECT_NE(message_of([&] { manager.save(1, small_state(1)); }).find("needs the epoch"), std::string::npos);
    EXPECT_NE(message_of([&] { manager.save(1, small_state(1), {.epoch = 0}); }).find("start at 1"), std::string::npos);
    EXPECT_NE(message_of([&] {
                manager.save(1, std::vector<StatePart>{{.name = "encoder", .state = small_state(1)}}, {.epoch = 1});
              }).find("not a part 'encoder'"),
              std::string::npos);
    // Scores without any learning rate: RETURNN's EpochData needs one.
    EXPECT_NE(message_of([&] { manager.save(1, small_state(1), {.metrics = {{"dev_score", 1}}, .epoch = 1}); })
                  .find("learning_rate"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(dir / "epoch.001.pt")) << "a refused save writes nothing";
    manager.save(1, small_state(1), {.epoch = 1});
  }
  EXPECT_NE(message_of([&] { Manager ckpt_layout(dir.path(), {.fsync = false}); }).find("returnn layout"),
            std::string::npos);
  EXPECT_NE(message_of([&] { Manager bad(dir.path(), {.format = "safetensors", .layout = "returnn"}); }).find("torch"),
            std::string::npos);
  EXPECT_NE(message_of([&] { Manager bad(dir.path(), {.layout = "flax"}); }).find("layout"), std::string::npos);

  TempDir ours;
  {
    Manager manager(ours.path(), {.fsync = false});
    manager.save(1, small_state(1));
  }
  EXPECT_NE(message_of([&] { Manager returnn(ours.path(), returnn_options()); }).find("ckpt"), std::string::npos);
}

}  // namespace
}  // namespace ckpt
