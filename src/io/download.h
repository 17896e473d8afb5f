#pragma once
// Filling one cache entry over HTTP (io/http.h): the requests for what the
// entry lacks (the whole file, or ranges of it), retries with backoff,
// resumption and restarts, the SHA-256 computed beside the transfer, and the
// checks that decide whether a download enters the cache. fetch() and
// RemoteFile (url_cache.h) drive it, holding the entry's lock. Knows no format.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/url.h"
#include "io/cache_entry.h"
#include "io/http.h"
#include "io/progress.h"
#include "io/url_cache.h"

namespace ckpt::detail {

// torch.hub's check_hash (FetchOptions::check_hash_prefix): Error{kCorrupt}
// naming the URL when `actual` does not start with the name's hash prefix.
void check_hash_prefix(const ParsedUrl& parsed, const std::string& actual, const FetchOptions& options);

// One entry being filled, under its lock: the part file, what it holds, the
// requests that fill it. fetch() fills all of it; a RemoteFile the ranges
// asked for. What the record says is held must be in the part file, and the
// record must be of this boot (boot_id()): else it starts over.
class Filler {
 public:
  // Opens (creates) the entry's part file. `options` and `client` must
  // outlive the Filler. Throws Error{kIo}.
  Filler(std::filesystem::path dir, ParsedUrl parsed, std::string expected, CacheRecord record,
         const FetchOptions& options, HttpClient& client);
  ~Filler();
  Filler(const Filler&) = delete;
  Filler& operator=(const Filler&) = delete;

  const CacheRecord& record() const;
  // Bytes received from the server by this Filler.
  uint64_t transferred() const;
  void set_progress(ProgressBar* bar);
  // Lazy opens refuse a file that changed under them (Error{kRemote}); fetch() starts again.
  void set_refuse_changes(bool refuse);
  // No hash while the bytes arrive (before fill()): for a download that has
  // no hash to check, whose finish(lock, false) then leaves the record's
  // sha256 empty for commit_in_background() to compute. A hash that turns
  // up at finish() (the server's sibling .sha256) is computed then, from
  // the file.
  void defer_hash();

  // Fetches what `wanted` lacks (nullopt: the whole file). Without a known
  // size, the first request asks for wanted's first range and learns the
  // size from the answer. Throws Error{kRemote} as fetch() documents.
  void fill(std::optional<std::vector<ByteRange>> wanted);
  // Records what is held, for a successor in this boot.
  void persist();
  // The whole file is held: hashes it, checks the hash (the caller's, else
  // the server's sibling .sha256) and the hash prefix, and moves it into
  // place; a wrong file is removed with its record (`lock`'s entry) and
  // Error{kCorrupt} thrown. Returns the entry's record as complete. With
  // `sync_now`, the file is synced before its rename and the record written
  // (commit_complete()); else the caller commits it later
  // (commit_in_background()), and until then the entry reads as incomplete;
  // after defer_hash(), with nothing to check, its sha256 is left empty.
  CacheRecord finish(EntryLock& lock, bool sync_now = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ckpt::detail
