// Temporaries that killed writers leave are removed by the next writer of the
// same target (io/file_system.h remove_abandoned_temporaries), and never one
// that a live writer holds (its flock), nor one of another target.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "io/atomic_directory.h"
#include "io/atomic_file.h"
#include "io/deferred_release.h"
#include "io/file_system.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;
using ckpt::testing::read_file;
using ckpt::testing::write_file;

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); }

// A child process that runs `start` (which opens a writer and leaves it
// open), tells the parent, and waits: killed by kill(), or let go by
// release() (it then returns from `start`'s scope normally and exits 0).
class ChildWriter {
 public:
  explicit ChildWriter(const std::function<void(const std::function<void()>& wait)>& start) {
    if (::pipe(ready_) != 0 || ::pipe(go_) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready_[0]);
      ::close(go_[1]);
      try {
        start([this] {
          const char byte = 'r';
          if (::write(ready_[1], &byte, 1) != 1) ::_exit(3);
          char answer;
          if (::read(go_[0], &answer, 1) != 1) ::_exit(4);
        });
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
    ::close(ready_[1]);
    ::close(go_[0]);
    char byte;
    ready_ok_ = ::read(ready_[0], &byte, 1) == 1;
  }
  ~ChildWriter() {
    if (pid_ > 0 && !reaped_) kill();
    ::close(ready_[0]);
    ::close(go_[1]);
  }
  bool ready() const { return ready_ok_; }
  void kill() {
    ::kill(pid_, SIGKILL);
    reap();
  }
  // Lets the child finish; returns its exit status.
  int release() {
    const char byte = 'g';
    if (::write(go_[1], &byte, 1) != 1) return -1;
    return reap();
  }

 private:
  int reap() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  pid_t pid_ = -1;
  int ready_[2] = {-1, -1};
  int go_[2] = {-1, -1};
  bool ready_ok_ = false;
  bool reaped_ = false;
};

// A child that opens an AtomicFile for `target`, writes to it and is killed:
// what a save killed mid-write leaves.
void leave_killed_file(const fs::path& target) {
  ChildWriter child([&](const auto& wait) {
    AtomicFile file(target);
    file.write_at(bytes_of("half written"), 0);
    wait();
  });
  ASSERT_TRUE(child.ready());
  child.kill();
}

// The same for an AtomicDirectory with a file inside.
void leave_killed_directory(const fs::path& target) {
  ChildWriter child([&](const auto& wait) {
    AtomicDirectory directory(target);
    AtomicFile inner(directory.path() / "array");
    inner.write_at(bytes_of("half written"), 0);
    inner.commit();
    wait();
  });
  ASSERT_TRUE(child.ready());
  child.kill();
}

std::vector<std::string> temporaries(const fs::path& directory) {
  std::vector<std::string> names;
  for (const fs::path& path : AtomicDirectory::leftover_temporaries(directory)) names.push_back(path.filename().string());
  return names;
}

TEST(AbandonedTemporariesTest, KilledWritersFileIsRemovedByTheNextWriter) {
  testing::TempDir dir;
  write_file(dir / "model.pt", "committed");
  leave_killed_file(dir / "model.pt");
  ASSERT_EQ(temporaries(dir.path()).size(), 1u) << "a killed writer leaves its temporary";
  const std::string first = temporaries(dir.path())[0];
  leave_killed_file(dir / "model.pt");
  ASSERT_EQ(temporaries(dir.path()).size(), 1u) << "killed writers' temporaries pile up";
  EXPECT_NE(temporaries(dir.path())[0], first) << "the second writer removed the first one's";
  {
    AtomicFile file(dir / "model.pt");
    EXPECT_EQ(temporaries(dir.path()), std::vector<std::string>{file.temp_path().filename().string()})
        << "opening the target for writing removed the killed writers' temporaries, not its own";
    file.write_at(bytes_of("new"), 0);
    file.commit();
  }
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.pt"});
  EXPECT_EQ(read_file(dir / "model.pt"), "new");
}

TEST(AbandonedTemporariesTest, LiveWriterInAnotherProcessKeepsItsTemporary) {
  testing::TempDir dir;
  fs::path child_temporary;
  ChildWriter child([&](const auto& wait) {
    AtomicFile file(dir / "model.safetensors");
    file.write_at(bytes_of("from the child"), 0);
    wait();
    file.commit();
  });
  ASSERT_TRUE(child.ready());
  ASSERT_EQ(temporaries(dir.path()).size(), 1u);
  const std::string held = temporaries(dir.path())[0];
  {
    AtomicFile file(dir / "model.safetensors");
    EXPECT_TRUE(fs::exists(dir / held)) << "a live writer's temporary was removed";
    file.write_at(bytes_of("from the parent"), 0);
    file.commit();
  }
  EXPECT_EQ(child.release(), 0) << "the child's commit failed: its temporary was taken";
  EXPECT_EQ(read_file(dir / "model.safetensors"), "from the child");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
}

TEST(AbandonedTemporariesTest, LiveWriterInThisProcessKeepsItsTemporaryThroughSeal) {
  testing::TempDir dir;
  AtomicFile first(dir / "data-00000-of-00001");
  first.write_at(bytes_of("first"), 0);
  first.seal();  // closes the write descriptor; the lock must survive it
  {
    AtomicFile second(dir / "data-00000-of-00001");
    EXPECT_TRUE(fs::exists(first.temp_path())) << "a sealed, uncommitted temporary was removed";
    second.write_at(bytes_of("second"), 0);
    second.commit();
  }
  first.commit();
  EXPECT_EQ(read_file(dir / "data-00000-of-00001"), "first");
}

TEST(AbandonedTemporariesTest, OnlyTheTargetsOwnTemporariesAreTouched) {
  testing::TempDir dir;
  leave_killed_file(dir / "other.npz");
  leave_killed_file(dir / "model.npz.bak");  // its name starts with the target's
  leave_killed_file(dir / "odel.npz");       // the target's name ends with its
  write_file(dir / ".model.npz.ckpt-tmp-short", "not a temporary's name");
  write_file(dir / ".model.npz.ckpt-tmp-0123456789ABCDEF", "not a temporary's name");
  const std::vector<std::string> before = dir.list();
  leave_killed_file(dir / "model.npz");
  {
    AtomicFile file(dir / "model.npz");
    file.write_at(bytes_of("new"), 0);
    file.commit();
  }
  std::vector<std::string> expected = before;
  expected.push_back("model.npz");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(dir.list(), expected);
}

TEST(AbandonedTemporariesTest, KilledDirectoryWriterIsRemovedLiveOneIsNot) {
  testing::TempDir dir;
  leave_killed_directory(dir / "step_1");
  leave_killed_directory(dir / "step_10");  // another target
  ASSERT_EQ(temporaries(dir.path()).size(), 2u);
  AtomicDirectory live(dir / "step_1");
  write_file(live.path() / "array", "live");
  {
    AtomicDirectory next(dir / "step_1");
    std::vector<std::string> expected = {live.path().filename().string(), next.path().filename().string()};
    for (const std::string& name : temporaries(dir.path())) {
      if (name.starts_with(".step_10.")) expected.push_back(name);
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(temporaries(dir.path()), expected)
        << "the killed writer's directory went; the live one, the new one and another target's stayed";
    write_file(next.path() / "array", "next");
    next.commit();
  }
  live.commit();
  drain_deferred_releases();  // the replaced directories are removed off the committing thread
  EXPECT_EQ(read_file(dir / "step_1" / "array"), "live");
  EXPECT_EQ(temporaries(dir.path()).size(), 1u) << "step_10's leftover is its own target's to remove";
}

TEST(AbandonedTemporariesTest, FileWriterRemovesAKilledDirectoryWriterOfTheSameName) {
  testing::TempDir dir;
  leave_killed_directory(dir / "model.ckpt");
  AtomicFile file(dir / "model.ckpt");
  EXPECT_EQ(temporaries(dir.path()), std::vector<std::string>{file.temp_path().filename().string()});
}

// A directory moved aside by a commit on a file system without
// RENAME_EXCHANGE may be the only committed copy: kept while nothing is at
// the target, removed once something is.
TEST(AbandonedTemporariesTest, AsideDirectoryIsRemovedOnlyOnceTheTargetExists) {
  testing::TempDir dir;
  const fs::path aside = aside_sibling(dir / "step");
  EXPECT_TRUE(AtomicDirectory::is_temporary(aside)) << aside;
  fs::create_directory(aside);
  write_file(aside / "array", "the committed copy");
  EXPECT_EQ(remove_abandoned_temporaries(dir / "step"), 0u);
  EXPECT_EQ(read_file(aside / "array"), "the committed copy");
  fs::create_directory(dir / "step");
  EXPECT_EQ(remove_abandoned_temporaries(dir / "step"), 1u);
  EXPECT_FALSE(fs::exists(aside));
}

// Many threads write one target at once: each new writer's cleaning must
// never take another's temporary, even in the instant between its creation
// and its lock (claim_temporary), so every commit succeeds.
TEST(AbandonedTemporariesTest, ConcurrentWritersOfOneTargetNeverTakeEachOthersTemporaries) {
  testing::TempDir dir;
  fs::create_directory(dir / "target.d");  // two first commits at once would race to create it
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        try {
          if (t % 2 == 0) {
            AtomicFile file(dir / "target", {.fsync = false});
            file.write_at(bytes_of("x"), 0);
            file.commit();
          } else {
            AtomicDirectory directory(dir / "target.d", {.fsync = false});
            write_file(directory.path() / "a", "x");
            directory.commit();
          }
        } catch (const std::exception& error) {
          ++failures;
          ADD_FAILURE() << error.what();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  drain_deferred_releases();  // the replaced directories are removed off the committing threads
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"target", "target.d"}));
}

}  // namespace
}  // namespace ckpt::detail
