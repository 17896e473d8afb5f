#include "io/url_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <fstream>
#include <cstdlib>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "io/atomic_file.h"
#include "io/file_system.h"
#include "io/http.h"
#include "io/progress.h"
#include "io/sha256.h"

namespace ckpt {
namespace detail {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRecordName = "entry.json";
constexpr const char* kLockName = ".lock";
constexpr const char* kPartFolder = "part";
// A download in progress records what it holds (after syncing it) every this
// many bytes or this often, whichever comes first, so that a killed
// process's successor resumes near where it stopped.
constexpr uint64_t kRecordEvery = uint64_t{64} << 20;
constexpr std::chrono::milliseconds kRecordInterval{500};
// A download is written in pieces of this size.
constexpr size_t kWriteBlock = size_t{8} << 20;
// Neighbouring ranges of one ensure() closer than this become one request.
constexpr uint64_t kCoalesceGap = uint64_t{64} << 10;
// A sibling ".sha256" larger than this is not a hash file.
constexpr uint64_t kMaxHashFile = 4096;

// ------------------------------------------------------------ environment

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

bool env_true(const char* name) {
  const std::string value = env(name);
  return value == "1" || value == "true" || value == "yes" || value == "on" || value == "TRUE" || value == "True";
}

double env_number(const char* name, double fallback) {
  const std::string value = env(name);
  if (value.empty()) return fallback;
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !(number >= 0)) {
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + value + "' is not a non-negative number");
  }
  return number;
}

bool is_offline(const FetchOptions& options) {
  return options.offline ? *options.offline : env_true("CKPT_OFFLINE");
}

std::string lower(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// This boot of the machine (the kernel's random boot_id): a record written in
// another boot may claim bytes that never reached the disk (the download's
// data is synced only when it completes).
const std::string& boot_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string text;
    std::getline(in, text);
    return text;
  }();
  return id;
}

[[noreturn]] void remote_error(const std::string& url, const std::string& message) {
  throw Error(ErrorCode::kRemote, message, {.path = url});
}

// -------------------------------------------------------------- the record

// entry.json: what an entry holds. Written atomically (io/atomic_file.h).
struct CacheRecord {
  std::string url;
  std::string file;  // the file's name in the entry
  std::optional<uint64_t> size;
  std::string sha256;
  std::string etag;
  std::string last_modified;
  double time = 0;
  bool complete = false;
  RangeSet ranges;   // while incomplete
  std::string boot;  // boot_id() of the writer of an incomplete record
};

std::string record_json(const CacheRecord& record) {
  JsonWriter out;
  out.begin_object();
  out.key("url");
  out.string(record.url);
  out.key("file");
  out.string(record.file);
  out.key("size");
  if (record.size) {
    out.unsigned_integer(*record.size);
  } else {
    out.null();
  }
  out.key("sha256");
  out.string(record.sha256);
  out.key("etag");
  out.string(record.etag);
  out.key("last_modified");
  out.string(record.last_modified);
  out.key("time");
  out.real(record.time);
  out.key("complete");
  out.boolean(record.complete);
  out.key("boot");
  out.string(record.boot);
  out.key("ranges");
  out.begin_array();
  for (const ByteRange& range : record.ranges.ranges()) {
    out.begin_array();
    out.unsigned_integer(range.begin);
    out.unsigned_integer(range.end);
    out.end_array();
  }
  out.end_array();
  out.end_object();
  return out.take();
}

// The record of the entry at `dir`; nullopt when it has none or it is
// damaged (an entry without a readable record holds nothing usable).
std::optional<CacheRecord> read_record(const fs::path& dir) {
  std::error_code error;
  const fs::path path = dir / kRecordName;
  const auto size = fs::file_size(path, error);
  if (error || size > (uint64_t{16} << 20)) return std::nullopt;
  thread_local simdjson::dom::parser parser;  // its buffers kept: a cache hit costs microseconds
  simdjson::dom::element root;
  if (parser.load(path.string()).get(root) != simdjson::SUCCESS) return std::nullopt;
  CacheRecord record;
  std::string_view text;
  if (root["url"].get(text) != simdjson::SUCCESS) return std::nullopt;
  record.url = std::string(text);
  if (root["file"].get(text) != simdjson::SUCCESS) return std::nullopt;
  record.file = std::string(text);
  if (record.file.empty() || record.file.find('/') != std::string::npos || record.file == "." || record.file == "..") {
    return std::nullopt;
  }
  uint64_t number = 0;
  if (root["size"].get(number) == simdjson::SUCCESS) record.size = number;
  if (root["sha256"].get(text) == simdjson::SUCCESS) record.sha256 = std::string(text);
  if (root["etag"].get(text) == simdjson::SUCCESS) record.etag = std::string(text);
  if (root["last_modified"].get(text) == simdjson::SUCCESS) record.last_modified = std::string(text);
  double time = 0;
  if (root["time"].get(time) == simdjson::SUCCESS) record.time = time;
  bool complete = false;
  if (root["complete"].get(complete) == simdjson::SUCCESS) record.complete = complete;
  if (root["boot"].get(text) == simdjson::SUCCESS) record.boot = std::string(text);
  simdjson::dom::array ranges;
  if (root["ranges"].get(ranges) == simdjson::SUCCESS) {
    for (simdjson::dom::element pair : ranges) {
      simdjson::dom::array bounds;
      uint64_t begin = 0;
      uint64_t end = 0;
      if (pair.get(bounds) != simdjson::SUCCESS || bounds.size() != 2 || bounds.at(0).get(begin) != simdjson::SUCCESS ||
          bounds.at(1).get(end) != simdjson::SUCCESS || end < begin || (record.size && end > *record.size)) {
        return std::nullopt;
      }
      record.ranges.add({begin, end});
    }
  }
  if (record.complete && (!record.size || record.sha256.empty())) return std::nullopt;
  return record;
}

// `durable`: synced (a complete entry's record); else only renamed into place
// (an incomplete one's, which only this boot trusts: boot_id()).
void write_record(const fs::path& dir, const CacheRecord& record, bool durable = true) {
  const std::string text = record_json(record);
  AtomicFile file(dir / kRecordName, {.fsync = durable});
  file.write_at(std::as_bytes(std::span(text.data(), text.size())), 0);
  file.commit();
}

fs::path final_path(const fs::path& dir, const CacheRecord& record) { return dir / record.file; }
fs::path part_path(const fs::path& dir, const CacheRecord& record) { return dir / kPartFolder / record.file; }

// A complete entry whose file is there, of its recorded size.
bool usable(const fs::path& dir, const CacheRecord& record) {
  if (!record.complete) return false;
  std::error_code error;
  const auto size = fs::file_size(final_path(dir, record), error);
  return !error && record.size && size == *record.size;
}

// ---------------------------------------------------------------- locking

// The lock of one entry: flock(LOCK_EX) on "<entry>/.lock". A remover
// unlinks the lock with the entry while holding it; a waiter that then gets
// the lock of an unlinked file sees that its name no longer names it and
// starts again.
class EntryLock {
 public:
  explicit EntryLock(fs::path dir) : dir_(std::move(dir)) {
    const fs::path path = dir_ / kLockName;
    for (;;) {
      std::error_code error;
      fs::create_directories(dir_, error);
      if (error) throw_io(dir_, "cannot create the cache entry", error.value());
      fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) {
        if (errno == ENOENT) continue;  // removed between the two calls
        throw_io(path, "cannot open the cache entry's lock", errno);
      }
      while (::flock(fd_, LOCK_EX) != 0) {
        if (errno != EINTR) break;  // no locks on this file system: go on unprotected
      }
      struct stat held {};
      struct stat named {};
      if (::fstat(fd_, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
          held.st_dev == named.st_dev) {
        return;
      }
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~EntryLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  EntryLock(EntryLock&& other) noexcept : dir_(std::move(other.dir_)), fd_(other.fd_) { other.fd_ = -1; }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

  // Removes the entry, lock included (the lock is still held until destruction).
  void remove_entry() noexcept {
    std::error_code error;
    fs::remove_all(dir_ / kPartFolder, error);
    fs::remove(dir_ / kRecordName, error);
    for (const auto& child : fs::directory_iterator(dir_, error)) {
      if (child.path().filename() != kLockName) fs::remove_all(child.path(), error);
    }
    fs::remove(dir_ / kLockName, error);
    fs::remove(dir_, error);
  }

 private:
  fs::path dir_;
  int fd_ = -1;
};

// --------------------------------------------------------------- the cache

fs::path cache_root() {
  if (std::string dir = env("CKPT_CACHE"); !dir.empty()) return dir;
  if (std::string dir = env("XDG_CACHE_HOME"); !dir.empty()) return fs::path(dir) / "ckpt";
  if (std::string home = env("HOME"); !home.empty()) return fs::path(home) / ".cache" / "ckpt";
  throw Error(ErrorCode::kInvalidArgument, "no cache directory: set CKPT_CACHE (or XDG_CACHE_HOME or HOME)");
}

// Entries are keyed by URL and, when the caller gives one, the expected hash.
std::string entry_key(const std::string& url, const std::string& expected) {
  return sha256_hex(expected.empty() ? url : url + "\nsha256=" + expected).substr(0, 32);
}

// A complete entry of `url` whose hash is `expected` (any hash when empty):
// its own key's first, then any other.
std::optional<std::pair<fs::path, CacheRecord>> find_complete(const fs::path& root, const std::string& url,
                                                         const std::string& expected) {
  const fs::path own = root / entry_key(url, expected);
  if (std::optional<CacheRecord> record = read_record(own); record && record->url == url && usable(own, *record)) {
    if (expected.empty() || record->sha256 == expected) return std::make_pair(own, std::move(*record));
  }
  std::error_code error;
  for (const auto& child : fs::directory_iterator(root, error)) {
    if (child.path() == own) continue;
    std::optional<CacheRecord> record = read_record(child.path());
    if (!record || record->url != url || !usable(child.path(), *record)) continue;
    if (expected.empty() || record->sha256 == expected) return std::make_pair(child.path(), std::move(*record));
  }
  return std::nullopt;
}

// The complete entries this process has found or made, by cache, URL and
// expected hash: a later fetch() of one costs a stat() instead of reading
// its record (a cached open of a URL as fast as a local one). A remembered
// file that is gone or has another size is looked up again.
struct CompleteEntry {
  fs::path path;
  uint64_t size = 0;
  std::string sha256;
};

std::mutex& memo_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::unordered_map<std::string, CompleteEntry>& memo() {
  static auto* entries = new std::unordered_map<std::string, CompleteEntry>();  // never destroyed
  return *entries;
}

void remember(const std::string& key, CompleteEntry entry) {
  std::lock_guard guard(memo_mutex());
  memo()[key] = std::move(entry);
}

std::optional<CompleteEntry> remembered(const std::string& key) {
  std::optional<CompleteEntry> entry;
  {
    std::lock_guard guard(memo_mutex());
    const auto found = memo().find(key);
    if (found == memo().end()) return std::nullopt;
    entry = found->second;
  }
  struct stat status {};
  if (::stat(entry->path.c_str(), &status) == 0 && S_ISREG(status.st_mode) &&
      static_cast<uint64_t>(status.st_size) == entry->size) {
    return entry;
  }
  std::lock_guard guard(memo_mutex());
  memo().erase(key);
  return std::nullopt;
}

void check_hash_prefix(const ParsedUrl& parsed, const std::string& actual, const FetchOptions& options) {
  if (!options.check_hash_prefix || parsed.hash_prefix.empty()) return;
  if (actual.rfind(parsed.hash_prefix, 0) != 0) {
    throw Error(ErrorCode::kCorrupt,
                "sha256 does not start with the hash prefix of its name: expected " + parsed.hash_prefix +
                    "..., got " + actual,
                {.path = parsed.url});
  }
}

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
  return is_sha256_hex(word) ? lower(word) : "";
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

// Makes a complete entry's file durable (unless `synced` already) and then
// its record: only a durable file is ever recorded complete.
void commit_complete(const fs::path& dir, const CacheRecord& done, bool synced) {
  const fs::path path = final_path(dir, done);
  if (!synced) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_io(path, "cannot open the download to sync it", errno);
    const int result = ::fdatasync(fd);
    const int error = errno;
    ::close(fd);
    if (result != 0) throw_io(path, "cannot sync the download", error);
  }
  write_record(dir, done);
  std::error_code ignored;
  fs::remove(dir / kPartFolder, ignored);
}

// The commits of downloads that fetch() returned before their file reached
// the disk: each on a thread of its own, holding its entry's lock (another
// process waits for it, then finds the entry complete). The process's exit
// waits for those still running (this object's destructor); a process that
// dies first leaves the entry incomplete, and its record of this boot has
// it fetched again.
class BackgroundCommits {
 public:
  static BackgroundCommits& instance() {
    static BackgroundCommits commits;
    return commits;
  }
  ~BackgroundCommits() { wait(); }
  // Waits for every commit begun so far (what this process lists of the
  // cache is then what it fetched).
  void wait() {
    std::vector<Job> jobs;
    {
      std::lock_guard guard(mutex_);
      jobs.swap(jobs_);
    }
    for (Job& job : jobs) job.thread.join();
  }
  // Runs commit_complete(dir, done, false) under `lock`; on a failure (the
  // disk refuses the sync) the entry stays incomplete. Synchronously when no
  // thread can be started.
  void run(EntryLock lock, fs::path dir, CacheRecord done) {
    auto done_flag = std::make_shared<std::atomic<bool>>(false);
    auto job = std::make_shared<std::function<void()>>(
        [lock = std::make_shared<EntryLock>(std::move(lock)), dir = std::move(dir), done = std::move(done), done_flag] {
          try {
            commit_complete(dir, done, /*synced=*/false);
          } catch (...) {
          }
          done_flag->store(true);  // the lock goes with the last reference to it, after the record
        });
    std::lock_guard guard(mutex_);
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    try {
      jobs_.push_back({std::thread([job] { (*job)(); }), done_flag});
    } catch (const std::system_error&) {
      (*job)();  // no thread: now
    }
  }

 private:
  struct Job {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  BackgroundCommits() = default;
  std::mutex mutex_;
  std::vector<Job> jobs_;
};

// ---------------------------------------------------------------- transfers

// The SHA-256 of a file's first bytes, computed on a thread of its own that
// reads back (from the page cache) what the download has written, so that
// hashing overlaps the transfer instead of following it.
class PrefixHasher {
 public:
  explicit PrefixHasher(int fd) : fd_(fd), thread_([this] { run(); }) {}
  ~PrefixHasher() {
    {
      std::lock_guard guard(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  PrefixHasher(const PrefixHasher&) = delete;
  PrefixHasher& operator=(const PrefixHasher&) = delete;

  // Bytes [0, end) are in the file.
  void written(uint64_t end) {
    {
      std::lock_guard guard(mutex_);
      if (end <= available_) return;
      available_ = end;
    }
    wake_.notify_all();
  }
  // `block`, just written at `at`: hashed from memory when it continues the
  // hashed prefix (no read back), returned through spare() afterwards. A
  // block that cannot be queued (the queue is full, or it lies elsewhere) is
  // simply dropped: the bytes are read back from the file instead.
  void feed(std::vector<std::byte> block, uint64_t at) {
    {
      std::lock_guard guard(mutex_);
      if (queue_.size() >= kMaxQueued) return;
      queue_.push_back({std::move(block), at, generation_});
    }
    wake_.notify_all();
  }
  // An emptied buffer of an earlier feed() (capacity kept), or an empty one.
  std::vector<std::byte> spare() {
    std::lock_guard guard(mutex_);
    if (spares_.empty()) return {};
    std::vector<std::byte> buffer = std::move(spares_.back());
    spares_.pop_back();
    return buffer;
  }

  // The file was emptied: start again from its first byte.
  void reset() {
    std::lock_guard guard(mutex_);
    ++generation_;  // the thread starts a fresh hash when it sees this
    queue_.clear();
    hashed_ = available_ = 0;
    failed_ = false;
  }
  // The hash of [0, size) once hashed (nullopt if a read failed).
  std::optional<std::string> finish(uint64_t size) {
    if (size == 0) return sha256_hex("");
    written(size);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return hashed_ >= size || failed_; });
    if (failed_ || hashed_ != size) return std::nullopt;
    return hash_->hex();
  }

 private:
  void run() {
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

  // Under mutex_.
  void recycle(std::vector<std::byte> bytes) {
    bytes.clear();
    if (spares_.size() < kMaxQueued) spares_.push_back(std::move(bytes));
  }

  struct Queued {
    std::vector<std::byte> bytes;
    uint64_t at;
    uint64_t generation;
  };
  static constexpr size_t kMaxQueued = 8;
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

// One entry being filled, under its lock: the part file, what it holds, the
// requests that fill it. fetch() fills all of it; a RemoteFile the ranges asked for.
class Filler {
 public:
  Filler(fs::path dir, ParsedUrl parsed, std::string expected, CacheRecord record, const FetchOptions& options,
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
  ~Filler() {
    hasher_.reset();  // its thread reads fd_
    if (fd_ >= 0) ::close(fd_);
  }
  Filler(const Filler&) = delete;
  Filler& operator=(const Filler&) = delete;

  const CacheRecord& record() const { return record_; }
  uint64_t transferred() const { return transferred_; }
  void set_progress(ProgressBar* bar) { progress_ = bar; }
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
    const std::optional<std::string> streamed = hasher_->finish(*record_.size);
    const std::string actual = streamed ? *streamed : hash_file();
    std::string expected = expected_;
    if (expected.empty() && !is_offline(options_)) expected = sibling_hash(client_, parsed_.url, stall_);
    if ((!expected.empty() && actual != expected)) {
      lock.remove_entry();
      throw Error(ErrorCode::kCorrupt, "sha256 mismatch: expected " + expected + ", got " + actual +
                                           " (the download was discarded)",
                  {.path = parsed_.url});
    }
    try {
      check_hash_prefix(parsed_, actual, options_);
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

 private:
  enum class Outcome { kDone, kRetry, kRestart };

  // Empties the part file and the record (a changed or unusable file).
  void reset() {
    record_.ranges.clear();
    record_.size.reset();
    record_.etag.clear();
    record_.last_modified.clear();
    hasher_->reset();
    if (::ftruncate(fd_, 0) != 0) throw_io(part_path(dir_, record_), "cannot empty the download", errno);
  }

  // Received bytes for `position` go to the file in pieces of kWriteBlock
  // (fewer calls, and the page cache holds the file as a local write's in
  // large pieces: reading the cached file is then as fast as a local one).
  void stage(std::span<const std::byte> bytes, uint64_t position) {
    if (!pending_.empty() && pending_at_ + pending_.size() != position) flush_pending();
    if (pending_.empty()) {
      pending_.reserve(kWriteBlock);
      pending_at_ = position;
    }
    pending_.insert(pending_.end(), bytes.begin(), bytes.end());
    if (pending_.size() >= kWriteBlock) flush_pending();
  }

  // Writes what stage() holds; it is then held by the file (the record's
  // ranges, the hasher's prefix) and its writeback starts.
  void flush_pending() {
    if (pending_.empty()) return;
    write_download(fd_, pending_, pending_at_, part_path(dir_, record_));
    const uint64_t end = pending_at_ + pending_.size();
    record_.ranges.add({pending_at_, end});
    hasher_->feed(std::move(pending_), pending_at_);  // hashed from memory, not read back
    pending_ = hasher_->spare();
    pending_.clear();
    note_prefix();
    // No early writeback (sync_file_range) here: on a disk slower than the
    // network it would hold the transfer to the disk's pace; the background
    // commit (BackgroundCommits) syncs the file after fetch() returns.
  }

  // Hands the held prefix [0, n) to the hasher.
  void note_prefix() {
    const auto& held = record_.ranges.ranges();
    if (!held.empty() && held.front().begin == 0) hasher_->written(held.front().end);
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
        hasher_->reset();
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

  std::string hash_file() {
    Sha256 hash;
    std::vector<std::byte> buffer(size_t{4} << 20);
    uint64_t offset = 0;
    while (offset < *record_.size) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), *record_.size - offset));
      const ssize_t got = ::pread(fd_, buffer.data(), want, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) throw_io(part_path(dir_, record_), "cannot read the download back", got < 0 ? errno : EIO, offset);
      hash.update(std::span(buffer.data(), static_cast<size_t>(got)));
      offset += static_cast<uint64_t>(got);
    }
    return hash.hex();
  }

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

// The expected hash: the argument's, else the fragment's; both given must agree.
std::string expected_hash(const ParsedUrl& parsed, const FetchOptions& options) {
  std::string given = options.sha256;
  if (!given.empty() && !is_sha256_hex(given)) {
    throw Error(ErrorCode::kInvalidArgument, "sha256 '" + given + "' is not 64 hex digits", {.path = parsed.url});
  }
  given = lower(given);
  if (!given.empty() && !parsed.fragment_sha256.empty() && given != parsed.fragment_sha256) {
    throw Error(ErrorCode::kInvalidArgument,
                "sha256 " + given + " disagrees with the URL's #sha256=" + parsed.fragment_sha256, {.path = parsed.url});
  }
  return given.empty() ? parsed.fragment_sha256 : given;
}

CacheRecord fresh_record(const ParsedUrl& parsed) {
  CacheRecord record;
  record.url = parsed.url;
  record.file = parsed.file_name;
  return record;
}

}  // namespace

// ------------------------------------------------------------------ ranges

void RangeSet::add(ByteRange range) {
  if (range.end <= range.begin) return;
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), range,
                             [](const ByteRange& a, const ByteRange& b) { return a.end < b.begin; });
  // `it` is the first range that ends at or after range.begin: merge from there.
  auto last = it;
  while (last != ranges_.end() && last->begin <= range.end) {
    range.begin = std::min(range.begin, last->begin);
    range.end = std::max(range.end, last->end);
    ++last;
  }
  it = ranges_.erase(it, last);
  ranges_.insert(it, range);
}

std::vector<ByteRange> RangeSet::missing(ByteRange range) const {
  std::vector<ByteRange> gaps;
  uint64_t at = range.begin;
  for (const ByteRange& held : ranges_) {
    if (held.end <= at) continue;
    if (held.begin >= range.end) break;
    if (held.begin > at) gaps.push_back({at, held.begin});
    at = std::max(at, held.end);
    if (at >= range.end) break;
  }
  if (at < range.end) gaps.push_back({at, range.end});
  return gaps;
}

uint64_t RangeSet::covered() const {
  uint64_t total = 0;
  for (const ByteRange& range : ranges_) total += range.size();
  return total;
}

std::vector<ByteRange> coalesce(std::vector<ByteRange> ranges, uint64_t max_gap) {
  std::erase_if(ranges, [](const ByteRange& range) { return range.end <= range.begin; });
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  std::vector<ByteRange> merged;
  for (const ByteRange& range : ranges) {
    if (!merged.empty() && range.begin <= merged.back().end + max_gap) {
      merged.back().end = std::max(merged.back().end, range.end);
    } else {
      merged.push_back(range);
    }
  }
  return merged;
}

// --------------------------------------------------------------------- URLs

ParsedUrl parse_url(std::string_view url) {
  ParsedUrl parsed;
  const size_t hash = url.find('#');
  parsed.url = std::string(url.substr(0, hash));
  if (hash != std::string_view::npos) {
    const std::string_view fragment = url.substr(hash + 1);
    if (fragment.rfind("sha256=", 0) == 0) {
      const std::string_view digest = fragment.substr(7);
      if (!is_sha256_hex(digest)) {
        throw Error(ErrorCode::kInvalidArgument, "the URL's #sha256= is not 64 hex digits", {.path = parsed.url});
      }
      parsed.fragment_sha256 = lower(std::string(digest));
    }
  }
  std::string_view path = parsed.url;
  if (const size_t scheme = path.find("://"); scheme != std::string_view::npos) path.remove_prefix(scheme + 3);
  path = path.substr(0, path.find_first_of("?"));
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
  for (char c : name) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == '-';
    parsed.file_name += plain ? c : '_';
  }
  if (parsed.file_name.empty() || parsed.file_name == "." || parsed.file_name == "..") parsed.file_name = "download";
  // torch.hub: HASH_REGEX = re.compile(r'-([a-f0-9]*)\.'), its first match.
  for (size_t dash = parsed.file_name.find('-'); dash != std::string::npos; dash = parsed.file_name.find('-', dash + 1)) {
    size_t end = dash + 1;
    while (end < parsed.file_name.size() &&
           ((parsed.file_name[end] >= 'a' && parsed.file_name[end] <= 'f') ||
            (parsed.file_name[end] >= '0' && parsed.file_name[end] <= '9'))) {
      ++end;
    }
    if (end < parsed.file_name.size() && parsed.file_name[end] == '.') {
      parsed.hash_prefix = parsed.file_name.substr(dash + 1, end - dash - 1);
      break;
    }
  }
  return parsed;
}

// --------------------------------------------------------------- RemoteFile

struct RemoteFile::State {
  fs::path dir;
  ParsedUrl parsed;
  std::string expected;
  FetchOptions options;
  std::mutex mutex;
  CacheRecord record;
  HttpClient client;
  uint64_t transferred = 0;
};

RemoteFile::RemoteFile(std::unique_ptr<State> state) : state_(std::move(state)) {
  url_ = state_->parsed.url;
  size_ = state_->record.size.value_or(0);
}

std::filesystem::path RemoteFile::path() const {
  std::lock_guard guard(state_->mutex);
  return state_->record.complete ? final_path(state_->dir, state_->record) : part_path(state_->dir, state_->record);
}

RemoteFile::~RemoteFile() = default;

std::shared_ptr<RemoteFile> RemoteFile::open(std::string_view url, const FetchOptions& options, uint64_t head) {
  auto state = std::make_unique<State>();
  state->parsed = parse_url(url);
  state->expected = expected_hash(state->parsed, options);
  state->options = options;
  const fs::path root = cache_root();
  if (auto found = find_complete(root, state->parsed.url, state->expected)) {
    check_hash_prefix(state->parsed, found->second.sha256, options);
    state->dir = found->first;
    state->record = std::move(found->second);
    return std::shared_ptr<RemoteFile>(new RemoteFile(std::move(state)));
  }
  state->dir = root / entry_key(state->parsed.url, state->expected);
  EntryLock lock(state->dir);
  std::optional<CacheRecord> record = read_record(state->dir);
  if (!record || record->url != state->parsed.url) record = fresh_record(state->parsed);
  if (usable(state->dir, *record)) {
    state->record = std::move(*record);
    return std::shared_ptr<RemoteFile>(new RemoteFile(std::move(state)));
  }
  if (record->complete) record = fresh_record(state->parsed);  // its file is gone
  const bool have_head = record->size && record->ranges.covers({0, std::min(head, *record->size)});
  if (!have_head) {
    if (is_offline(options)) {
      lock.remove_entry();
      remote_error(state->parsed.url, "offline (CKPT_OFFLINE) and not in the cache (" + root.string() + ")");
    }
    Filler filler(state->dir, state->parsed, state->expected, std::move(*record), state->options, state->client);
    filler.set_refuse_changes(true);
    try {
      filler.fill(std::vector<ByteRange>{{0, head}});
    } catch (...) {
      if (filler.record().ranges.ranges().empty()) lock.remove_entry();
      throw;
    }
    state->transferred = filler.transferred();
    if (filler.record().size && filler.record().ranges.covers({0, *filler.record().size})) {
      filler.finish(lock);  // small, or the server sent it all
    } else {
      filler.persist();
    }
    record = filler.record();
  }
  state->record = std::move(*record);
  return std::shared_ptr<RemoteFile>(new RemoteFile(std::move(state)));
}

bool RemoteFile::complete() const {
  std::lock_guard guard(state_->mutex);
  return state_->record.complete;
}

uint64_t RemoteFile::transferred() const {
  std::lock_guard guard(state_->mutex);
  return state_->transferred;
}

void RemoteFile::ensure(std::vector<ByteRange> ranges) {
  State& state = *state_;
  std::lock_guard guard(state.mutex);
  if (state.record.complete) return;
  for (ByteRange& range : ranges) range.end = std::min(range.end, size_);
  ranges = coalesce(std::move(ranges), kCoalesceGap);
  const auto all_held = [&](const RangeSet& held) {
    return std::all_of(ranges.begin(), ranges.end(), [&](const ByteRange& range) { return held.covers(range); });
  };
  if (all_held(state.record.ranges)) return;
  EntryLock lock(state.dir);
  // Another process may have fetched some of it meanwhile.
  std::optional<CacheRecord> record = read_record(state.dir);
  if (record && record->url == state.record.url && record->size == state.record.size &&
      record->etag == state.record.etag) {
    if (record->complete) {
      state.record = std::move(*record);
      return;
    }
    for (const ByteRange& range : state.record.ranges.ranges()) record->ranges.add(range);
  } else {
    record = state.record;
  }
  if (all_held(record->ranges)) {
    state.record = std::move(*record);
    return;
  }
  if (is_offline(state.options)) {
    remote_error(state.parsed.url, "offline (CKPT_OFFLINE): the bytes asked for are not in the cache");
  }
  Filler filler(state.dir, state.parsed, state.expected, std::move(*record), state.options, state.client);
  filler.set_refuse_changes(true);
  try {
    filler.fill(ranges);
  } catch (...) {
    state.transferred += filler.transferred();
    state.record = filler.record();
    filler.persist();
    throw;
  }
  state.transferred += filler.transferred();
  if (filler.record().ranges.covers({0, size_})) {
    filler.finish(lock);
  } else {
    filler.persist();
  }
  state.record = filler.record();
}

void RemoteFile::forget(ByteRange range) {
  State& state = *state_;
  std::lock_guard guard(state.mutex);
  if (state.record.complete) return;
  EntryLock lock(state.dir);
  RangeSet kept;
  for (const ByteRange& held : state.record.ranges.ranges()) {
    if (held.end <= range.begin || held.begin >= range.end) {
      kept.add(held);
      continue;
    }
    if (held.begin < range.begin) kept.add({held.begin, range.begin});
    if (held.end > range.end) kept.add({range.end, held.end});
  }
  state.record.ranges = kept;
  std::optional<CacheRecord> record = read_record(state.dir);
  if (record && record->url == state.record.url && !record->complete) {
    record->ranges = kept;
    write_record(state.dir, *record);
  }
}

}  // namespace detail

// ---------------------------------------------------------------- public API

bool is_url(std::string_view text) {
  const auto starts = [&](std::string_view scheme) {
    if (text.size() < scheme.size()) return false;
    for (size_t i = 0; i < scheme.size(); ++i) {
      char c = text[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != scheme[i]) return false;
    }
    return true;
  };
  return starts("http://") || starts("https://");
}

std::filesystem::path cache_directory() { return detail::cache_root(); }

std::filesystem::path fetch(std::string_view url, const FetchOptions& options) {
  using namespace detail;
  const ParsedUrl parsed = parse_url(url);
  const std::string expected = expected_hash(parsed, options);
  const fs::path root = cache_root();
  const std::string memo_key = root.string() + '\n' + parsed.url + '\n' + expected;
  if (std::optional<CompleteEntry> hit = remembered(memo_key)) {
    check_hash_prefix(parsed, hit->sha256, options);
    return hit->path;
  }
  if (auto found = find_complete(root, parsed.url, expected)) {
    check_hash_prefix(parsed, found->second.sha256, options);
    const fs::path path = final_path(found->first, found->second);
    remember(memo_key, {path, *found->second.size, found->second.sha256});
    return path;
  }
  const fs::path dir = root / entry_key(parsed.url, expected);
  if (is_offline(options)) {
    remote_error(parsed.url, "offline (CKPT_OFFLINE) and not in the cache (" + root.string() + ")");
  }
  EntryLock lock(dir);
  std::optional<CacheRecord> record = read_record(dir);
  if (!record || record->url != parsed.url) record = fresh_record(parsed);
  if (usable(dir, *record)) {  // another process fetched it while this one waited
    check_hash_prefix(parsed, record->sha256, options);
    return final_path(dir, *record);
  }
  if (record->complete) record = fresh_record(parsed);
  HttpClient client;
  Filler filler(dir, parsed, expected, std::move(*record), options, client);
  ProgressBar bar(parsed.file_name, progress_enabled(options.progress));
  filler.set_progress(&bar);
  try {
    filler.fill(std::nullopt);
  } catch (const Error& error) {
    if (filler.record().ranges.ranges().empty()) {
      lock.remove_entry();  // nothing to resume: leave no empty entry behind
    } else {
      filler.persist();
    }
    throw;
  }
  bar.finish();
  // The file is renamed into place now and made durable on a background
  // thread (its record says complete only then): the caller does not wait
  // for the disk to absorb what the network delivered.
  CacheRecord done = filler.finish(lock, /*sync_now=*/false);
  const fs::path path = final_path(dir, done);
  remember(memo_key, {path, *done.size, done.sha256});
  BackgroundCommits::instance().run(std::move(lock), dir, std::move(done));
  return path;
}

std::filesystem::path resolve_local(const std::filesystem::path& path, const FetchOptions& options) {
  if (!is_url(path.native())) return path;
  return fetch(path.native(), options);
}

std::vector<CacheEntry> cache_entries() {
  using namespace detail;
  BackgroundCommits::instance().wait();
  const fs::path root = cache_root();
  std::vector<CacheEntry> entries;
  std::error_code error;
  if (!fs::exists(root, error)) return entries;
  fs::directory_iterator it(root, error);
  if (error) throw_io(root, "cannot list the cache", error.value());
  for (const auto& child : it) {
    const std::optional<CacheRecord> record = read_record(child.path());
    if (!record) continue;
    CacheEntry entry;
    entry.url = record->url;
    entry.complete = usable(child.path(), *record);
    entry.path = entry.complete ? final_path(child.path(), *record) : part_path(child.path(), *record);
    entry.size = record->size.value_or(0);
    entry.sha256 = entry.complete ? record->sha256 : "";
    entry.etag = record->etag;
    entry.last_modified = record->last_modified;
    entry.time = record->time;
    entry.present = entry.complete ? entry.size : record->ranges.covered();
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.url != b.url ? a.url < b.url : a.path < b.path;
  });
  return entries;
}

namespace {

// Removes the entries for which `pick` is true (given the record, nullopt
// for a directory without a readable one). Returns how many.
template <class Pick>
size_t remove_entries(Pick&& pick) {
  namespace fs = std::filesystem;
  detail::BackgroundCommits::instance().wait();
  const fs::path root = detail::cache_root();
  std::error_code error;
  if (!fs::exists(root, error)) return 0;
  std::vector<fs::path> dirs;
  for (const auto& child : fs::directory_iterator(root, error)) {
    if (child.is_directory(error)) dirs.push_back(child.path());
  }
  size_t removed = 0;
  for (const fs::path& dir : dirs) {
    if (!pick(detail::read_record(dir))) continue;
    detail::EntryLock lock(dir);
    if (!pick(detail::read_record(dir))) continue;
    lock.remove_entry();
    ++removed;
  }
  return removed;
}

}  // namespace

size_t cache_remove(std::string_view url) {
  const std::string bare(url.substr(0, url.find('#')));  // any fragment, valid or not
  return remove_entries([&](const std::optional<detail::CacheRecord>& record) { return record && record->url == bare; });
}

size_t cache_clear() {
  return remove_entries([](const std::optional<detail::CacheRecord>&) { return true; });
}

}  // namespace ckpt
