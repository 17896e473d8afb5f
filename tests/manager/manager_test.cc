// The checkpoint manager (ckpt/manager.h) on real run directories: layout and
// records, retention after commits, persistence across restarts, the safety
// rules, dedup, TF and Orbax states. The lock and asynchronous saves:
// manager_async_test.cc.

#include "ckpt/manager.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/text.h"
#include "io/atomic_directory.h"
#include "io/atomic_file.h"
#include "manager/state_files.h"
#include "manager/step_record.h"
#include "manager/manager_support.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using namespace ckpt::testing;

TEST(ManagerTest, LayoutAndCheckpointJson) {
  TempDir dir;
  const fs::path run = dir / "run";
  Manager manager(run);
  manager.save(1200, small_state(1200), {.metrics = {{"dev_loss", 0.5}}, .epoch = 3});
  const fs::path step_dir = run / "step-00001200";
  ASSERT_TRUE(fs::is_regular_file(step_dir / "state.safetensors"));
  ASSERT_TRUE(fs::is_regular_file(step_dir / "checkpoint.json"));
  const detail::StepRecord record = detail::read_step_record(step_dir);
  EXPECT_EQ(record.step, 1200);
  EXPECT_EQ(record.epoch, 3);
  EXPECT_EQ(record.metrics.at("dev_loss"), 0.5);
  EXPECT_EQ(record.format, "safetensors");
  EXPECT_GT(record.time, 1.6e9);
  // Which ckpt wrote it: the project's version, as `ckpt --version` prints it.
  const std::string json = file_text(step_dir / "checkpoint.json");
  EXPECT_NE(json.find(R"("written_by":"ckpt )"), std::string::npos) << json;
  ASSERT_EQ(record.files.size(), 1u);
  EXPECT_EQ(record.files[0].path, "state.safetensors");
  const std::string bytes = file_text(step_dir / "state.safetensors");
  EXPECT_EQ(record.files[0].size, bytes.size());
  EXPECT_EQ(record.files[0].xxh3,
            detail::hex_digits(detail::xxh3_64(std::as_bytes(std::span(bytes.data(), bytes.size()))), 16));
  // The entry's path is what ckpt::load opens directly.
  const RunListing listing = list_run_directory(run);
  EXPECT_EQ(listing.layout, "ckpt");
  ASSERT_EQ(listing.checkpoints.size(), 1u);
  const CheckpointEntry& entry = listing.checkpoints[0];
  EXPECT_EQ(entry.path, step_dir / "state.safetensors");
  EXPECT_EQ(entry.files, std::vector<fs::path>{step_dir});
  EXPECT_EQ(entry.size, bytes.size() + fs::file_size(step_dir / "checkpoint.json"));
  EXPECT_EQ(entry.epoch, 3);
  EXPECT_TRUE(load(entry.path) == small_state(1200));
  verify(entry.path);
  manager.close();
  EXPECT_TRUE(detail::AtomicDirectory::leftover_temporaries(run).empty());
}

TEST(ManagerTest, WideStepsSortByNumber) {
  TempDir dir;
  Manager manager(dir.path());
  manager.save(99999999, small_state(1));
  manager.save(123456789, small_state(2));
  EXPECT_TRUE(fs::is_directory(dir / "step-123456789"));
  EXPECT_EQ(listed_steps(manager.list()), (std::vector<int64_t>{99999999, 123456789}));
  EXPECT_EQ(manager.latest()->step, 123456789);
}

TEST(ManagerTest, StepsMustIncreaseAndOptionsAreChecked) {
  TempDir dir;
  Manager manager(dir.path());
  manager.save(5, small_state(5));
  for (int64_t step : {5, 4, -1}) {
    try {
      manager.save(step, small_state(step));
      ADD_FAILURE() << step;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
    }
  }
  manager.close();
  EXPECT_THROW(Manager(dir / "a", {.keep_best = 2}), Error);  // no metric
  EXPECT_THROW(Manager(dir / "b", {.max_in_flight = 0}), Error);
  EXPECT_THROW(Manager(dir / "c", {.format = "npy"}), Error);
  EXPECT_THROW(Manager(dir / "d", {.format = "nonesuch"}), Error);
  EXPECT_THROW(Manager(dir / "missing", {.read_only = true}), Error);
}

TEST(ManagerTest, NoPolicyDeletesNothing) {
  TempDir dir;
  Manager manager(dir.path());
  for (int64_t step = 1; step <= 4; ++step) manager.save(step, small_state(step));
  manager.wait();
  EXPECT_EQ(listed_steps(manager.list()), (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(ManagerTest, KeepLastAndBestTogether) {
  TempDir dir;
  Manager manager(dir.path(), {.keep_last = 1, .keep_best = 1, .metric = "loss"});
  const double losses[] = {0.4, 0.1, 0.5, 0.3, 0.6};
  for (int64_t step = 1; step <= 5; ++step) {
    manager.save(step, small_state(step), {.metrics = {{"loss", losses[step - 1]}}});
  }
  manager.wait();
  const std::vector<CheckpointEntry> entries = manager.list();
  EXPECT_EQ(listed_steps(entries), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(entries[0].kept_by, (std::vector<std::string>{"keep_best(1, loss, min)"}));
  EXPECT_EQ(entries[1].kept_by, (std::vector<std::string>{"keep_last(1)", "newest"}));
  EXPECT_EQ(manager.best("loss")->step, 2);
  EXPECT_EQ(manager.best("loss", MetricMode::kMax)->step, 5);
  EXPECT_FALSE(manager.best("accuracy"));
  EXPECT_FALSE(fs::exists(dir / "step-00000001"));
  // What ckpt ls shows: the same kept_by, from the persisted configuration.
  EXPECT_EQ(list_run_directory(dir.path()).checkpoints[0].kept_by, entries[0].kept_by);
}

TEST(ManagerTest, RestartDecidesAsTheFirstProcessWould) {
  TempDir dir;
  {
    Manager first(dir.path(), {.keep_last = 2});
    first.save(1, small_state(1), {.keep_forever = true});
    for (int64_t step = 2; step <= 4; ++step) first.save(step, small_state(step));
    first.close();
    EXPECT_EQ(listed_steps(list_run_directory(dir.path()).checkpoints), (std::vector<int64_t>{1, 3, 4}));
  }
  // A restarted process with the same options: the forever mark survives it.
  Manager second(dir.path(), {.keep_last = 2});
  EXPECT_EQ(second.latest()->step, 4);
  second.save(5, small_state(5));
  second.save(6, small_state(6));
  second.wait();
  const std::vector<CheckpointEntry> entries = second.list();
  EXPECT_EQ(listed_steps(entries), (std::vector<int64_t>{1, 5, 6}));
  EXPECT_TRUE(contains(entries[0].kept_by, "keep_steps"));
  second.close();
  // `ckpt prune` without flags applies the recorded policies: nothing more to remove.
  EXPECT_TRUE(prune_run_directory(dir.path()).removed.empty());
}

TEST(ManagerTest, CustomPolicyDecisionIsRecorded) {
  TempDir dir;
  {
    const KeepFunction even = [](const std::vector<CheckpointEntry>& entries) {
      std::vector<int64_t> keep;
      for (const CheckpointEntry& entry : entries) {
        if (*entry.step % 2 == 0 && entry.metrics.count("m")) keep.push_back(*entry.step);
      }
      return keep;
    };
    Manager manager(dir.path(), {.keep = even});
    for (int64_t step = 1; step <= 5; ++step) manager.save(step, small_state(step), {.metrics = {{"m", 1.0}}});
    manager.close();
  }
  const RunListing listing = list_run_directory(dir.path());
  EXPECT_EQ(listed_steps(listing.checkpoints), (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(listing.checkpoints[0].kept_by, (std::vector<std::string>{"custom"}));
  EXPECT_EQ(listing.checkpoints[2].kept_by, (std::vector<std::string>{"newest"}));
}

TEST(ManagerTest, RestoredFromIsProtectedUntilANewerCommit) {
  TempDir dir;
  {
    Manager writer(dir.path());
    for (int64_t step = 1; step <= 3; ++step) writer.save(step, small_state(step));
  }
  Manager manager(dir.path(), {.keep_last = 1});
  EXPECT_TRUE(manager.load(1) == small_state(1));
  EXPECT_TRUE(contains(manager.list()[0].kept_by, "restored from"));
  // A save that fails commits nothing: the checkpoint restored from stays.
  detail::inject_write_fault_after(0);
  EXPECT_THROW(manager.save(4, small_state(4)), Error);
  detail::inject_write_fault_after(-1);
  manager.wait();
  EXPECT_TRUE(fs::exists(dir / "step-00000001"));
  manager.save(4, small_state(4));  // the failed step is free again
  manager.wait();
  EXPECT_EQ(listed_steps(manager.list()), (std::vector<int64_t>{4}));
}

TEST(ManagerTest, RestoreLatestThroughTheRestoreLayer) {
  TempDir dir;
  Manager manager(dir.path());
  Tree target = Tree::map();
  target.set("w", Tensor::spec(DType::kFloat32, {8}));
  target.set("step", int64_t{0});
  EXPECT_FALSE(manager.restore_latest(target));  // a fresh run
  manager.save(1, small_state(1));
  manager.save(2, small_state(2));
  const std::optional<RestoreReport> report = manager.restore_latest(target);
  ASSERT_TRUE(report);
  EXPECT_TRUE(report->ok());
  EXPECT_TRUE(report->tree == small_state(2));
  // Strict by default: a target that wants more than the checkpoint has.
  target.set("extra", Tensor::spec(DType::kFloat32, {1}));
  EXPECT_THROW(manager.restore_latest(target), MismatchError);
  EXPECT_FALSE(manager.restore_latest(target, {.strict = false})->ok());
  EXPECT_THROW(manager.load(7), Error);
}

TEST(ManagerTest, OtherFilesAndRunsSurvive) {
  TempDir dir;
  const fs::path run = dir.path();
  std::ofstream(run / "notes.txt") << "mine";
  fs::create_directories(run / "step-00000002");  // not committed by a manager: no checkpoint.json
  std::ofstream(run / "step-00000002" / "weights.bin") << "x";
  fs::create_directories(run / "other_run" / "step-00000001");
  std::ofstream(run / "other_run" / "step-00000001" / "checkpoint.json") << "{}";
  fs::create_directories(run / "step-1");
  // A symbolic link under a step name is not a checkpoint of this run either.
  fs::create_directories(dir / "elsewhere" / "run" / "step-00000007");
  std::ofstream(dir / "elsewhere" / "run" / "step-00000007" / "checkpoint.json") << "{}";
  fs::create_directory_symlink(dir / "elsewhere" / "run" / "step-00000007", run / "step-00000007");
  Manager manager(run, {.keep_last = 1});
  manager.save(1, small_state(1));
  // Step 2's name is taken by something the manager did not commit: refused, kept.
  EXPECT_THROW(manager.save(2, small_state(2)), Error);
  manager.save(3, small_state(3));
  manager.save(4, small_state(4));
  manager.save(5, small_state(5));
  manager.close();
  EXPECT_EQ(file_text(run / "notes.txt"), "mine");
  EXPECT_TRUE(fs::exists(run / "step-00000002" / "weights.bin"));
  EXPECT_TRUE(fs::exists(run / "other_run" / "step-00000001" / "checkpoint.json"));
  EXPECT_TRUE(fs::is_directory(run / "step-1"));
  EXPECT_TRUE(fs::is_symlink(run / "step-00000007"));
  EXPECT_TRUE(fs::exists(dir / "elsewhere" / "run" / "step-00000007" / "checkpoint.json"));
  EXPECT_EQ(listed_steps(list_run_directory(run).checkpoints), (std::vector<int64_t>{5}));
}

TEST(ManagerTest, BrokenRecordsAreCorruptNamingTheFile) {
  TempDir dir;
  { Manager(dir.path()).save(4, small_state(4)); }
  const fs::path record = dir / "step-00000004" / "checkpoint.json";
  const std::string good = file_text(record);
  const auto expect_corrupt = [&](const fs::path& named, const std::string& what) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        if (attempt == 0) {
          list_run_directory(dir.path());
        } else {
          Manager manager(dir.path());
        }
        ADD_FAILURE() << what << ": accepted";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << what << ": " << error.what();
        EXPECT_NE(std::string(error.what()).find(named.string()), std::string::npos) << error.what();
      }
    }
  };
  std::ofstream(record, std::ios::trunc) << "{\"ckpt_version\":1,";
  expect_corrupt(record, "truncated record");
  std::string other_step = good;
  other_step.replace(other_step.find("\"step\":4"), 8, "\"step\":5");
  std::ofstream(record, std::ios::trunc) << other_step;
  expect_corrupt(record, "record of another step");
  std::ofstream(record, std::ios::trunc) << good;
  std::ofstream(dir / "ckpt_manager.json", std::ios::trunc) << "{\"ckpt_version\":1}";
  expect_corrupt(dir / "ckpt_manager.json", "config without its fields");
}

TEST(ManagerTest, AbandonedTemporariesAreRemovedOnOpen) {
  TempDir dir;
  { Manager(dir.path()).save(1, small_state(1)); }
  // What a killed save leaves: a temporary step directory nobody holds.
  const fs::path leftover = dir / ".step-00000002.ckpt-tmp-0123456789abcdef";
  fs::create_directories(leftover);
  std::ofstream(leftover / "state.safetensors") << "half";
  const fs::path foreign = dir / ".notes.txt.bak";
  std::ofstream(foreign) << "keep";
  Manager manager(dir.path());
  EXPECT_FALSE(fs::exists(leftover));
  EXPECT_TRUE(fs::exists(foreign));
  EXPECT_EQ(listed_steps(manager.list()), (std::vector<int64_t>{1}));
}

TEST(ManagerTest, UnchangedStateIsHardLinked) {
  TempDir dir;
  Manager manager(dir.path(), {.keep_last = 1});
  manager.save(1, small_state(1));
  manager.save(2, small_state(1));  // the same state again
  manager.save(3, small_state(3));  // a changed one
  manager.wait();
  // Step 1 was pruned; step 2 linked its file and still loads and verifies.
  EXPECT_FALSE(fs::exists(dir / "step-00000001"));
  EXPECT_FALSE(fs::exists(dir / "step-00000002"));
  EXPECT_TRUE(manager.load(3) == small_state(3));
  manager.close();

  TempDir other;
  Manager linking(other.path(), {.keep_last = 1});
  linking.save(1, small_state(7));
  const ino_t first_inode = inode_of(other / "step-00000001" / "state.safetensors");
  linking.save(2, small_state(7));
  EXPECT_EQ(inode_of(other / "step-00000002" / "state.safetensors"), first_inode);
  linking.wait();  // step 1 pruned: its file lives on in step 2
  EXPECT_FALSE(fs::exists(other / "step-00000001"));
  EXPECT_TRUE(linking.load(2) == small_state(7));
  verify(other / "step-00000002" / "state.safetensors");
  EXPECT_EQ(detail::read_step_record(other / "step-00000002").files[0].size,
            fs::file_size(other / "step-00000002" / "state.safetensors"));
  linking.save(3, small_state(8));
  EXPECT_NE(inode_of(other / "step-00000003" / "state.safetensors"), first_inode);
}

TEST(ManagerTest, DedupOffWritesEveryTime) {
  TempDir dir;
  Manager manager(dir.path(), {.dedup = false});
  manager.save(1, small_state(1));
  manager.save(2, small_state(1));
  EXPECT_NE(inode_of(dir / "step-00000001" / "state.safetensors"), inode_of(dir / "step-00000002" / "state.safetensors"));
}

// Tensors only, for formats that hold nothing else (TF bundles).
Tree tensor_state(int64_t step) {
  Tree tree = Tree::map();
  tree.set("w", small_state(step).at("w").tensor());
  return tree;
}

TEST(ManagerTest, TensorFlowRunKeepsTheStateFile) {
  TempDir dir;
  Manager manager(dir.path(), {.keep_last = 2, .format = "tf"});
  for (int64_t step = 1; step <= 3; ++step) manager.save(step, tensor_state(step));
  manager.wait();
  EXPECT_TRUE(fs::exists(dir / "step-00000003" / "state.index"));
  EXPECT_EQ(file_text(dir / "checkpoint"),
            "model_checkpoint_path: \"step-00000003/state\"\n"
            "all_model_checkpoint_paths: \"step-00000002/state\"\n"
            "all_model_checkpoint_paths: \"step-00000003/state\"\n");
  EXPECT_FALSE(fs::exists(dir / "step-00000003" / "checkpoint"));  // not inside the step
  EXPECT_TRUE(load(manager.latest()->path) == tensor_state(3));
}

// Every file of a step is recorded with the size and xxh3 of its bytes as
// they lie on disk, whether the writer wrote it in file order (hashed as it
// was written: io/file_hashes.h) or not (read back), with dedup on or off.
TEST(ManagerTest, EveryFormatsFilesAreRecordedWithTheXxh3OfTheirBytesOnDisk) {
  for (const bool dedup : {true, false}) {
    for (const std::string format : {"safetensors", "torch", "tf", "flax", "orbax", "dcp"}) {
      SCOPED_TRACE(format + (dedup ? " dedup" : " no dedup"));
      TempDir dir;
      Manager manager(dir.path(), {.format = format, .dedup = dedup});
      manager.save(1, small_state(1));
      manager.save(2, small_state(2));
      for (const int64_t step : {1, 2}) {
        const fs::path step_dir = dir / detail::step_directory_name(step);
        const detail::StepRecord record = detail::read_step_record(step_dir);
        ASSERT_FALSE(record.files.empty());
        for (const detail::RecordedFile& file : record.files) {
          const std::string bytes = file_text(step_dir / file.path);
          EXPECT_EQ(file.size, bytes.size()) << file.path;
          EXPECT_EQ(file.xxh3,
                    detail::hex_digits(detail::xxh3_64(std::as_bytes(std::span(bytes.data(), bytes.size()))), 16))
              << file.path;
        }
      }
      EXPECT_TRUE(load(manager.latest()->path) == small_state(2));
    }
  }
}

TEST(ManagerTest, OrbaxStateIsADirectoryWithEveryFileRecorded) {
  TempDir dir;
  Manager manager(dir.path(), {.format = "orbax"});
  manager.save(1, small_state(1));
  const fs::path state = dir / "step-00000001" / "state";
  ASSERT_TRUE(fs::is_directory(state));
  const detail::StepRecord record = detail::read_step_record(dir / "step-00000001");
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(state)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(record.files.size(), files);
  EXPECT_GT(files, 1u);
  EXPECT_TRUE(load(manager.latest()->path) == small_state(1));
  manager.save(2, small_state(1));  // dedup links every file of the directory
  EXPECT_TRUE(load(manager.latest()->path) == small_state(1));
}

}  // namespace
}  // namespace ckpt
