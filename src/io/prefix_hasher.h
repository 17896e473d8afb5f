#pragma once
// The SHA-256 of a download's first bytes, computed on a thread of its own
// beside the transfer (io/download.h): from the blocks the download has
// just written, handed over in memory, else read back from the page cache,
// so that hashing overlaps the transfer instead of following it.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io/sha256.h"

namespace ckpt::detail {

class PrefixHasher {
 public:
  // Hashes the file open as `fd` (which must outlive the hasher) from its
  // first byte, as written() says its bytes arrive.
  explicit PrefixHasher(int fd);
  ~PrefixHasher();
  PrefixHasher(const PrefixHasher&) = delete;
  PrefixHasher& operator=(const PrefixHasher&) = delete;

  // Bytes [0, end) are in the file.
  void written(uint64_t end);
  // `block`, just written at `at`: hashed from memory when it continues the
  // hashed prefix (no read back), returned through spare() afterwards. A
  // block that cannot be queued (the queue is full, or it lies elsewhere) is
  // simply dropped: the bytes are read back from the file instead.
  void feed(std::vector<std::byte> block, uint64_t at);
  // An emptied buffer of an earlier feed() (capacity kept), or an empty one.
  std::vector<std::byte> spare();
  // The file was emptied: start again from its first byte.
  void reset();
  // The hash of [0, size) once hashed (nullopt if a read failed).
  std::optional<std::string> finish(uint64_t size);

 private:
  void run();
  // Under mutex_.
  void recycle(std::vector<std::byte> bytes);

  struct Queued {
    std::vector<std::byte> bytes;
    uint64_t at;
    uint64_t generation;
  };
  // 64 MiB of the download's 128 KiB blocks (download.cc's kWriteBlock).
  static constexpr size_t kMaxQueued = 512;
  uint64_t hash_generation_ = 0;
  std::deque<Queued> queue_;
  std::vector<std::vector<std::byte>> spares_;
  int fd_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::unique_ptr<Sha256> hash_ = std::make_unique<Sha256>();
  uint64_t hashed_ = 0;
  uint64_t available_ = 0;
  uint64_t generation_ = 0;
  bool failed_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the rest is ready
};

}  // namespace ckpt::detail
