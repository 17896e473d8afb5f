#pragma once
// Checkpoints named by URL: an http(s) URL is downloaded once into a local
// cache, verified by SHA-256, and then opened like any local file
// (ckpt::open, load, detect and verify take URLs where they take paths).
// Knows no format; docs/urls.md has the cache layout and the rules.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

// True if `text` names an http:// or https:// URL (the scheme compared
// without regard to case); paths are everything else.
bool is_url(std::string_view text);

// Whether a download draws a progress bar (bytes, rate, ETA) on stderr.
enum class Progress {
  kAuto,    // the environment's CKPT_PROGRESS ("1" on, "0" off), else only when stderr is a terminal
  kAlways,  // draw it (`--progress`)
  kNever,   // never (`--quiet`)
};

struct FetchOptions {
  // The expected SHA-256 of the whole file, 64 hex digits (either case);
  // empty: a "#sha256=<hex>" fragment of the URL, else the first word of a
  // sibling "<URL>.sha256" on the server (none there: the file is taken
  // unverified; its hash is still recorded). Two sources that disagree are
  // an Error{kInvalidArgument}.
  std::string sha256;
  // torch.hub's check_hash: a file named "<stem>-<hex>.<ext>" (the last
  // component of the URL's path) must have a SHA-256 that starts with <hex>.
  bool check_hash_prefix = false;
  // Use only the cache: an entry that is absent is an Error{kRemote} and
  // nothing is requested. nullopt: the environment's CKPT_OFFLINE ("1",
  // "true", "yes" and "on" mean offline).
  std::optional<bool> offline;
  Progress progress = Progress::kAuto;
};

// The local path of `url`'s verified file in the cache, downloading it when
// the cache has no complete entry (see cache_directory()). The download
// goes to a temporary file in the entry's directory; it is renamed to its
// final name only after its size and hash check out, so a wrong file never
// enters the cache. It is synced to the disk on a background thread after
// fetch() returns (the caller reads it from memory meanwhile), and its
// record says complete only then: another process waits for that on the
// entry's lock, and this process's exit waits for it. One process downloads an entry at a time (an flock on
// the entry); a second waits and then finds it cached. An interrupted
// download (a cut connection, a killed process) resumes with a range
// request where the server allows it and the file has not changed (its
// ETag or Last-Modified, sent as If-Range), else starts again. 5xx, 408 and
// 429 answers and cut or reset connections are retried with backoff
// (CKPT_FETCH_RETRIES, default 4, counted again whenever more of the file
// has arrived than ever before; first delay CKPT_FETCH_BACKOFF seconds,
// default 0.25, doubling). A transfer that moves no byte for
// CKPT_FETCH_TIMEOUT seconds (default 30) is a timeout: not retried (what
// arrived is kept; the next call resumes from there).
// Throws Error{kCorrupt} naming the URL, the expected and the actual hash for
// a wrong hash; Error{kRemote} naming the URL for everything the transfer
// can meet (an HTTP 4xx or, after the retries, 5xx status; a host that does
// not resolve; a refused connection; a TLS failure; a timeout; offline and
// not cached); Error{kInvalidArgument} for a malformed sha256; {kIo} when
// the cache cannot be written.
std::filesystem::path fetch(std::string_view url, const FetchOptions& options = {});

// `path` itself when it is not a URL; else fetch(path, options).
std::filesystem::path resolve_local(const std::filesystem::path& path, const FetchOptions& options = {});

// The cache: $CKPT_CACHE, else $XDG_CACHE_HOME/ckpt, else $HOME/.cache/ckpt
// (read at each call). Created on first use.
std::filesystem::path cache_directory();

// One entry of the cache, as its record (entry.json) says.
struct CacheEntry {
  std::string url;            // without the fragment
  std::filesystem::path path;  // the cached file
  uint64_t size = 0;          // the file's full size
  std::string sha256;         // of the whole file; empty while incomplete
  std::string etag;           // as the server sent it; empty if none
  std::string last_modified;  // likewise
  double time = 0;            // when it was completed (or last extended), seconds since the epoch
  bool complete = false;      // false: pieces of a lazy open only (a sparse file)
  uint64_t present = 0;       // bytes of the file held (== size when complete)
};

// Every entry with a readable record, sorted by URL. Never throws for a
// damaged entry (it is left out); throws Error{kIo} if the cache directory
// exists but cannot be listed.
std::vector<CacheEntry> cache_entries();

// Removes every entry of `url` (its fragment ignored), each under its lock.
// Returns how many were removed (0: none was cached).
size_t cache_remove(std::string_view url);

// Removes every entry of the cache. Returns how many were removed.
size_t cache_clear();

}  // namespace ckpt
