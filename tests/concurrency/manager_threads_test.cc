// The checkpoint manager with threads (run under ThreadSanitizer by make
// test-tsan): one thread saves asynchronously (the background thread commits
// and prunes to the last 2) while another lists the run and loads what it
// lists through a read-only manager and list_run_directory. Every load is a
// whole state of its own step; a checkpoint listed and pruned before its
// load is the only failure allowed (kNotFound).

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "ckpt/manager.h"
#include "crash/crash_harness.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using namespace ckpt::testing;

constexpr int64_t kElements = 4 << 10;

TEST(ManagerThreadsTest, ReadersDuringAsyncSavesAndPruning) {
  TempDir dir;
  const auto run = dir / "run";
  Manager writer(run, {.keep_last = 2, .max_in_flight = 2, .fsync = false});
  writer.save(1, crash_state(1, kElements));
  const int saves = env_number("CKPT_CONCURRENT_SAVES", 30);
  std::atomic<bool> done{false};
  std::atomic<int> loads{0};
  std::atomic<int> wrong{0};
  std::thread reader([&] {
    Manager reading(run, {.read_only = true});
    while (!done.load()) {
      for (const CheckpointEntry& entry : reading.list()) {
        try {
          const Tree tree = load(entry.path);
          ++loads;
          if (!is_whole_crash_state(tree, kElements) || crash_step(tree) != *entry.step) ++wrong;
        } catch (const Error& error) {
          if (error.code() != ErrorCode::kNotFound) ++wrong;  // pruned between the listing and the load
        }
      }
    }
  });
  Tree state = crash_state(2, kElements);
  for (int64_t step = 2; step <= saves; ++step) {
    state = crash_state(step, kElements);
    writer.save(step, state, {.metrics = {{"loss", 1.0 / static_cast<double>(step)}}, .blocking = step % 3 == 0});
  }
  writer.wait();
  done = true;
  reader.join();
  writer.close();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(loads.load(), 0);
  std::vector<int64_t> steps;
  for (const CheckpointEntry& entry : list_run_directory(run).checkpoints) steps.push_back(*entry.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{saves - 1, saves}));
}

// A state saved in parts, asynchronously: the parts of each step are
// committed on threads of their own (each hashing its tensors in parallel,
// the snapshot copied in parallel), the frozen part linked from the step
// before; a reader loads the union of what it lists meanwhile.
TEST(ManagerThreadsTest, PartsCommittedInParallelWhileReading) {
  TempDir dir;
  const auto run = dir / "run";
  Manager writer(run, {.keep_last = 2, .max_in_flight = 2, .fsync = false});
  Tree frozen = Tree::map();
  frozen.set("frozen", crash_state(0, kElements));
  const auto parts_of = [&](int64_t step) {
    Tree trained = Tree::map();
    trained.set("trained", crash_state(step, kElements));
    return std::vector<StatePart>{{.name = "frozen", .state = frozen}, {.name = "trained", .state = trained}};
  };
  writer.save(1, parts_of(1));
  const int saves = env_number("CKPT_CONCURRENT_SAVES", 30) / 2;
  std::atomic<bool> done{false};
  std::atomic<int> loads{0};
  std::atomic<int> wrong{0};
  std::thread reader([&] {
    Manager reading(run, {.read_only = true});
    while (!done.load()) {
      for (const CheckpointEntry& entry : reading.list()) {
        try {
          const Tree tree = load_checkpoint(entry);
          ++loads;
          if (!(tree.at("frozen") == frozen.at("frozen")) || crash_step(tree.at("trained")) != *entry.step) ++wrong;
        } catch (const Error& error) {
          if (error.code() != ErrorCode::kNotFound) ++wrong;  // pruned between the listing and the load
        }
      }
    }
  });
  for (int64_t step = 2; step <= saves; ++step) {
    writer.save(step, parts_of(step), {.blocking = step % 4 == 0});
  }
  writer.wait();
  done = true;
  reader.join();
  writer.close();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(loads.load(), 0);
  const std::vector<CheckpointEntry> entries = list_run_directory(run).checkpoints;
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].parts.size(), 2u);
}

}  // namespace
}  // namespace ckpt
