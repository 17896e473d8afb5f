#pragma once
// RunLock: the one-writer rule of a run directory. The writer holds
// flock(LOCK_EX) on RUN_DIR/ckpt_manager.lock for as long as it may write
// there; the kernel drops the lock when the holder closes it or dies, so a
// killed writer never locks a run out. The file records the holder's pid
// and host, for the message a second writer gets. Readers never lock.

#include <filesystem>

namespace ckpt::detail {

class RunLock {
 public:
  // Creates the lock file if needed, takes the lock (without waiting) and
  // records "pid N host H" in it. Throws Error{kIo} naming the lock file and
  // the holder's pid and host when another writer (another process, or
  // another manager in this one) holds it; {kNotFound} if `run_dir` does not
  // exist; {kIo} if the file cannot be created.
  explicit RunLock(const std::filesystem::path& run_dir);
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  // Releases the lock. The file stays (removing it would race with the next
  // writer's open). Never throws.
  ~RunLock();

 private:
  int fd_ = -1;
};

}  // namespace ckpt::detail
