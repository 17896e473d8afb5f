#pragma once
// Deferred release: freeing the blocks of a replaced or removed file off the
// committing thread. On ext4 mounted with `discard` (and other file systems
// that free synchronously), the last unlink of a large file frees its
// extents inside the call: about a millisecond per MiB on this project's
// machines, so that a rename replacing a 1 GiB file took as long as writing
// it. Holding a descriptor on the old inode across the rename (or the
// removal) leaves the name's change instant; the blocks are freed when the
// descriptor is closed, which this facility does on one background thread
// after the commit. Knows no format; docs/design.md, "Deferred release".
//
//   ReleaseHold old = hold_for_release(final_path);  // before the rename
//   rename(temporary, final_path);  sync the directory;
//   release_later(std::move(old));                   // after the commit
//
// Nothing of it is visible in a directory: a held inode has no name, and a
// process that dies or exits with releases pending drops its descriptors
// (the kernel frees the blocks). A directory removed later
// (remove_later) lies under a temporary name (temporary_sibling) until then,
// which a crash leaves for the owner's leftover cleanup
// (remove_abandoned_temporaries).

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace ckpt::detail {

// A descriptor that keeps one inode alive (O_PATH: no read permission
// needed, never opens a device or FIFO). Move-only; its destructor closes it
// on the calling thread (the release done synchronously): what a commit that
// failed before its rename does.
class ReleaseHold {
 public:
  ReleaseHold() = default;
  ReleaseHold(int fd, uint64_t bytes) : fd_(fd), bytes_(bytes) {}
  ReleaseHold(ReleaseHold&& other) noexcept : fd_(other.fd_), bytes_(other.bytes_) { other.fd_ = -1; }
  ReleaseHold& operator=(ReleaseHold&& other) noexcept;
  ReleaseHold(const ReleaseHold&) = delete;
  ReleaseHold& operator=(const ReleaseHold&) = delete;
  ~ReleaseHold() { reset(); }

  // True if it holds an inode.
  bool held() const { return fd_ >= 0; }
  // The blocks the inode had when it was taken (st_blocks × 512).
  uint64_t bytes() const { return bytes_; }
  // Closes the descriptor now (frees the blocks if the name is gone).
  void reset() noexcept;

 private:
  int fd_ = -1;
  uint64_t bytes_ = 0;
};

// Files smaller than this (allocated bytes) are not worth a deferral: their
// release is as quick as the queueing.
constexpr uint64_t kDeferReleaseFrom = uint64_t{1} << 20;

// Takes a hold on the regular file at `path` (never through a symbolic
// link) if it has at least kDeferReleaseFrom bytes allocated; an empty hold
// otherwise (absent, another kind of entry, small, or not openable). Never
// throws.
ReleaseHold hold_for_release(const std::filesystem::path& path) noexcept;

// The bound on what waits for the background thread. An item is deferred
// while fewer than `max_pending` wait and their bytes, with it, stay within
// `max_bytes` (one item alone may exceed it: nothing accumulates); beyond
// that the caller releases it synchronously, so that saves faster than the
// disk frees blocks never pile up held space.
struct DeferredReleaseLimits {
  size_t max_pending = 64;
  uint64_t max_bytes = uint64_t{4} << 30;
};

// Hands `hold` to the background thread, which closes it; releases it on
// the calling thread when the bound is reached, after process exit began,
// or when the thread cannot start. Never throws.
void release_later(ReleaseHold hold) noexcept;

// Removes `hidden` (a file or a directory with its contents, already
// renamed to a temporary name so that nobody finds it under its own) on the
// background thread, after an fsync of its parent directory when
// `sync_parent` (so that a crash never brings the old name back with its
// files gone); synchronously where release_later() would be. Best effort,
// like everything here: what cannot be removed keeps its temporary name, for
// the owner's leftover cleanup. Counts as an item of no bytes against the
// bound. Never throws.
void remove_later(const std::filesystem::path& hidden, bool sync_parent) noexcept;

// Releases everything pending on the calling thread and waits for the one
// the background thread may be releasing; returns how many items it
// released itself. Runs at process exit (atexit) too. Never throws.
size_t drain_deferred_releases() noexcept;

// What the facility has done in this process, for tests and benchmarks.
struct DeferredReleaseStats {
  size_t pending = 0;        // waiting or being released now
  uint64_t pending_bytes = 0;
  uint64_t deferred = 0;     // items ever handed to the background thread
  uint64_t synchronous = 0;  // items released by their caller (the bound, exit)
};
DeferredReleaseStats deferred_release_stats() noexcept;

// Test and benchmark hooks: replace the bound (returns the previous one);
// stop or resume the background thread (while stopped, items wait; a drain
// still releases them).
DeferredReleaseLimits set_deferred_release_limits(const DeferredReleaseLimits& limits) noexcept;
void pause_deferred_releases(bool paused) noexcept;

}  // namespace ckpt::detail
