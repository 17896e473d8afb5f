#pragma once
// One entry of the URL cache on disk (docs/urls.md, "The cache"): where the
// cache is, an entry's directory and record (entry.json), its lock, and the
// commit that makes a verified download complete. Knows no format.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "ckpt/url.h"
#include "io/url_cache.h"

namespace ckpt::detail {

inline constexpr const char* kRecordName = "entry.json";
inline constexpr const char* kLockName = ".lock";
inline constexpr const char* kPartFolder = "part";

// The environment's settings: the text of `name` ("" when unset); a
// non-negative number (Error{kInvalidArgument} naming the variable for any
// other text); offline as FetchOptions::offline, else CKPT_OFFLINE.
std::string env_text(const char* name);
double env_number(const char* name, double fallback);
bool is_offline(const FetchOptions& options);
// `text` with A-Z lowered (hex digests, as the cache keeps them).
std::string ascii_lower(std::string text);
// Throws Error{kRemote, message} naming `url`.
[[noreturn]] void remote_error(const std::string& url, const std::string& message);
// Seconds since the epoch, now.
double wall_seconds();
// This boot of the machine (the kernel's random boot_id): a record written in
// another boot may claim bytes that never reached the disk (the download's
// data is synced only when it completes).
const std::string& boot_id();

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

// The record of the entry at `dir`; nullopt when it has none or it is
// damaged (an entry without a readable record holds nothing usable).
std::optional<CacheRecord> read_record(const std::filesystem::path& dir);
// `durable`: synced (a complete entry's record); else only renamed into place
// (an incomplete one's, which only this boot trusts: boot_id()).
void write_record(const std::filesystem::path& dir, const CacheRecord& record, bool durable = true);
// The entry's file once complete, and while it is filled.
std::filesystem::path final_path(const std::filesystem::path& dir, const CacheRecord& record);
std::filesystem::path part_path(const std::filesystem::path& dir, const CacheRecord& record);
// A complete entry whose file is there, of its recorded size.
bool usable(const std::filesystem::path& dir, const CacheRecord& record);

// The lock of one entry: flock(LOCK_EX) on "<entry>/.lock", taken by the
// constructor (the entry's directory created if need be). A remover unlinks
// the lock with the entry while holding it; a waiter that then gets the lock
// of an unlinked file sees that its name no longer names it and starts
// again. Throws Error{kIo} if the directory or lock cannot be made.
class EntryLock {
 public:
  explicit EntryLock(std::filesystem::path dir);
  ~EntryLock();
  EntryLock(EntryLock&& other) noexcept : dir_(std::move(other.dir_)), fd_(other.fd_) { other.fd_ = -1; }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

  // Removes the entry, lock included (the lock is still held until destruction).
  void remove_entry() noexcept;

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
};

// The cache directory: $CKPT_CACHE, else $XDG_CACHE_HOME/ckpt, else
// $HOME/.cache/ckpt (ckpt::cache_directory()).
std::filesystem::path cache_root();
// The entry's directory name: by URL and, when the caller gives one, the expected hash.
std::string entry_key(const std::string& url, const std::string& expected);

// Makes a complete entry's file durable (unless `synced` already) and then
// its record: only a durable file is ever recorded complete.
void commit_complete(const std::filesystem::path& dir, const CacheRecord& done, bool synced);

// commit_complete(dir, done, false) on a thread of its own, holding `lock`
// until the record is written (another process waits for it, then finds the
// entry complete; on a failure the entry stays incomplete). The process's
// exit waits for those still running; a process that dies first leaves the
// entry incomplete, and its record of this boot has it fetched again.
void commit_in_background(EntryLock lock, std::filesystem::path dir, CacheRecord done);
// Waits for every commit this process began so far.
void wait_for_background_commits();

}  // namespace ckpt::detail
