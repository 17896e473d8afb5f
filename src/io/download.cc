#include "io/download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "ckpt/error.h"
#include "io/file_system.h"
#include "io/prefix_hasher.h"
#include "io/sha256.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;

// A download in progress records what it holds every this many bytes or
// this often, whichever comes first, so that a killed process's successor
// resumes near where it stopped.
constexpr uint64_t kRecordEvery = uint64_t{64} << 20;
constexpr std::chrono::milliseconds kRecordInterval{500};
// A download is written in blocks of this size, at offsets that are
// multiples of it (Filler::stage()), so that the page cache holds the file
// in folios of this size, as torch.hub's 128 KiB writes do. Measured on the
// development VM (docs/urls.md, Figures), in the bench's sequence (each
// download follows the removal of a 1 GiB file): 128 KiB blocks 0.59-1.74 s
// per GiB, curl's pieces written as they come 0.81-1.31 s, 512 KiB blocks
// 1.12-2.58 s, 8 MiB blocks 2.99-3.44 s (most likely because large folios
// take memory from the large free blocks that the VM reports back to its
// host, and touching it again costs the host's page faults); the staging
// buffer stays in the CPU's cache. Reading is nearly as fast from 128 KiB folios as from 2 MiB
// ones (read(): 0.075 against 0.06 s per GiB).
constexpr size_t kWriteBlock = size_t{128} << 10;
// A sibling ".sha256" larger than this is not a hash file.
constexpr uint64_t kMaxHashFile = 4096;

// The URL of the sibling hash file: ".sha256" appended to the path (before a query).
std::string sibling_hash_url(const std::string& url) {
  const size_t query = url.find('?');
  if (query == std::string::npos) return url + ".sha256";
  return url.substr(0, query) + ".sha256" + url.substr(query);
}

// The first word of the server's "<URL>.sha256", when it is 64 hex digits;
// "" when there is none (any failure, any other status or text).
std::string sibling_hash(HttpClient& client, const std::string& url, long stall) {
  std::string body;
  HttpRequest request;
  request.url = sibling_hash_url(url);
  request.stall_seconds = stall;
  request.on_body = [&](std::span<const std::byte> bytes) {
    if (body.size() + bytes.size() > kMaxHashFile) return false;
    body.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return true;
  };
  const HttpResponse response = client.get(request);
  if (response.failure != HttpFailure::kNone || response.status != 200) return "";
  const size_t begin = body.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = body.find_first_of(" \t\r\n", begin);
  const std::string word = body.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  return is_sha256_hex(word) ? ascii_lower(word) : "";
}

void write_download(int fd, std::span<const std::byte> bytes, uint64_t offset, const fs::path& path) {
  while (!bytes.empty()) {
    const ssize_t written = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (written < 0) {
      if (errno == EINTR) continue;
      throw_io(path, "cannot write the download", errno, offset);
    }
    bytes = bytes.subspan(static_cast<size_t>(written));
    offset += static_cast<uint64_t>(written);
  }
}

}  // namespace

void check_hash_prefix(const ParsedUrl& parsed, const std::string& actual, const FetchOptions& options) {
  if (!options.check_hash_prefix || parsed.hash_prefix.empty()) return;
  if (actual.rfind(parsed.hash_prefix, 0) != 0) {
    throw Error(ErrorCode::kCorrupt,
                "sha256 does not start with the hash prefix of its name: expected " + parsed.hash_prefix +
                    "..., got " + actual,
                {.path = parsed.url});
  }
}

struct Filler::Impl {
  Impl(fs::path dir, ParsedUrl parsed, std::string expected, CacheRecord record, const FetchOptions& options,
         HttpClient& client)
      : dir_(std::move(dir)),
        parsed_(std::move(parsed)),
        expected_(std::move(expected)),
        record_(std::move(record)),
        options_(options),
        client_(client),
        retries_(static_cast<int>(env_number("CKPT_FETCH_RETRIES", 4))),
        backoff_(env_number("CKPT_FETCH_BACKOFF", 0.25)),
        stall_(std::max<long>(1, static_cast<long>(env_number("CKPT_FETCH_TIMEOUT", 30)))) {
    std::error_code error;
    fs::create_directories(dir_ / kPartFolder, error);
    if (error) throw_io(dir_ / kPartFolder, "cannot create the download folder", error.value());
    const fs::path part = part_path(dir_, record_);
    fd_ = ::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_io(part, "cannot create the download", errno);
    // What the record says is held must be in the file (a record that
    // outlived its file, a shorter file): else start over.
    // So must a record of another boot (its bytes may not have reached the disk).
    hasher_ = std::make_unique<PrefixHasher>(fd_);
    struct stat status {};
    if (::fstat(fd_, &status) != 0 || (record_.size && static_cast<uint64_t>(status.st_size) != *record_.size) ||
        (!record_.ranges.ranges().empty() &&
         (static_cast<uint64_t>(status.st_size) < record_.ranges.ranges().back().end || record_.boot != boot_id()))) {
      reset();
    }
    record_.boot = boot_id();
    note_prefix();
  }
  ~Impl() {
    hasher_.reset();  // its thread reads fd_
    if (fd_ >= 0) ::close(fd_);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  const CacheRecord& record() const { return record_; }
  uint64_t transferred() const { return transferred_; }
  void set_progress(ProgressBar* bar) { progress_ = bar; }
  void defer_hash() { hasher_.reset(); }
  // Lazy opens refuse a file that changed under them; fetch() starts again.
  void set_refuse_changes(bool refuse) { refuse_changes_ = refuse; }

  // Fetches what `wanted` lacks (nullopt: the whole file). With `probe`, the
  // size need not be known: the first request asks for `probe`'s range and
  // learns the size from the answer.
  void fill(std::optional<std::vector<ByteRange>> wanted) {
    int failures = 0;
    int restarts = 0;
    most_held_ = record_.ranges.covered();
    for (;;) {
      std::optional<ByteRange> next;
      bool plain = false;  // a GET without Range
      if (!record_.size) {
        if (wanted && !wanted->empty()) {
          next = wanted->front();
        } else {
          plain = true;
          record_.ranges.clear();
        }
      } else {
        std::vector<ByteRange> missing;
        if (wanted) {
          for (const ByteRange& range : *wanted) {
            const ByteRange clipped{std::min(range.begin, *record_.size), std::min(range.end, *record_.size)};
            for (const ByteRange& gap : record_.ranges.missing(clipped)) missing.push_back(gap);
          }
        } else {
          missing = record_.ranges.missing({0, *record_.size});
        }
        if (missing.empty()) return;
        next = missing.front();
        plain = !wanted && record_.ranges.ranges().empty() && next->begin == 0;
      }
      const Outcome outcome = request(plain ? std::nullopt : next);
      // Progress (more of the file held than ever before: not a server that
      // cuts every answer of a file it sends from the start each time): the
      // retries count again from here.
      if (record_.ranges.covered() > most_held_) {
        most_held_ = record_.ranges.covered();
        failures = 0;
      }
      if (outcome == Outcome::kDone) continue;
      if (outcome == Outcome::kRestart) {
        if (refuse_changes_) {
          remote_error(parsed_.url, "the file changed on the server since ckpt first read it (" + reason_ + ")");
        }
        if (++restarts > 3) remote_error(parsed_.url, "the file keeps changing on the server (" + reason_ + ")");
        reset();
        continue;
      }
      // kRetry
      persist();
      if (failures >= retries_) {
        remote_error(parsed_.url, reason_ + " (after " + std::to_string(failures + 1) + " attempts)");
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff_ * static_cast<double>(1u << std::min(failures, 6))));
      ++failures;
    }
  }

  // Records what is held, for a successor in this boot (the data is synced
  // when the file completes; a record of another boot is not trusted).
  void persist() {
    if (record_.complete) return;
    flush_pending();
    record_.time = wall_seconds();
    write_record(dir_, record_, /*durable=*/false);
    since_persist_ = 0;
    persisted_at_ = std::chrono::steady_clock::now();
  }

  // The whole file is held: hash it, check the hash (the caller's, else the
  // server's sibling .sha256) and the hash prefix, and move it into place.
  // A wrong file is removed with its record (it never enters the cache).
  // Returns the entry's record as complete. With `sync_now`, the file is
  // synced before its rename and the record written (commit_complete());
  // else the caller commits it later (fetch(): on a background thread,
  // holding the entry's lock until then), and until it does the entry reads
  // as incomplete.
  CacheRecord finish(EntryLock& lock, bool sync_now = true) {
    if (!record_.size || !record_.ranges.covers({0, *record_.size})) {
      remote_error(parsed_.url, "internal: finish() before the file is whole");
    }
    if (::ftruncate(fd_, static_cast<off_t>(*record_.size)) != 0) {
      throw_io(part_path(dir_, record_), "cannot size the download", errno);
    }
    std::string expected = expected_;
    if (expected.empty() && !is_offline(options_)) expected = sibling_hash(client_, parsed_.url, stall_);
    // Without a hash to check, a deferred hash is left to the commit.
    const bool hash_now = hasher_ || sync_now || !expected.empty() ||
                          (options_.check_hash_prefix && !parsed_.hash_prefix.empty());
    std::string actual;
    if (hash_now) {
      const std::optional<std::string> streamed =
          hasher_ ? hasher_->finish(*record_.size) : std::optional<std::string>();
      actual = streamed ? *streamed : hash_file();
    }
    if ((!expected.empty() && actual != expected)) {
      lock.remove_entry();
      throw Error(ErrorCode::kCorrupt, "sha256 mismatch: expected " + expected + ", got " + actual +
                                           " (the download was discarded)",
                  {.path = parsed_.url});
    }
    try {
      if (hash_now) check_hash_prefix(parsed_, actual, options_);
    } catch (const Error&) {
      lock.remove_entry();
      throw;
    }
    if (sync_now && ::fdatasync(fd_) != 0) throw_io(part_path(dir_, record_), "cannot sync the download", errno);
    const fs::path from = part_path(dir_, record_);
    const fs::path to = final_path(dir_, record_);
    if (::rename(from.c_str(), to.c_str()) != 0) throw_io(to, "cannot move the download into the cache", errno);
    CacheRecord done = record_;
    done.complete = true;
    done.sha256 = actual;
    done.ranges.clear();
    done.boot.clear();
    done.time = wall_seconds();
    if (sync_now) commit_complete(dir_, done, /*synced=*/true);
    record_ = done;
    return done;
  }

  enum class Outcome { kDone, kRetry, kRestart };

  // Empties the part file and the record (a changed or unusable file).
  void reset() {
    record_.ranges.clear();
    record_.size.reset();
    record_.etag.clear();
    record_.last_modified.clear();
    if (hasher_) hasher_->reset();
    if (::ftruncate(fd_, 0) != 0) throw_io(part_path(dir_, record_), "cannot empty the download", errno);
  }

  // Received bytes for `position` go to the file in blocks that end at
  // multiples of kWriteBlock (a block that starts elsewhere, after a resumed
  // range, ends at the next one), never in curl's pieces (up to 2 MiB, at
  // any offset): the page cache then holds the file in folios of
  // kWriteBlock (why that size: its comment).
  void stage(std::span<const std::byte> bytes, uint64_t position) {
    while (!bytes.empty()) {
      if (!pending_.empty() && pending_at_ + pending_.size() != position) flush_pending();
      if (pending_.empty()) {
        pending_.reserve(kWriteBlock);
        pending_at_ = position;
      }
      const uint64_t block_end = (position / kWriteBlock + 1) * kWriteBlock;
      const size_t take = static_cast<size_t>(std::min<uint64_t>(bytes.size(), block_end - position));
      pending_.insert(pending_.end(), bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(take));
      bytes = bytes.subspan(take);
      position += take;
      if (position == block_end) flush_pending();
    }
  }

  // Writes what stage() holds; it is then held by the file (the record's
  // ranges, the hasher's prefix) and its writeback starts.
  void flush_pending() {
    if (pending_.empty()) return;
    write_download(fd_, pending_, pending_at_, part_path(dir_, record_));
    const uint64_t end = pending_at_ + pending_.size();
    record_.ranges.add({pending_at_, end});
    if (hasher_) {
      hasher_->feed(std::move(pending_), pending_at_);  // hashed from memory, not read back
      pending_ = hasher_->spare();
    }
    pending_.clear();
    note_prefix();
    // No early writeback (sync_file_range) here: on a disk slower than the
    // network it would hold the transfer to the disk's pace; the background
    // commit (BackgroundCommits) syncs the file after fetch() returns.
  }

  // Hands the held prefix [0, n) to the hasher.
  void note_prefix() {
    const auto& held = record_.ranges.ranges();
    if (hasher_ && !held.empty() && held.front().begin == 0) hasher_->written(held.front().end);
  }

  std::string validator() const { return !record_.etag.empty() ? record_.etag : record_.last_modified; }

  // One request for `range` (nullopt: the whole file, no Range header).
  Outcome request(std::optional<ByteRange> range) {
    HttpRequest request;
    request.url = parsed_.url;
    request.stall_seconds = stall_;
    if (range) {
      request.range_first = range->begin;
      request.range_last = range->end - 1;
      request.if_range = validator();
    }
    uint64_t position = 0;
    uint64_t limit = UINT64_MAX;
    bool whole = false;
    bool restart = false;
    request.on_headers = [&](const HttpResponse& response) {
      const bool changed = (!record_.etag.empty() && !response.etag.empty() && response.etag != record_.etag) ||
                           (record_.etag.empty() && !record_.last_modified.empty() &&
                            !response.last_modified.empty() && response.last_modified != record_.last_modified);
      if (response.status == 206) {
        if (!range || !response.range_first || *response.range_first != range->begin || changed ||
            (record_.size && response.total && *response.total != *record_.size) || (!record_.size && !response.total)) {
          reason_ = "the server answered a range request with another range or another version";
          restart = true;
          return false;
        }
        position = range->begin;
        limit = std::min(range->end, *response.range_last + 1);
        if (!record_.size) {
          record_.size = response.total;
          if (::ftruncate(fd_, static_cast<off_t>(*record_.size)) != 0) {
            throw_io(part_path(dir_, record_), "cannot size the download", errno);
          }
        }
      } else {
        // 200: the whole file (a first download, a server that ignores
        // ranges, or a file that changed: If-Range). A lazy open refuses a
        // changed file (what it read before may be stale); fetch() takes it.
        if (refuse_changes_ && changed) {
          reason_ = "its ETag or Last-Modified changed";
          restart = true;
          return false;
        }
        whole = true;
        record_.ranges.clear();
        if (hasher_) hasher_->reset();
        record_.size = response.content_length;
        if (::ftruncate(fd_, static_cast<off_t>(record_.size.value_or(0))) != 0) {
          throw_io(part_path(dir_, record_), "cannot size the download", errno);
        }
      }
      if (whole || record_.etag.empty()) record_.etag = response.etag;
      if (whole || record_.last_modified.empty()) record_.last_modified = response.last_modified;
      return true;
    };
    request.on_body = [&](std::span<const std::byte> bytes) {
      if (position >= limit) return true;  // more than was asked for: not ours
      if (bytes.size() > limit - position) bytes = bytes.first(static_cast<size_t>(limit - position));
      if (record_.size && position + bytes.size() > *record_.size) {
        reason_ = "the server sent more bytes than the file's length";
        restart = true;
        return false;
      }
      stage(bytes, position);
      position += bytes.size();
      transferred_ += bytes.size();
      since_persist_ += bytes.size();
      if (progress_) progress_->update(record_.ranges.covered() + pending_.size(), record_.size.value_or(0));
      if (since_persist_ >= kRecordEvery || std::chrono::steady_clock::now() - persisted_at_ >= kRecordInterval) {
        persist();
      }
      return true;
    };
    const HttpResponse response = client_.get(request);
    if (restart) {
      pending_.clear();  // of a version of the file that is being dropped
      return Outcome::kRestart;
    }
    flush_pending();
    if (response.failure == HttpFailure::kNone && response.status >= 200 && response.status < 300) {
      if (whole && !record_.size) {
        record_.size = position;  // no Content-Length: the body's end is the file's
        if (position == 0) record_.ranges.clear();
      }
      if ((range && !whole && position < limit) || (whole && position != *record_.size)) {
        reason_ = "the connection ended early";
        return Outcome::kRetry;
      }
      return Outcome::kDone;
    }
    const std::string status = "HTTP " + std::to_string(response.status) +
                               (http_reason(response.status).empty() ? "" : " " + std::string(http_reason(response.status)));
    switch (response.failure) {
      case HttpFailure::kNone:
        if (response.status == 416) {
          reason_ = status;
          return Outcome::kRestart;
        }
        if (response.status == 408 || response.status == 429 || response.status >= 500) {
          reason_ = status;
          return Outcome::kRetry;
        }
        remote_error(parsed_.url, status);
      case HttpFailure::kCut:
        reason_ = "connection cut (" + response.failure_text + ")";
        return Outcome::kRetry;
      case HttpFailure::kTimeout:
        persist();
        remote_error(parsed_.url, "timed out: no data for " + std::to_string(stall_) + " s (" + response.failure_text + ")");
      case HttpFailure::kResolve: {
        remote_error(parsed_.url, "cannot resolve host (" + response.failure_text + ")");
      }
      case HttpFailure::kConnect: remote_error(parsed_.url, "cannot connect (" + response.failure_text + ")");
      case HttpFailure::kTls: remote_error(parsed_.url, "TLS failure (" + response.failure_text + ")");
      case HttpFailure::kAborted:
      case HttpFailure::kOther: break;
    }
    remote_error(parsed_.url, "transfer failed (" + response.failure_text + ")");
  }

  std::string hash_file() { return sha256_of_file(fd_, *record_.size, part_path(dir_, record_)); }

  fs::path dir_;
  ParsedUrl parsed_;
  std::string expected_;
  CacheRecord record_;
  const FetchOptions& options_;
  HttpClient& client_;
  int retries_;
  double backoff_;
  long stall_;
  int fd_ = -1;
  // Hashes the held prefix [0, n) as it grows (declared after fd_, stopped before it closes).
  std::unique_ptr<PrefixHasher> hasher_;
  std::vector<std::byte> pending_;  // received, not yet written (stage())
  uint64_t pending_at_ = 0;
  uint64_t transferred_ = 0;
  uint64_t since_persist_ = 0;
  uint64_t most_held_ = 0;  // the most bytes held after any request of fill()
  std::chrono::steady_clock::time_point persisted_at_ = std::chrono::steady_clock::now();
  ProgressBar* progress_ = nullptr;
  bool refuse_changes_ = false;
  std::string reason_;
};

Filler::Filler(fs::path dir, ParsedUrl parsed, std::string expected, CacheRecord record, const FetchOptions& options,
               HttpClient& client)
    : impl_(std::make_unique<Impl>(std::move(dir), std::move(parsed), std::move(expected), std::move(record), options,
                                   client)) {}
Filler::~Filler() = default;
const CacheRecord& Filler::record() const { return impl_->record(); }
uint64_t Filler::transferred() const { return impl_->transferred(); }
void Filler::set_progress(ProgressBar* bar) { impl_->set_progress(bar); }
void Filler::set_refuse_changes(bool refuse) { impl_->set_refuse_changes(refuse); }
void Filler::fill(std::optional<std::vector<ByteRange>> wanted) { impl_->fill(std::move(wanted)); }
void Filler::persist() { impl_->persist(); }
CacheRecord Filler::finish(EntryLock& lock, bool sync_now) { return impl_->finish(lock, sync_now); }
void Filler::defer_hash() { impl_->defer_hash(); }

}  // namespace ckpt::detail
