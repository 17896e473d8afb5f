// Readers during writes see whole checkpoints only: one thread saves a target
// over and over while another loads it in a loop; every load is one whole
// saved state (or, for TF bundles, where the index and the data are two
// files renamed one after the other, an Error{kCorrupt} from the window of
// issue 15's defect 3; never a silent mixture).

#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <thread>

#include "crash/crash_harness.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using namespace ckpt::testing;

constexpr int64_t kElements = 64 << 10;  // 256 KiB of weights

class ConcurrentLoadTest : public ::testing::TestWithParam<CrashTarget> {};

TEST_P(ConcurrentLoadTest, LoadsDuringSavesSeeWholeCheckpoints) {
  const CrashTarget target = GetParam();
  TempDir dir;
  const auto path = dir / target.name;
  const SaveOptions options{.format = target.format, .fsync = false};
  save(path, crash_state(0, kElements), options);
  const int saves = env_number("CKPT_CONCURRENT_SAVES", 40);
  std::atomic<bool> done{false};
  std::atomic<int> loads{0};
  std::atomic<int> torn{0};
  std::atomic<int> mixed{0};
  std::string first_problem;
  std::thread reader([&] {
    while (!done.load()) {
      try {
        const Tree loaded = load(path);
        if (!is_whole_crash_state(loaded, kElements)) {
          if (mixed++ == 0) first_problem = "step " + std::to_string(crash_step(loaded)) + " not whole";
        }
        ++loads;
      } catch (const Error& error) {
        if (target.format == "tf" && error.code() == ErrorCode::kCorrupt) {
          ++torn;
        } else if (mixed++ == 0) {
          first_problem = error.what();
        }
      }
    }
  });
  for (int step = 1; step <= saves; ++step) save(path, crash_state(step, kElements), options);
  done = true;
  reader.join();
  EXPECT_EQ(mixed.load(), 0) << target.format << ": a load saw something other than a whole checkpoint: "
                             << first_problem;
  EXPECT_GT(loads.load(), 0);
  std::cout << "[ concurrent ] " << target.format << ": " << saves << " saves, " << loads.load()
            << " whole loads, " << torn.load() << " torn TF pairs refused, " << mixed.load() << " bad\n";
}

INSTANTIATE_TEST_SUITE_P(EveryWritableFormat, ConcurrentLoadTest, ::testing::ValuesIn(crash_targets()),
                         [](const auto& info) { return info.param.format; });

}  // namespace
}  // namespace ckpt
