// Disk full: saves of every format onto a small tmpfs. A save that does not
// fit fails with Error{kIo} naming its path (ENOSPC), the checkpoint
// committed before at the same target is intact and verifies, and no
// temporary is left; a save that nearly fits (found by bisection, within a
// few KiB of the limit) succeeds and reads back. Skips where mounting is not
// allowed; the mount is detached in every case.

#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "crash/crash_harness.h"
#include "io/deferred_release.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using namespace ckpt::testing;

// A tmpfs of `size` mounted on a fresh directory, detached on destruction
// (MNT_DETACH: never waits on a busy mount).
class SmallFileSystem {
 public:
  explicit SmallFileSystem(const std::string& size) {
    if (::mount("tmpfs", root_.path().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, ("size=" + size).c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallFileSystem() {
    if (mounted_) ::umount2(root_.path().c_str(), MNT_DETACH);
  }
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const fs::path& path() const { return root_.path(); }

 private:
  TempDir root_;
  bool mounted_ = false;
  std::string error_;
};

constexpr int64_t kCommittedElements = 16 << 10;  // 64 KiB of weights

// Saves `elements` to `path` with the checks of a save that must either
// succeed and read back, or fail cleanly; returns whether it succeeded.
bool save_fits(const CrashTarget& target, const fs::path& dir, int64_t step, int64_t elements,
               int64_t committed_step, int64_t committed_elements) {
  const fs::path path = dir / target.name;
  const std::string what = target.format + " save of " + std::to_string(elements * 4) + " bytes of weights";
  try {
    save(path, crash_state(step, elements), {.format = target.format});
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kIo) << what << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find(target.name), std::string::npos)
        << what << ": the error does not name the path: " << error.what();
    EXPECT_NE(std::string(error.what()).find(std::strerror(ENOSPC)), std::string::npos)
        << what << ": not a disk-full error: " << error.what();
    EXPECT_TRUE(temporaries_under(dir).empty()) << what << ": a temporary was left behind";
    EXPECT_EQ(visible_names(dir), committed_names(target)) << what;
    verify(path);
    EXPECT_TRUE(load(path) == crash_state(committed_step, committed_elements))
        << what << ": the committed checkpoint changed";
    return false;
  }
  detail::drain_deferred_releases();  // a replaced directory is removed off the saving thread
  EXPECT_TRUE(temporaries_under(dir).empty()) << what;
  verify(path);
  EXPECT_TRUE(load(path) == crash_state(step, elements)) << what;
  return true;
}

class DiskFullTest : public ::testing::TestWithParam<CrashTarget> {};

TEST_P(DiskFullTest, SavesThatDoNotFitFailCleanlyAndOnesThatNearlyFitSucceed) {
  const CrashTarget target = GetParam();
  SmallFileSystem disk("1m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (" << disk.error() << "): needs CAP_SYS_ADMIN";
  const fs::path dir = disk.path();
  save(dir / target.name, crash_state(0, kCommittedElements), {.format = target.format});
  int cases = 0;
  // Far too big: 4 MiB on a 1 MiB disk.
  EXPECT_FALSE(save_fits(target, dir, 1, 1 << 20, 0, kCommittedElements));
  ++cases;
  // Bisection between a size that fits and one that does not: each probe is
  // a case, and the last ones lie within 4 KiB of the limit on both sides.
  int64_t fits = kCommittedElements;
  int64_t too_big = 1 << 18;  // 1 MiB of weights beside the committed 64 KiB
  int64_t step = 1;
  while (too_big - fits > 1024) {
    const int64_t middle = (fits + too_big) / 2;
    ++cases;
    if (save_fits(target, dir, ++step, middle, 0, kCommittedElements)) {
      // It is now the committed one: put the small one back, so that the
      // next probe has the same room.
      save(dir / target.name, crash_state(0, kCommittedElements), {.format = target.format});
      fits = middle;
    } else {
      too_big = middle;
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(fits, kCommittedElements) << target.format << ": nothing bigger than the first save fit";
  std::cout << "[ disk full ] " << target.format << ": " << cases << " cases; the largest save that fit held "
            << fits * 4 << " bytes of weights, the smallest that did not " << too_big * 4 << "\n";
  RecordProperty("disk_full_cases", cases);
}

INSTANTIATE_TEST_SUITE_P(EveryWritableFormat, DiskFullTest, ::testing::ValuesIn(crash_targets()),
                         [](const auto& info) { return info.param.format; });

}  // namespace
}  // namespace ckpt
