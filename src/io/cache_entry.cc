#include "io/cache_entry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "io/atomic_file.h"
#include "io/file_system.h"
#include "io/sha256.h"
#include "io/sha256.h"

namespace ckpt::detail {

namespace fs = std::filesystem;

// ------------------------------------------------------------ environment

std::string env_text(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

namespace {

bool env_true(const char* name) {
  const std::string value = env_text(name);
  return value == "1" || value == "true" || value == "yes" || value == "on" || value == "TRUE" || value == "True";
}

}  // namespace

double env_number(const char* name, double fallback) {
  const std::string value = env_text(name);
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

std::string ascii_lower(std::string text) {
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


namespace {

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

}  // namespace

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
void write_record(const fs::path& dir, const CacheRecord& record, bool durable) {
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

EntryLock::EntryLock(fs::path dir) : dir_(std::move(dir)) {
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

EntryLock::~EntryLock() {
  if (fd_ >= 0) ::close(fd_);
}

void EntryLock::remove_entry() noexcept {
  std::error_code error;
  fs::remove_all(dir_ / kPartFolder, error);
  fs::remove(dir_ / kRecordName, error);
  for (const auto& child : fs::directory_iterator(dir_, error)) {
    if (child.path().filename() != kLockName) fs::remove_all(child.path(), error);
  }
  fs::remove(dir_ / kLockName, error);
  fs::remove(dir_, error);
}


// --------------------------------------------------------------- the cache

fs::path cache_root() {
  if (std::string dir = env_text("CKPT_CACHE"); !dir.empty()) return dir;
  if (std::string dir = env_text("XDG_CACHE_HOME"); !dir.empty()) return fs::path(dir) / "ckpt";
  if (std::string home = env_text("HOME"); !home.empty()) return fs::path(home) / ".cache" / "ckpt";
  throw Error(ErrorCode::kInvalidArgument, "no cache directory: set CKPT_CACHE (or XDG_CACHE_HOME or HOME)");
}

// Entries are keyed by URL and, when the caller gives one, the expected hash.
std::string entry_key(const std::string& url, const std::string& expected) {
  return sha256_hex(expected.empty() ? url : url + "\nsha256=" + expected).substr(0, 32);
}

// Makes a complete entry's file durable (unless `synced` already) and then
// its record: only a durable file is ever recorded complete.
void commit_complete(const fs::path& dir, const CacheRecord& done, bool synced) {
  const fs::path path = final_path(dir, done);
  if (!synced) sync_file(path);
  write_record(dir, done);
  std::error_code ignored;
  fs::remove(dir / kPartFolder, ignored);
}

namespace {

// The commits of downloads that fetch() returned before their file reached
// the disk: each on a thread of its own, holding its entry's lock (another
// process waits for it, then finds the entry complete). The process's exit
// waits for those still running (this object's destructor); a process that
// dies first leaves the entry incomplete, and its record of this boot has
// it fetched again.
// The SHA-256 of a complete entry's file, read back from the cache (a
// download whose hash was deferred). Throws Error{kIo}.
std::string hash_of_entry(const fs::path& dir, const CacheRecord& done) {
  const fs::path path = final_path(dir, done);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io(path, "cannot open the download to hash it", errno);
  try {
    std::string hex = sha256_of_file(fd, done.size.value_or(0), path);
    ::close(fd);
    return hex;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

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
        [lock = std::make_shared<EntryLock>(std::move(lock)), dir = std::move(dir), done = std::move(done), done_flag]() mutable {
          try {
            if (done.sha256.empty()) done.sha256 = hash_of_entry(dir, done);  // a deferred hash
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

}  // namespace

void commit_in_background(EntryLock lock, fs::path dir, CacheRecord done) {
  BackgroundCommits::instance().run(std::move(lock), std::move(dir), std::move(done));
}

void wait_for_background_commits() { BackgroundCommits::instance().wait(); }

}  // namespace ckpt::detail
