// The checkpoint manager's one-writer lock (between processes: a forked
// child holds it) and its asynchronous saves: snapshots, bounded in-flight
// saves, failures of background saves reported once.

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

// A child process that holds the run's lock until told to go (or killed).
struct LockHolder {
  pid_t pid = -1;
  int release_fd = -1;

  explicit LockHolder(const fs::path& run) {
    int ready[2];
    int release[2];
    EXPECT_EQ(::pipe(ready), 0);
    EXPECT_EQ(::pipe(release), 0);
    pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      ::close(release[1]);
      try {
        Manager manager(run);
        char byte = 1;
        if (::write(ready[1], &byte, 1) != 1) ::_exit(3);
        ::read(release[0], &byte, 1);  // until the parent closes its end
        manager.close();
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(release[0]);
    release_fd = release[1];
    char byte = 0;
    EXPECT_EQ(::read(ready[0], &byte, 1), 1) << "the child did not take the lock";
    ::close(ready[0]);
  }
  int release() {
    ::close(release_fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }
};

TEST(ManagerTest, SecondWriterProcessIsRefusedNamingTheHolder) {
  TempDir dir;
  { Manager(dir.path()).save(1, small_state(1)); }
  LockHolder holder(dir.path());
  try {
    Manager second(dir.path());
    ADD_FAILURE() << "a second writer opened the run";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(error.what()).find("pid " + std::to_string(holder.pid)), std::string::npos) << error.what();
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    EXPECT_NE(std::string(error.what()).find(host), std::string::npos) << error.what();
  }
  EXPECT_THROW(prune_run_directory(dir.path(), {.policies = {KeepLast{.n = 1}}}), Error);
  // Readers take no lock.
  Manager reader(dir.path(), {.read_only = true});
  EXPECT_EQ(listed_steps(reader.list()), (std::vector<int64_t>{1}));
  EXPECT_TRUE(reader.load(1) == small_state(1));
  EXPECT_THROW(reader.save(2, small_state(2)), Error);
  EXPECT_EQ(list_run_directory(dir.path()).checkpoints.size(), 1u);
  // A killed holder's lock goes with it.
  ::kill(holder.pid, SIGKILL);
  holder.release();
  Manager third(dir.path());
  third.save(2, small_state(2));
  third.close();
}

TEST(ManagerTest, TwoManagersInOneProcessAreTwoWriters) {
  TempDir dir;
  Manager first(dir.path());
  EXPECT_THROW(Manager second(dir.path()), Error);
  first.close();
  Manager third(dir.path());  // closed: the lock is free
}

TEST(ManagerTest, AsyncSaveSnapshotsTheCallersMemory) {
  TempDir dir;
  Manager manager(dir.path(), {.max_in_flight = 2});
  Tree state = small_state(1);
  manager.save(1, state, {.blocking = false});
  // The caller changes its tensor at once; the checkpoint holds what it saved.
  auto bytes = state.find("w")->tensor().mutable_bytes();
  std::fill(bytes.begin(), bytes.end(), std::byte{0});
  manager.save(2, small_state(2), {.blocking = false});
  manager.save(3, small_state(3), {.blocking = false});
  manager.wait();
  EXPECT_TRUE(manager.load(1) == small_state(1));
  const std::vector<CheckpointEntry> entries = manager.list();
  EXPECT_EQ(listed_steps(entries), (std::vector<int64_t>{1, 2, 3}));
  // Committed in step order.
  EXPECT_LE(entries[0].time, entries[1].time);
  EXPECT_LE(entries[1].time, entries[2].time);
}

TEST(ManagerTest, SnapshotCopiesWhatTheCallerCanChangeOnly) {
  TempDir dir;
  save(dir / "mapped.safetensors", small_state(1));
  const Tree mapped = load(dir / "mapped.safetensors");
  std::vector<float> lent_values = {1, 2, 3, 4};
  Tree state = Tree::map();
  state.set("mapped", mapped.at("w").tensor());
  state.set("heap", small_state(2).at("w").tensor());
  state.set("lent", Tensor(DType::kFloat32, {4}, Buffer::lend(std::as_bytes(std::span(lent_values)), {})));
  state.set("tied", state.at("heap").tensor());
  const Tree copy = detail::snapshot_state(state).state;
  EXPECT_TRUE(copy == state);
  EXPECT_TRUE(copy.at("mapped").tensor().same_memory(state.at("mapped").tensor()));  // read-only: shared
  EXPECT_FALSE(copy.at("heap").tensor().same_memory(state.at("heap").tensor()));
  EXPECT_FALSE(copy.at("lent").tensor().same_memory(state.at("lent").tensor()));
  EXPECT_TRUE(copy.at("tied").tensor().same_memory(copy.at("heap").tensor()));  // still tied to each other
  // The caller's later writes do not reach the snapshot.
  lent_values[0] = 99;
  EXPECT_EQ(copy.at("lent").tensor().values<float>()[0], 1.0f);
  // A spare block large enough is used; one too small is not.
  Buffer spare = Buffer::allocate(4096);
  const std::byte* spare_address = spare.address();
  const detail::Snapshot reused = detail::snapshot_state(state, spare);
  EXPECT_EQ(reused.block.address(), spare_address);
  EXPECT_TRUE(reused.state == state);
  const detail::Snapshot fresh = detail::snapshot_state(state, Buffer::allocate(8));
  EXPECT_GE(fresh.block.size(), 64u * 2);
  EXPECT_TRUE(fresh.state == state);
}

TEST(ManagerTest, AsyncSavesAreBoundedInFlight) {
  TempDir dir;
  std::mutex mutex;
  std::condition_variable released_changed;
  bool released = false;
  std::atomic<int> calls{0};
  // The cleanup after step 1's commit runs this on the background thread and
  // holds it there until the test lets go.
  const KeepFunction blocker = [&](const std::vector<CheckpointEntry>& entries) {
    if (calls++ == 0) {
      std::unique_lock<std::mutex> guard(mutex);
      released_changed.wait(guard, [&] { return released; });
    }
    return listed_steps(entries);
  };
  Manager manager(dir.path(), {.keep = blocker, .max_in_flight = 1});
  manager.save(1, small_state(1), {.blocking = false});
  while (calls.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  manager.save(2, small_state(2), {.blocking = false});  // queued: the one allowed in flight
  std::atomic<bool> third_returned{false};
  std::thread third([&] {
    manager.save(3, small_state(3), {.blocking = false});
    third_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(third_returned.load()) << "a save beyond max_in_flight did not wait";
  {
    std::lock_guard<std::mutex> guard(mutex);
    released = true;
  }
  released_changed.notify_all();
  third.join();
  EXPECT_TRUE(third_returned.load());
  manager.wait();
  EXPECT_EQ(listed_steps(manager.list()), (std::vector<int64_t>{1, 2, 3}));
}

TEST(ManagerTest, FailedBackgroundSaveIsRethrownOnce) {
  TempDir dir;
  Manager manager(dir.path());
  manager.save(1, small_state(1));
  detail::inject_write_fault_after(0);
  manager.save(2, small_state(2, 4096), {.blocking = false});
  try {
    manager.wait();
    ADD_FAILURE() << "the failed background save was not reported";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kIo) << error.what();
  }
  detail::inject_write_fault_after(-1);
  EXPECT_NO_THROW(manager.wait());  // reported once
  EXPECT_FALSE(fs::exists(dir / "step-00000002"));
  EXPECT_TRUE(detail::AtomicDirectory::leftover_temporaries(dir.path()).empty());
  // On the next save instead of wait: the same (it waits for the one in flight).
  detail::inject_write_fault_after(0);
  manager.save(2, small_state(2), {.blocking = false});
  try {
    manager.save(3, small_state(3), {.blocking = false});
    ADD_FAILURE() << "the background failure did not reach the next save";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kIo) << error.what();
  }
  detail::inject_write_fault_after(-1);
  // And on a blocking save.
  detail::inject_write_fault_after(0);
  manager.save(2, small_state(2), {.blocking = false});
  EXPECT_THROW(manager.save(3, small_state(3)), Error);
  detail::inject_write_fault_after(-1);
  manager.save(3, small_state(3));
  manager.close();
  EXPECT_EQ(listed_steps(list_run_directory(dir.path()).checkpoints), (std::vector<int64_t>{1, 3}));
}

TEST(ManagerTest, CloseRethrowsAndTheDestructorDoesNot) {
  TempDir dir;
  {
    Manager manager(dir.path());
    detail::inject_write_fault_after(0);
    manager.save(1, small_state(1), {.blocking = false});
    try {
      manager.close();
      ADD_FAILURE() << "close() did not rethrow";
    } catch (const Error&) {
    }
    detail::inject_write_fault_after(-1);
    EXPECT_THROW(manager.save(2, small_state(2)), Error);  // closed
    EXPECT_NO_THROW(manager.close());
  }
  {
    Manager manager(dir.path());
    detail::inject_write_fault_after(0);
    manager.save(1, small_state(1), {.blocking = false});
  }  // destructor: waits, swallows
  detail::inject_write_fault_after(-1);
  Manager manager(dir.path());
  EXPECT_TRUE(manager.list().empty());
}

}  // namespace
}  // namespace ckpt
