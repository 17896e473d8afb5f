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

}  // namespace
}  // namespace ckpt
