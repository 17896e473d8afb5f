#pragma once
// FileHashes: the whole-file xxh3 of the files AtomicFile commits, computed
// from the bytes as they are written, so that a checkpoint manager records
// what it wrote (checkpoint.json: every file with its size and xxh3) without
// reading the files back.
//
//   detail::FileHashes hashes;          // this thread's collector, until destroyed
//   ckpt::save(path, state, options);   // AtomicFiles created on this thread hash
//   for (const HashedFile& file : hashes.files()) ...
//
// Only a file whose bytes arrive in file order (each write at or after the
// end of the one before; holes read as zeros) can be hashed as it is
// written: one written out of order (a header after its data) is left out,
// and the caller reads it back itself. Knows no format.

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace ckpt::detail {

struct HashedFile {
  std::filesystem::path path;  // the final path AtomicFile committed
  uint64_t size = 0;
  std::string xxh3;  // 16 lower-case hex digits of the whole file's xxh3-64
};

class FileHashes {
 public:
  // Becomes the collector of the AtomicFiles created on this thread from now
  // on (the one before it, if any, is restored on destruction). Collectors
  // nest; each thread has its own.
  FileHashes();
  FileHashes(const FileHashes&) = delete;
  FileHashes& operator=(const FileHashes&) = delete;
  // Must outlive every AtomicFile created on this thread while it was the
  // collector (a save's scope does).
  ~FileHashes();

  // The files committed so far that were written in file order, in commit
  // order. A file committed from another thread (created on this one) is
  // added under a lock.
  std::vector<HashedFile> files() const;

  // For AtomicFile: the collector of this thread now, or null.
  static FileHashes* current();
  void add(HashedFile file);

 private:
  FileHashes* previous_;
  mutable std::mutex mutex_;
  std::vector<HashedFile> files_;
};

}  // namespace ckpt::detail
