#include "io/prefix_hasher.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ckpt::detail {

PrefixHasher::PrefixHasher(int fd) : fd_(fd), thread_([this] { run(); }) {}

PrefixHasher::~PrefixHasher() {
  {
    std::lock_guard guard(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void PrefixHasher::written(uint64_t end) {
  {
    std::lock_guard guard(mutex_);
    if (end <= available_) return;
    available_ = end;
  }
  wake_.notify_all();
}

void PrefixHasher::feed(std::vector<std::byte> block, uint64_t at) {
  {
    std::lock_guard guard(mutex_);
    if (queue_.size() >= kMaxQueued) return;
    queue_.push_back({std::move(block), at, generation_});
  }
  wake_.notify_all();
}

std::vector<std::byte> PrefixHasher::spare() {
  std::lock_guard guard(mutex_);
  if (spares_.empty()) return {};
  std::vector<std::byte> buffer = std::move(spares_.back());
  spares_.pop_back();
  return buffer;
}

void PrefixHasher::reset() {
  std::lock_guard guard(mutex_);
  ++generation_;  // the thread starts a fresh hash when it sees this
  queue_.clear();
  hashed_ = available_ = 0;
  failed_ = false;
}

std::optional<std::string> PrefixHasher::finish(uint64_t size) {
  if (size == 0) return sha256_hex("");
  written(size);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return hashed_ >= size || failed_; });
  if (failed_ || hashed_ != size) return std::nullopt;
  return hash_->hex();
}

void PrefixHasher::run() {
  std::vector<std::byte> buffer;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (hashed_ < available_ && !failed_); });
    if (stop_) return;
    // hash_ is this thread's: only it replaces it, between its updates.
    if (hash_generation_ != generation_) {
      hash_ = std::make_unique<Sha256>();
      hash_generation_ = generation_;
    }
    // Blocks behind the hashed prefix are of no use any more.
    while (!queue_.empty() && (queue_.front().generation != generation_ ||
                               queue_.front().at + queue_.front().bytes.size() <= hashed_)) {
      recycle(std::move(queue_.front().bytes));
      queue_.pop_front();
    }
    const uint64_t generation = generation_;
    const uint64_t at = hashed_;
    if (!queue_.empty() && queue_.front().at <= at && queue_.front().at + queue_.front().bytes.size() <= available_) {
      Queued block = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      const auto bytes = std::span(block.bytes).subspan(static_cast<size_t>(at - block.at));
      hash_->update(bytes);  // outside the lock: the download goes on meanwhile
      lock.lock();
      if (generation == generation_) hashed_ += bytes.size();
      recycle(std::move(block.bytes));
      done_.notify_all();
      continue;
    }
    if (buffer.empty()) buffer.resize(size_t{4} << 20);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), available_ - at));
    lock.unlock();
    ssize_t got = ::pread(fd_, buffer.data(), want, static_cast<off_t>(at));
    while (got < 0 && errno == EINTR) got = ::pread(fd_, buffer.data(), want, static_cast<off_t>(at));
    lock.lock();
    if (generation != generation_) continue;
    if (got <= 0) {
      failed_ = true;
    } else {
      hash_->update(std::span(buffer.data(), static_cast<size_t>(got)));
      hashed_ += static_cast<uint64_t>(got);
    }
    done_.notify_all();
  }
}

void PrefixHasher::recycle(std::vector<std::byte> bytes) {
  bytes.clear();
  if (spares_.size() < kMaxQueued) spares_.push_back(std::move(bytes));
}

}  // namespace ckpt::detail
