// Deferred release (io/deferred_release.h) on real files: a replaced file's
// inode stays held until the background thread closes it, what waits is
// bounded, pruned checkpoints leave listings at once, a process that exits
// leaves nothing hidden behind, and no failure of a release touches what was
// committed.

#include "io/deferred_release.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/manager.h"
#include "ckpt/run_directory.h"
#include "io/atomic_directory.h"
#include "io/atomic_file.h"
#include "manager/run_files.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "support/tool_run.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;
using ckpt::testing::read_file;
using ckpt::testing::TempDir;

// Bytes well above kDeferReleaseFrom, every one a function of `seed`.
std::string payload(char seed, size_t size = size_t{3} << 20) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(seed + static_cast<char>(i % 251));
  return bytes;
}

void commit_file(const fs::path& path, const std::string& bytes) {
  AtomicFile file(path, {.fsync = false});
  file.write_at(std::as_bytes(std::span(bytes.data(), bytes.size())), 0);
  file.commit();
}

// How many of this process's descriptors name a removed file whose path was
// `path`: what /proc shows for an inode held after its name went.
int held_removed(const fs::path& path) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const fs::path target = fs::read_symlink(entry.path(), error);
    if (!error && target.string() == path.string() + " (deleted)") ++count;
  }
  return count;
}

// Pauses the background thread for the test's duration (and restores the
// bound), so that what is pending can be looked at; drains at the end.
struct Paused {
  DeferredReleaseLimits previous;
  explicit Paused(DeferredReleaseLimits limits = {}) : previous(set_deferred_release_limits(limits)) {
    drain_deferred_releases();
    pause_deferred_releases(true);
  }
  ~Paused() {
    pause_deferred_releases(false);
    drain_deferred_releases();
    set_deferred_release_limits(previous);
  }
};

TEST(DeferredReleaseTest, ReplacedFileStaysReadableByItsReaders) {
  TempDir dir;
  const fs::path path = dir / "state.bin";
  const std::string old_bytes = payload('a');
  const std::string new_bytes = payload('n');
  commit_file(path, old_bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* mapped = ::mmap(nullptr, old_bytes.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  commit_file(path, new_bytes);
  drain_deferred_releases();
  std::string through_fd(old_bytes.size(), '\0');
  EXPECT_EQ(::pread(fd, through_fd.data(), through_fd.size(), 0), static_cast<ssize_t>(old_bytes.size()));
  EXPECT_TRUE(through_fd == old_bytes);
  EXPECT_EQ(std::memcmp(mapped, old_bytes.data(), old_bytes.size()), 0);
  EXPECT_TRUE(read_file(path) == new_bytes);
  ::munmap(mapped, old_bytes.size());
  ::close(fd);
}

TEST(DeferredReleaseTest, ReplacedInodeIsHeldUntilReleased) {
  TempDir dir;
  const fs::path path = dir / "state.bin";
  commit_file(path, payload('a'));
  {
    Paused paused;
    const DeferredReleaseStats before = deferred_release_stats();
    commit_file(path, payload('b'));
    // The name is the new file's at once; the old inode only waits.
    EXPECT_TRUE(read_file(path) == payload('b'));
    EXPECT_EQ(dir.list(), std::vector<std::string>{"state.bin"});
    EXPECT_EQ(held_removed(path), 1);
    const DeferredReleaseStats during = deferred_release_stats();
    EXPECT_EQ(during.pending, 1u);
    EXPECT_GE(during.pending_bytes, payload('a').size());
    EXPECT_EQ(during.deferred, before.deferred + 1);
  }
  EXPECT_EQ(held_removed(path), 0);
  EXPECT_EQ(deferred_release_stats().pending, 0u);
}

TEST(DeferredReleaseTest, SmallFilesAreReleasedAtOnce) {
  TempDir dir;
  const fs::path path = dir / "small.bin";
  commit_file(path, "old");
  Paused paused;
  const DeferredReleaseStats before = deferred_release_stats();
  commit_file(path, "new");
  EXPECT_EQ(held_removed(path), 0);
  EXPECT_EQ(deferred_release_stats().deferred, before.deferred);
  EXPECT_EQ(read_file(path), "new");
}

TEST(DeferredReleaseTest, BeyondTheBoundReleaseIsSynchronous) {
  TempDir dir;
  std::vector<fs::path> paths;
  for (int i = 0; i < 4; ++i) {
    paths.push_back(dir / ("file" + std::to_string(i)));
    commit_file(paths.back(), payload(static_cast<char>('a' + i)));
  }
  {
    Paused paused({.max_pending = 2, .max_bytes = uint64_t{1} << 40});
    const DeferredReleaseStats before = deferred_release_stats();
    for (const fs::path& path : paths) commit_file(path, payload('z'));
    const DeferredReleaseStats after = deferred_release_stats();
    EXPECT_EQ(after.deferred - before.deferred, 2u);
    EXPECT_EQ(after.synchronous - before.synchronous, 2u);
    EXPECT_EQ(after.pending, 2u);
    EXPECT_EQ(held_removed(paths[0]) + held_removed(paths[1]), 2);
    EXPECT_EQ(held_removed(paths[2]) + held_removed(paths[3]), 0) << "released by the committing thread";
  }
  for (const fs::path& path : paths) {
    EXPECT_EQ(held_removed(path), 0);
    EXPECT_TRUE(read_file(path) == payload('z'));
  }
}

TEST(DeferredReleaseTest, TheByteBoundLetsOneLargeItemWaitButNoSecond) {
  TempDir dir;
  const fs::path a = dir / "a";
  const fs::path b = dir / "b";
  commit_file(a, payload('a'));
  commit_file(b, payload('b'));
  Paused paused({.max_pending = 64, .max_bytes = 1});
  commit_file(a, payload('c'));
  commit_file(b, payload('d'));
  EXPECT_EQ(held_removed(a), 1) << "alone in the queue, it may exceed the byte bound";
  EXPECT_EQ(held_removed(b), 0) << "a second one beyond the bound is released at once";
}

TEST(DeferredReleaseTest, ReplacedDirectoryWaitsUnderItsTemporaryName) {
  TempDir dir;
  const fs::path step = dir / "step";
  for (char seed : {'a', 'b'}) {
    AtomicDirectory directory(step, {.fsync = false});
    std::ofstream(directory.path() / "data") << payload(seed, 4096);
    if (seed == 'b') pause_deferred_releases(true);
    directory.commit();
  }
  EXPECT_EQ(AtomicDirectory::leftover_temporaries(dir.path()).size(), 1u) << "the old one, not yet removed";
  EXPECT_TRUE(read_file(step / "data") == payload('b', 4096));
  pause_deferred_releases(false);
  drain_deferred_releases();
  EXPECT_TRUE(AtomicDirectory::leftover_temporaries(dir.path()).empty());
  EXPECT_EQ(dir.list(), std::vector<std::string>{"step"});
}

Tree state_of(float value) {
  Tree tree = Tree::map();
  tree.set("w", Tensor::from_values<float>(DType::kFloat32, {4}, std::vector<float>{value, 1, 2, 3}));
  return tree;
}

// Waits (up to 20 s) until the manager's cleanup has taken `hidden`
// pruned checkpoints out of `run` to hidden names: the point between the
// cleanup and the removal that Manager::wait() (which drains) passes.
bool pruned_into_hiding(const fs::path& run, size_t hidden) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (AtomicDirectory::leftover_temporaries(run).size() < hidden) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST(DeferredReleaseTest, PrunedCheckpointsLeaveListingsAtOnce) {
  TempDir dir;
  const fs::path run = dir / "run";
  Paused paused;
  Manager manager(run, {.keep_last = 1, .fsync = false});
  for (int64_t step = 1; step <= 3; ++step) manager.save(step, state_of(static_cast<float>(step)));
  ASSERT_TRUE(pruned_into_hiding(run, 2));
  // Their removal waits (paused): they are out of every listing already.
  const std::vector<CheckpointEntry> entries = manager.list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].step, 3);
  EXPECT_EQ(list_run_directory(run).checkpoints.size(), 1u);
  EXPECT_EQ(AtomicDirectory::leftover_temporaries(run).size(), 2u);
  EXPECT_TRUE(load(entries[0].path) == state_of(3));
  pause_deferred_releases(false);
  manager.close();  // drains
  EXPECT_TRUE(AtomicDirectory::leftover_temporaries(run).empty());
}

TEST(DeferredReleaseTest, AFailedReleaseLosesNothingCommitted) {
  TempDir dir;
  const fs::path run = dir / "run";
  {
    Paused paused;
    Manager manager(run, {.keep_last = 1, .fsync = false});
    for (int64_t step = 1; step <= 3; ++step) manager.save(step, state_of(static_cast<float>(step)));
    ASSERT_TRUE(pruned_into_hiding(run, 2));
    ASSERT_EQ(AtomicDirectory::leftover_temporaries(run).size(), 2u);
    // Someone else removes what waits (a cleaner, by hand) before the
    // thread gets to it: the release finds nothing and says nothing.
    for (const fs::path& hidden : AtomicDirectory::leftover_temporaries(run)) fs::remove_all(hidden);
    // And a release that cannot remove its path at all: a directory
    // whose parent went.
    remove_later(dir / "gone" / ".x.ckpt-tmp-0123456789abcdef", true);
    pause_deferred_releases(false);
    EXPECT_NO_THROW(manager.close());
  }
  const RunListing listing = list_run_directory(run);
  ASSERT_EQ(listing.checkpoints.size(), 1u);
  verify(listing.checkpoints[0].path);
  EXPECT_TRUE(load(listing.checkpoints[0].path) == state_of(3));
}

TEST(DeferredReleaseTest, AProcessThatExitsLeavesNothingHidden) {
  TempDir dir;
  const fs::path run = dir / "run";
  {
    Manager manager(run, {.fsync = false});
    for (int64_t step = 1; step <= 6; ++step) manager.save(step, state_of(static_cast<float>(step)));
  }
  // `ckpt prune` removes five in a process of its own and exits at once:
  // the removals it deferred run at its exit.
  const ckpt::testing::ToolRun pruned = ckpt::testing::run_tool(dir.path(), {"prune", run.string(), "--keep-last", "1"});
  ASSERT_EQ(pruned.exit_code, 0) << pruned.err;
  EXPECT_TRUE(AtomicDirectory::leftover_temporaries(run).empty());
  const RunListing listing = list_run_directory(run);
  ASSERT_EQ(listing.checkpoints.size(), 1u);
  EXPECT_TRUE(load(listing.checkpoints[0].path) == state_of(6));
}

TEST(DeferredReleaseTest, AForkedChildHasNothingPending) {
  TempDir dir;
  const fs::path path = dir / "state.bin";
  commit_file(path, payload('a'));
  Paused paused;
  commit_file(path, payload('b'));
  ASSERT_EQ(deferred_release_stats().pending, 1u);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's queue is the parent's: the child drains nothing, and a
    // release of its own works (synchronously or on a thread of its own).
    const bool empty = deferred_release_stats().pending == 0 && drain_deferred_releases() == 0;
    pause_deferred_releases(false);
    commit_file(dir / "child.bin", payload('c'));
    commit_file(dir / "child.bin", payload('d'));
    drain_deferred_releases();
    ::_exit(empty && held_removed(dir / "child.bin") == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(held_removed(path), 1) << "the parent's hold is its own";
  EXPECT_TRUE(read_file(dir / "child.bin") == payload('d'));
}

}  // namespace
}  // namespace ckpt::detail
