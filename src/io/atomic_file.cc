#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <climits>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/parallel.h"
#include "io/deferred_release.h"
#include "io/file_hashes.h"
#include "io/file_system.h"

namespace ckpt::detail {
namespace {

// Writes are split into pieces of this size: large enough for full disk
// bandwidth, small enough to keep checksumming in cache.
constexpr size_t kChunkSize = size_t{8} << 20;
// Spans smaller than this that lie back to back are gathered (up to
// kChunkSize) into one vectored write: thousands of small tensors cost a few
// large writes instead of one system call each.
constexpr size_t kGatherBelow = size_t{256} << 10;

// Durable writes of at least this size start their writeback at once
// (sync_file_range), so that the final fsync waits only for the tail.
constexpr size_t kFlushEarlyFrom = size_t{1} << 20;

std::atomic<int64_t> g_fault_budget{-1};
std::atomic<bool> g_flush_early{true};
std::atomic<uint64_t> g_bytes_written{0};
// Sealed files whose lock is held by a duplicate descriptor.
std::atomic<int> g_sealed_locks{0};

// How many sealed files may keep a duplicate descriptor now: kSealedLocks,
// or a quarter of the process's descriptor limit where that is lower, so
// that the locks never take the descriptors the rest of the process needs
// (a save of thousands of shards under `ulimit -n 64`).
int sealed_lock_budget() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return AtomicFile::kSealedLocks;
  return static_cast<int>(std::min<rlim_t>(AtomicFile::kSealedLocks, limit.rlim_cur / 4));
}

// Consumes `bytes` of the injected-fault budget; true if this write must fail.
bool fault_injected(size_t bytes) {
  int64_t budget = g_fault_budget.load();
  while (budget >= 0) {
    if (budget < static_cast<int64_t>(bytes)) {
      g_fault_budget.store(-1);
      return true;
    }
    if (g_fault_budget.compare_exchange_weak(budget, budget - static_cast<int64_t>(bytes))) return false;
  }
  return false;
}

}  // namespace

void inject_write_fault_after(int64_t bytes) { g_fault_budget.store(bytes); }

bool set_flush_early(bool on) { return g_flush_early.exchange(on); }

uint64_t bytes_written() { return g_bytes_written.load(std::memory_order_relaxed); }

// The whole-file xxh3 of a file written in file order: each write at or
// after the end of the one before, the holes between them (and up to the
// size set by resize) hashed as the zeros they read as. A write before the
// end hashed so far ends it: the file is then not reported.
struct AtomicFile::RunningHash {
  explicit RunningHash(FileHashes* to) : to(to) {}
  FileHashes* to;
  Checksummer sum{ChecksumKind::kXxh3};
  uint64_t hashed = 0;  // bytes [0, hashed) are in `sum`
  uint64_t size = 0;    // the file's size: the furthest write's end, or resize's
  bool in_order = true;

  void zeros_to(uint64_t end) {
    static const std::byte kZeros[64 << 10] = {};
    while (hashed < end) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof kZeros, end - hashed));
      sum.update(std::span<const std::byte>(kZeros, n));
      hashed += n;
    }
  }
  void write(std::span<const std::span<const std::byte>> pieces, uint64_t offset) {
    if (!in_order) return;
    if (offset < hashed) {
      in_order = false;
      return;
    }
    zeros_to(offset);
    for (const auto& piece : pieces) {
      sum.update(piece);
      hashed += piece.size();
    }
    size = std::max(size, hashed);
  }
  void resize(uint64_t to_size) {
    if (to_size < hashed) in_order = false;
    size = to_size;
  }
};

AtomicFile::AtomicFile(std::filesystem::path final_path, AtomicFileOptions options)
    : final_path_(std::move(final_path)), options_(options) {
  if (FileHashes* hashes = FileHashes::current()) hash_ = std::make_unique<RunningHash>(hashes);
  if (final_path_.filename().empty()) {
    throw Error(ErrorCode::kInvalidArgument, "not a file path", {.path = final_path_});
  }
  remove_abandoned_temporaries(final_path_);
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temp_path_ = temporary_sibling(final_path_);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) throw_io(final_path_, "cannot create temporary file", errno);
    if (fd_ >= 0 && claim_temporary(fd_, temp_path_) == Claim::kLost) {
      ::close(fd_);  // a cleaner removes (or removed) the name
      fd_ = -1;
    }
  }
  if (fd_ < 0) throw Error(ErrorCode::kIo, "cannot create a unique temporary file", {.path = final_path_});
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() noexcept {
  // The name goes before the lock does: a cleaner never takes a name in use.
  if (!committed_ && !temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  release_lock();
}

void AtomicFile::release_lock() noexcept {
  if (sealed_lock_fd_ < 0) return;
  ::close(sealed_lock_fd_);
  sealed_lock_fd_ = -1;
  g_sealed_locks.fetch_sub(1);
}

void AtomicFile::resize(uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) throw_io(final_path_, "cannot size file", errno);
  if (hash_) hash_->resize(size);
}

void AtomicFile::write_at(std::span<const std::byte> bytes, uint64_t offset) {
  const std::span<const std::byte> one[] = {bytes};
  write_vectored_at(one, offset);
}

void AtomicFile::write_vectored_at(std::span<const std::span<const std::byte>> pieces, uint64_t offset) {
  uint64_t total = 0;
  for (const auto& piece : pieces) total += piece.size();
  const bool flush_early = options_.fsync && total >= kFlushEarlyFrom && g_flush_early.load();
  const uint64_t first = offset;
  // Hashed before they are written: the kernel's copy then reads them from cache.
  if (hash_) hash_->write(pieces, offset);
  bool drained = false;  // the space of deferred releases was freed for this write
  size_t next = 0;       // the first piece not wholly written
  size_t skip = 0;       // bytes of pieces[next] already written
  std::vector<iovec> vector;
  while (next < pieces.size()) {
    if (pieces[next].size() == skip) {
      ++next;
      skip = 0;
      continue;
    }
    // At most IOV_MAX buffers and 1 GiB per call.
    vector.clear();
    size_t call = 0;
    for (size_t i = next; i < pieces.size() && vector.size() < IOV_MAX && call < (size_t{1} << 30); ++i) {
      const size_t from = i == next ? skip : 0;
      const size_t size = std::min(pieces[i].size() - from, (size_t{1} << 30) - call);
      if (size == 0) continue;
      vector.push_back({const_cast<std::byte*>(pieces[i].data() + from), size});
      call += size;
    }
    if (fault_injected(call)) throw_io(final_path_, "write failed", ENOSPC, offset);
    const ssize_t n = ::pwritev(fd_, vector.data(), static_cast<int>(vector.size()), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    // A full disk may only be waiting for replaced files' blocks
    // (io/deferred_release.h): those are freed, then the write tried again.
    const bool full = (n < 0 && errno == ENOSPC) || n == 0;
    if (full && !drained && drain_deferred_releases() > 0) {
      drained = true;
      continue;
    }
    if (n < 0) throw_io(final_path_, "write failed", errno, offset);
    if (n == 0) throw_io(final_path_, "write made no progress", ENOSPC, offset);
    offset += static_cast<uint64_t>(n);
    g_bytes_written.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    for (size_t left = static_cast<size_t>(n); left > 0;) {
      const size_t here = std::min(left, pieces[next].size() - skip);
      left -= here;
      skip += here;
      if (skip == pieces[next].size()) {
        ++next;
        skip = 0;
      }
    }
  }
  // Writeback of the range starts now, overlapping the writes that follow;
  // the final fsync still waits for all of it. Advisory: errors surface there.
  if (flush_early) ::sync_file_range(fd_, static_cast<off_t>(first), static_cast<off_t>(offset - first), SYNC_FILE_RANGE_WRITE);
}

namespace {

// A unit of writing: spans[first, last). Either one span written in chunks
// straight from its memory, or a run of small spans that lie back to back in
// the file, written with one vectored call.
struct WriteJob {
  size_t first;
  size_t last;
  uint64_t bytes;
  bool gathers;  // made of small spans only: more may join it
};

std::vector<WriteJob> plan_jobs(const std::vector<WriteSpan>& spans) {
  std::vector<WriteJob> jobs;
  for (size_t i = 0; i < spans.size(); ++i) {
    const uint64_t size = spans[i].bytes.size();
    const bool small = size < kGatherBelow;
    if (small && !jobs.empty() && jobs.back().gathers) {
      WriteJob& open = jobs.back();
      const WriteSpan& previous = spans[open.last - 1];
      if (previous.offset + previous.bytes.size() == spans[i].offset && open.bytes + size <= kChunkSize) {
        open.last = i + 1;
        open.bytes += size;
        continue;
      }
    }
    jobs.push_back({i, i + 1, size, small});
  }
  return jobs;
}

// One step of the writer: a piece (up to kChunkSize) of one span, written
// straight from its memory, or a gathered job's small spans in one vectored
// write. The checksum thread counts the same steps.
struct WriteStep {
  size_t first;
  size_t last;
  std::span<const std::byte> piece;  // of spans[first], when the step holds one span
  uint64_t at;                       // where `piece` goes in the file

  bool one_span() const { return last - first == 1; }
  // The bytes of spans[i] (first <= i < last) this step writes.
  std::span<const std::byte> bytes_of(const std::vector<WriteSpan>& spans, size_t i) const {
    return one_span() ? piece : spans[i].bytes;
  }
};

std::vector<WriteStep> plan_steps(const std::vector<WriteSpan>& spans) {
  std::vector<WriteStep> steps;
  for (const WriteJob& job : plan_jobs(spans)) {
    if (job.last - job.first > 1) {
      steps.push_back({job.first, job.last, {}, spans[job.first].offset});
      continue;
    }
    const WriteSpan& span = spans[job.first];
    size_t done = 0;
    do {  // an empty span still gets its one (empty) piece, and its on_chunk
      const auto piece = span.bytes.subspan(done, std::min(kChunkSize, span.bytes.size() - done));
      steps.push_back({job.first, job.last, piece, span.offset + done});
      done += piece.size();
    } while (done < span.bytes.size());
  }
  return steps;
}

// A piece of a summed span, with the writer's step that writes it.
struct HashPiece {
  const WriteSpan* span;
  std::span<const std::byte> bytes;
  uint64_t step;
};

// How many steps the checksum thread may run ahead of the writer: it hashes
// the piece the writer writes next, so the writer reads it from the shared
// cache (two 8 MiB pieces fit the last-level cache of current servers).
constexpr uint64_t kHashLead = 1;

// What the writer publishes as its step count when it failed.
constexpr uint64_t kWriterFailed = UINT64_MAX;

}  // namespace

void AtomicFile::write_parallel(const std::vector<WriteSpan>& spans, unsigned threads) {
  const std::vector<WriteStep> steps = plan_steps(spans);
  if (threads == 0) threads = default_threads();
  std::vector<HashPiece> summed;
  for (uint64_t s = 0; s < steps.size(); ++s) {
    for (size_t i = steps[s].first; i < steps[s].last; ++i) {
      if (spans[i].on_chunk) summed.push_back({&spans[i], steps[s].bytes_of(spans, i), s});
    }
  }
  const bool alongside = threads > 1 && !summed.empty();  // on_chunk on another thread

  // Steps the writer has begun (kWriterFailed once it failed); the checksum
  // thread hashes step s once the writer has begun step s - kHashLead.
  std::atomic<uint64_t> begun{0};
  const auto begin_step = [&](uint64_t value) {
    if (!alongside) return;
    begun.store(value, std::memory_order_release);
    begun.notify_one();
  };
  std::exception_ptr checksum_error;
  std::thread checksums;
  if (alongside) {
    // One thread follows the writer in lockstep: checksums run several times
    // faster than writes into the page cache, and hashing each piece just
    // ahead of its write reads the source from memory once, not twice.
    checksums = std::thread([&] {
      try {
        for (const HashPiece& piece : summed) {
          uint64_t seen = begun.load(std::memory_order_acquire);
          while (seen < piece.step + 1 - kHashLead) {
            begun.wait(seen, std::memory_order_acquire);
            seen = begun.load(std::memory_order_acquire);
          }
          if (seen == kWriterFailed) break;  // nothing left to sum for
          piece.span->on_chunk(piece.bytes);
        }
      } catch (...) {
        checksum_error = std::current_exception();
      }
    });
  }
  std::exception_ptr write_error;
  try {
    std::vector<std::span<const std::byte>> gathered;
    for (uint64_t s = 0; s < steps.size(); ++s) {
      const WriteStep& step = steps[s];
      begin_step(s + 1);
      if (!alongside) {
        for (size_t i = step.first; i < step.last; ++i) {
          if (spans[i].on_chunk) spans[i].on_chunk(step.bytes_of(spans, i));
        }
      }
      if (step.one_span()) {
        write_at(step.piece, step.at);
        continue;
      }
      gathered.clear();
      for (size_t i = step.first; i < step.last; ++i) gathered.push_back(spans[i].bytes);
      write_vectored_at(gathered, step.at);
    }
  } catch (...) {
    write_error = std::current_exception();
    begin_step(kWriterFailed);
  }
  if (checksums.joinable()) checksums.join();
  if (write_error) std::rethrow_exception(write_error);
  if (checksum_error) std::rethrow_exception(checksum_error);
}

void AtomicFile::seal() {
  if (fd_ < 0) throw Error(ErrorCode::kInvalidArgument, "file already sealed, committed or abandoned", {.path = final_path_});
  if (options_.fsync && ::fsync(fd_) != 0) throw_io(final_path_, "cannot sync file", errno);
  const int fd = fd_;
  fd_ = -1;
  sealed_ = true;
  if (g_sealed_locks.fetch_add(1) < sealed_lock_budget()) {
    sealed_lock_fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);  // shares the lock
  }
  if (sealed_lock_fd_ < 0) g_sealed_locks.fetch_sub(1);
  if (::close(fd) != 0) throw_io(final_path_, "cannot close file", errno);
}

void AtomicFile::commit(const AtomicCommitOptions& commit_options) {
  if (committed_ || (fd_ < 0 && !sealed_)) {
    throw Error(ErrorCode::kInvalidArgument, "file already committed or abandoned", {.path = final_path_});
  }
  if (!sealed_) seal();
  // The file being replaced stays held across the rename, so that the
  // rename only drops its name; its blocks are freed off this thread once
  // the commit is done (io/deferred_release.h).
  ReleaseHold replaced = hold_for_release(final_path_);
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) throw_io(final_path_, "cannot rename into place", errno);
  committed_ = true;
  release_lock();
  if (options_.fsync && commit_options.sync_directory) sync_directory(final_path_.parent_path(), final_path_);
  release_later(std::move(replaced));
  if (hash_ && hash_->in_order) {
    hash_->zeros_to(hash_->size);
    hash_->to->add({.path = final_path_, .size = hash_->size, .xxh3 = hash_->sum.hex()});
  }
}

}  // namespace ckpt::detail
