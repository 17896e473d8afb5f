#include "io/deferred_release.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace ckpt::detail {

ReleaseHold& ReleaseHold::operator=(ReleaseHold&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    bytes_ = other.bytes_;
  }
  return *this;
}

void ReleaseHold::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ReleaseHold hold_for_release(const std::filesystem::path& path) noexcept {
  const int fd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat status;
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode) ||
      static_cast<uint64_t>(status.st_blocks) * 512 < kDeferReleaseFrom) {
    ::close(fd);
    return {};
  }
  return ReleaseHold(fd, static_cast<uint64_t>(status.st_blocks) * 512);
}

namespace {

// One thing to release: a held inode, or a path to remove.
struct ReleaseItem {
  ReleaseHold hold;
  std::filesystem::path path;
  bool sync_parent = false;
};

void release_item_now(ReleaseItem& item) noexcept {
  item.hold.reset();
  if (item.path.empty()) return;
  if (item.sync_parent) {
    const std::filesystem::path parent = item.path.parent_path();
    const int fd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);  // best effort: a failure leaves at worst the old name with its files
      ::close(fd);
    }
  }
  try {
    std::error_code ignored;
    std::filesystem::remove_all(item.path, ignored);
  } catch (...) {  // remove_all may allocate; nothing committed depends on it
  }
}

// The queue and its one thread. Never destroyed (a static's destructor
// could run while another static's destructor still saves): at exit an
// atexit handler drains it and joins the thread.
class Releaser {
 public:
  Releaser() {
    std::atexit([] { instance().shut_down(); });
    ::pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                     [] { instance().forget_in_child(); });
  }

  static Releaser& instance() {
    static Releaser* releaser = new Releaser();
    return *releaser;
  }

  void submit(ReleaseItem item, uint64_t bytes) noexcept {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const bool fits = !exiting_ && pending_ < limits_.max_pending &&
                        (pending_bytes_ == 0 || pending_bytes_ + bytes <= limits_.max_bytes);
      if (fits && start_worker()) {
        try {
          queue_.push_back({std::move(item), bytes});
          ++pending_;
          pending_bytes_ += bytes;
          ++deferred_;
          lock.unlock();
          wake_.notify_one();
          return;
        } catch (...) {  // no memory for the queue: release it here
        }
      }
      ++synchronous_;
    }
    release_item_now(item);
  }

  size_t drain() noexcept {
    std::deque<Entry> taken;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      taken.swap(queue_);
    }
    for (Entry& entry : taken) release_item_now(entry.item);
    std::unique_lock<std::mutex> lock(mutex_);
    for (const Entry& entry : taken) finish(entry.bytes);
    idle_.wait(lock, [&] { return !busy_; });
    return taken.size();
  }

  DeferredReleaseStats stats() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return {pending_, pending_bytes_, deferred_, synchronous_};
  }

  DeferredReleaseLimits set_limits(const DeferredReleaseLimits& limits) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(limits_, limits);
  }

  void pause(bool paused) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      paused_ = paused;
    }
    wake_.notify_all();
  }

 private:
  struct Entry {
    ReleaseItem item;
    uint64_t bytes;
  };

  // With mutex_ held. False if no thread can be started.
  bool start_worker() noexcept {
    if (worker_ != nullptr) return true;
    try {
      worker_ = new std::thread([this] { work(); });
      return true;
    } catch (...) {
      return false;
    }
  }

  // With mutex_ held: one item is done.
  void finish(uint64_t bytes) noexcept {
    --pending_;
    pending_bytes_ -= bytes;
  }

  void work() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || (!paused_ && !queue_.empty()); });
      if (queue_.empty() || paused_) {
        if (stopping_) return;
        continue;
      }
      Entry entry = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      release_item_now(entry.item);
      lock.lock();
      finish(entry.bytes);
      busy_ = false;
      idle_.notify_all();
    }
  }

  // At exit: what waits is released now, later releases are synchronous,
  // and the thread ends.
  void shut_down() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      exiting_ = true;
    }
    drain();
    std::thread* worker = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      worker = std::exchange(worker_, nullptr);
    }
    wake_.notify_all();
    if (worker != nullptr) {
      worker->join();
      delete worker;
    }
  }

  // In the child of fork() (mutex_ locked by prepare): the thread does not
  // exist here. The parent releases what it queued; the child's copies of
  // the descriptors are closed (the inodes stay held by the parent's).
  void forget_in_child() noexcept {
    worker_ = nullptr;  // leaked: its std::thread names a thread of the parent
    queue_.clear();
    pending_ = 0;
    pending_bytes_ = 0;
    busy_ = false;
    mutex_.unlock();
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Entry> queue_;
  std::thread* worker_ = nullptr;
  DeferredReleaseLimits limits_;
  size_t pending_ = 0;
  uint64_t pending_bytes_ = 0;
  uint64_t deferred_ = 0;
  uint64_t synchronous_ = 0;
  bool busy_ = false;
  bool paused_ = false;
  bool exiting_ = false;
  bool stopping_ = false;
};

}  // namespace

void release_later(ReleaseHold hold) noexcept {
  if (!hold.held()) return;
  const uint64_t bytes = hold.bytes();
  Releaser::instance().submit({std::move(hold), {}, false}, bytes);
}

void remove_later(const std::filesystem::path& hidden, bool sync_parent) noexcept {
  try {
    Releaser::instance().submit({{}, hidden, sync_parent}, 0);
  } catch (...) {  // copying the path failed: remove it here
    ReleaseItem item{{}, hidden, sync_parent};
    release_item_now(item);
  }
}

size_t drain_deferred_releases() noexcept { return Releaser::instance().drain(); }

DeferredReleaseStats deferred_release_stats() noexcept { return Releaser::instance().stats(); }

DeferredReleaseLimits set_deferred_release_limits(const DeferredReleaseLimits& limits) noexcept {
  return Releaser::instance().set_limits(limits);
}

void pause_deferred_releases(bool paused) noexcept { Releaser::instance().pause(paused); }

}  // namespace ckpt::detail
