// Crash consistency of the checkpoint manager: a child process
// (ckpt_crash_writer manager ...) saves steps in a loop, asynchronous and
// blocking by turns, pruning to the last 2, and is SIGKILLed at random
// moments. After each kill: the run lists; every committed checkpoint opens,
// verifies, is one whole saved state of its own step, and its files match
// checkpoint.json byte for byte; nothing but committed step directories and
// the manager's own files is visible; the next manager removes the killed
// one's temporaries and goes on saving.
//
// CKPT_CRASH_KILLS (default 3) random kills per format; CKPT_CRASH_SEED. Then
// kills at the 1st, 2nd, 4th and 6th rename, unlink and fsync (strace).

#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "ckpt/manager.h"
#include "core/checksum.h"
#include "core/text.h"
#include "crash/crash_harness.h"
#include "io/mapped_file.h"
#include "manager/step_record.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using namespace ckpt::testing;

constexpr int64_t kElements = int64_t{1} << 16;  // 256 KiB of weights: a kill often lands in a write

// Checks the run after a kill; returns how many checkpoints it holds.
size_t check_run(const fs::path& run, const std::string& what, int64_t elements = kElements) {
  for (const std::string& name : visible_names(run)) {
    const bool ours = name == "ckpt_manager.json" || name == "ckpt_manager.lock" || name == "checkpoint" ||
                      detail::parse_step_directory_name(name).has_value();
    EXPECT_TRUE(ours) << what << ": unexpected entry " << name;
    if (detail::parse_step_directory_name(name)) {
      EXPECT_TRUE(fs::exists(run / name / "checkpoint.json")) << what << ": a step without its record: " << name;
    }
  }
  const RunListing listing = list_run_directory(run);
  for (const CheckpointEntry& entry : listing.checkpoints) {
    const std::string where = what + ", step " + std::to_string(*entry.step);
    try {
      verify(entry.path);
      const Tree tree = load(entry.path);
      EXPECT_TRUE(is_whole_crash_state(tree, elements)) << where;
      EXPECT_EQ(crash_step(tree), *entry.step) << where;
      const detail::StepRecord record = detail::read_step_record(entry.files.front());
      for (const detail::RecordedFile& file : record.files) {
        const auto mapped = detail::MappedFile::open(entry.files.front() / file.path);
        EXPECT_EQ(mapped->size(), file.size) << where << " " << file.path;
        EXPECT_EQ(detail::hex_digits(detail::xxh3_64(mapped->bytes()), 16), file.xxh3) << where << " " << file.path;
      }
      EXPECT_TRUE(temporaries_under(entry.files.front()).empty()) << where;
    } catch (const Error& error) {
      ADD_FAILURE() << where << ": a committed checkpoint does not open and verify: " << error.what();
    }
  }
  return listing.checkpoints.size();
}

class ManagerCrashTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ManagerCrashTest, RandomKillsLeaveOnlyWholeCheckpoints) {
  const std::string format = GetParam();
  const int kills = env_number("CKPT_CRASH_KILLS", 3);
  std::mt19937 random(static_cast<uint32_t>(env_number("CKPT_CRASH_SEED", 16)));
  TempDir dir;
  const fs::path run = dir / "run";
  // One uninterrupted run first: its time sets the window the kills fall in.
  const auto started = std::chrono::steady_clock::now();
  const ChildEnd first = run_child({CKPT_CRASH_WRITER_PATH, "manager", format, run.string(), "3", std::to_string(kElements)});
  ASSERT_TRUE(first.exited && first.status == 0) << "the writer failed (status " << first.status << ")";
  const int64_t window =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started).count() * 2 +
      10'000;
  size_t held = 0;
  for (int kill = 0; kill < kills; ++kill) {
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int64_t>(0, window)(random));
    const std::string what = format + " kill " + std::to_string(kill) + " after " + std::to_string(delay.count()) + " us";
    const ChildEnd end =
        run_child({CKPT_CRASH_WRITER_PATH, "manager", format, run.string(), "0", std::to_string(kElements)}, delay);
    ASSERT_FALSE(end.exited) << what << ": the writer exited by itself (status " << end.status << ")";
    held = check_run(run, what);
    EXPECT_GE(held, 1u) << what << ": the committed checkpoints are gone";
    // The next writer removes what the killed one left and goes on.
    {
      Manager next(run, {.keep_last = 2, .format = format});
      EXPECT_TRUE(detail::AtomicDirectory::leftover_temporaries(run).empty()) << what;
    }
  }
  std::cout << "[ crash ] manager " << format << ": " << kills << " kills, " << held << " checkpoints after the last\n";
}

// Kills at the Kth call of a kind in any thread of the writer (strace's
// counters are per thread: the first ones hit the main thread's opening of
// the run, later ones the background thread's commits and its pruning).
TEST_P(ManagerCrashTest, KillsAtSystemCallsLeaveOnlyWholeCheckpoints) {
  if (!fs::exists("/usr/bin/strace")) GTEST_SKIP() << "strace is not installed (scripts/install-deps installs it)";
  const std::string format = GetParam();
  TempDir dir;
  const fs::path run = dir / "run";
  const std::vector<std::string> writer = {CKPT_CRASH_WRITER_PATH, "manager", format, run.string(), "3", "1024"};
  ASSERT_EQ(run_child(writer).status, 0);
  int killed = 0;
  for (const std::string calls : {"rename,renameat,renameat2", "unlink,unlinkat,rmdir", "fsync,fdatasync,syncfs"}) {
    for (int occurrence : {1, 2, 4, 6}) {
      const std::string what = format + " killed at call " + std::to_string(occurrence) + " of " + calls;
      std::vector<std::string> argv = {"/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + calls, "-e",
                                       "inject=" + calls + ":signal=KILL:when=" + std::to_string(occurrence)};
      argv.insert(argv.end(), writer.begin(), writer.end());
      const ChildEnd end = run_child(argv);
      killed += end.exited ? 0 : 1;
      EXPECT_GE(check_run(run, what, 1024), 1u) << what;
      Manager next(run, {.keep_last = 2, .format = format});
      EXPECT_TRUE(detail::AtomicDirectory::leftover_temporaries(run).empty()) << what;
    }
  }
  EXPECT_GT(killed, 0) << "no system call kill hit the writer";
  std::cout << "[ crash ] manager " << format << ": " << killed << " writers killed at system calls\n";
}

INSTANTIATE_TEST_SUITE_P(Formats, ManagerCrashTest, ::testing::Values("safetensors", "tf", "orbax"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ckpt
