#pragma once
// AtomicFile: writes a file under a temporary name beside its final path and
// commits it with rename, so that a reader never sees a half-written file and
// a failure never destroys an earlier one. Knows no format.
//
//   AtomicFile file(path, {.fsync = true});
//   file.write_at(header, 0);
//   file.write_parallel(chunks);
//   file.commit();           // fsync, rename, fsync the directory
//   // destructor without commit(): the temporary is removed

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ckpt::detail {

struct AtomicFileOptions {
  bool fsync = true;
};

struct AtomicCommitOptions {
  // Off: the rename is left for a later commit in the same directory to make
  // durable (its directory fsync covers every rename before it), so that a
  // writer of several files renames them back to back with no sync between
  // (TF: the shards, then the .index, which syncs).
  bool sync_directory = true;
};

// One positioned write: `bytes` go to `offset`. `on_chunk`, if set, sees each
// piece of `bytes` in order just before it is written (for checksums while
// the data is in cache).
struct WriteSpan {
  std::span<const std::byte> bytes;
  uint64_t offset = 0;
  std::function<void(std::span<const std::byte>)> on_chunk;
};

class FileHashes;

class AtomicFile {
 public:
  // Creates the temporary file "<dir>/.<name>.ckpt-tmp-<random>"
  // (io/file_system.h temporary_sibling) and holds the writer's lock on it
  // (claim_temporary) until commit() or destruction. First removes the
  // temporaries of `final_path` that belong to no live writer (what killed
  // saves left: remove_abandoned_temporaries; nothing inside a temporary
  // directory).
  // Created while this thread has a FileHashes collector (io/file_hashes.h),
  // the file hashes its bytes as they are written and, if they came in file
  // order, reports its size and xxh3 there on commit.
  // Throws Error{kNotFound} if the directory does not exist, {kIo} otherwise.
  AtomicFile(std::filesystem::path final_path, AtomicFileOptions options = {});
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Removes the temporary file unless commit() succeeded. Never throws.
  ~AtomicFile();

  // Sets the file's final size up front (sparse; avoids growth during writes).
  void resize(uint64_t size);
  // Writes all of `bytes` at `offset` (retrying short writes). With
  // options.fsync, a write of 1 MiB or more starts its writeback at once
  // (sync_file_range SYNC_FILE_RANGE_WRITE), so that the final fsync waits
  // only for what is still in flight. A full disk (ENOSPC) is retried once
  // after drain_deferred_releases() freed replaced files' blocks.
  // Throws Error{kIo} naming the final path.
  void write_at(std::span<const std::byte> bytes, uint64_t offset);
  // Writes every span, using `threads` threads (0: min(hardware threads,
  // 4)). The calling thread writes, in file order: a large span in 8 MiB
  // pieces straight from its memory, small spans that lie back to back in
  // the file with one vectored call (pwritev, no copy). Writes into one
  // file's page cache serialize on the file system's inode lock, so more
  // writers gain nothing. With more than one thread, one other thread runs
  // the spans' on_chunk (checksums) in lockstep with the writer, at most one
  // piece ahead of it, so the source is read from memory once (the writer
  // finds it in cache); the rest stay idle. With one thread, each piece's
  // on_chunk runs just before that piece is written.
  // Every on_chunk has seen all its span's bytes, in order, when this
  // returns. Throws the first Error either side hit (after both stopped).
  void write_parallel(const std::vector<WriteSpan>& spans, unsigned threads = 0);
  // fsync (if asked) and close the file, keeping it under its temporary
  // name: for writers of many files, which would otherwise hold one
  // descriptor per file until the last is committed. No write may follow;
  // commit() then only renames. The lock stays held by a duplicate
  // descriptor for the first kSealedLocks sealed files alive in the process
  // (fewer where a quarter of RLIMIT_NOFILE is fewer);
  // beyond that a sealed temporary is unlocked until its commit, and a
  // concurrent writer of the same target may remove it (this commit then
  // fails with an Error; nothing committed is lost). Throws Error{kIo}
  // naming the final path.
  void seal();
  // fsync (if asked; done already if sealed), rename onto the final path,
  // fsync the directory (if asked, and unless options.sync_directory is
  // off). A large file replaced at the final path is held across the rename
  // and freed on the background thread of io/deferred_release.h afterwards
  // (its blocks are freed when the hold goes, not in the rename).
  void commit(const AtomicCommitOptions& options = {});

  const std::filesystem::path& final_path() const { return final_path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }

  // How many sealed files at once keep their temporary locked (one
  // descriptor each).
  static constexpr int kSealedLocks = 256;

 private:
  // write_at over several buffers that lie back to back from `offset`
  // (one pwritev per up to IOV_MAX of them), with write_at's retries and
  // early writeback.
  void write_vectored_at(std::span<const std::span<const std::byte>> pieces, uint64_t offset);
  void abandon() noexcept;
  void release_lock() noexcept;
  // The whole-file hash while the writes come in file order (see FileHashes).
  struct RunningHash;
  std::unique_ptr<RunningHash> hash_;
  std::filesystem::path final_path_;
  std::filesystem::path temp_path_;
  AtomicFileOptions options_;
  int fd_ = -1;
  int sealed_lock_fd_ = -1;  // a duplicate of fd_ after seal(): holds the lock
  bool sealed_ = false;
  bool committed_ = false;
};

// Test hook: after `bytes` more bytes have been written through AtomicFile
// (in this process), the next write fails as if the disk were full (ENOSPC).
// A negative value switches the fault off.
void inject_write_fault_after(int64_t bytes);

// Bytes written through AtomicFile by this process so far (what a progress
// bar of a conversion counts: io/progress.h ProgressWatch).
uint64_t bytes_written();

// Benchmark hook: switches the early writeback of durable writes (write_at)
// on or off for the whole process; returns the previous setting (on by
// default).
bool set_flush_early(bool on);

}  // namespace ckpt::detail
