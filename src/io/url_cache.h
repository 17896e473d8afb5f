#pragma once
// The URL cache's pieces that the checkpoint layer's lazy remote opens use
// (ckpt/url.h has the public side: fetch, the cache's listing): the byte
// ranges an entry holds, and RemoteFile, an entry filled piece by piece.
// Knows no format. docs/urls.md has the layout of an entry.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/url.h"

namespace ckpt::detail {

// Bytes [begin, end) of a file.
struct ByteRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  bool operator==(const ByteRange&) const = default;
};

// Disjoint, sorted, non-empty ranges (touching ones merged).
class RangeSet {
 public:
  void add(ByteRange range);
  void clear() { ranges_.clear(); }
  // The parts of `range` that are not held, in order.
  std::vector<ByteRange> missing(ByteRange range) const;
  bool covers(ByteRange range) const { return missing(range).empty(); }
  uint64_t covered() const;
  const std::vector<ByteRange>& ranges() const { return ranges_; }

 private:
  std::vector<ByteRange> ranges_;
};

// `ranges` sorted and merged where they overlap, touch or lie at most
// `max_gap` bytes apart (one request instead of several); empty ones dropped.
std::vector<ByteRange> coalesce(std::vector<ByteRange> ranges, uint64_t max_gap);

// A URL taken apart: the URL without its fragment, the "#sha256=<hex>" of
// the fragment (lower case; empty if none), the file name for the cache
// (the last component of the path, query dropped, characters other than
// [A-Za-z0-9._-] replaced by '_'; "download" if that leaves nothing) and
// torch.hub's hash prefix of that name ("<stem>-<hex>.<ext>"; empty if none).
struct ParsedUrl {
  std::string url;
  std::string fragment_sha256;
  std::string file_name;
  std::string hash_prefix;
};
// Throws Error{kInvalidArgument} for a fragment "sha256=" that is not 64 hex digits.
ParsedUrl parse_url(std::string_view url);

// One cache entry filled piece by piece (a lazy remote open): a sparse file
// of the full size, and the ranges of it that have arrived (the entry's
// record keeps them, so another process or a later fetch() goes on from
// there). Thread-safe.
class RemoteFile {
 public:
  // Opens `url`'s entry: with a complete entry, that file (nothing is
  // requested); else the entry's sparse file, after fetching its first
  // `head` bytes with one range request when they are not held yet (a
  // server that ignores ranges sends the whole file: the entry is then
  // complete). Throws as fetch() does.
  static std::shared_ptr<RemoteFile> open(std::string_view url, const FetchOptions& options, uint64_t head);
  ~RemoteFile();

  const std::string& url() const { return url_; }
  // The file to map (full size; bytes not yet held read as zeros): the
  // entry's sparse file, or its final file once complete (the same inode).
  std::filesystem::path path() const;
  uint64_t size() const { return size_; }
  bool complete() const;
  // Makes the bytes of every range held, fetching what is missing with range
  // requests (neighbours within 64 KiB coalesced into one; If-Range with the
  // file's ETag). When the file becomes whole, it is hashed and checked as
  // fetch() checks a download, and the entry becomes complete. Throws as
  // fetch(); Error{kRemote} if the file changed on the server since its head
  // was read.
  void ensure(std::vector<ByteRange> ranges);
  // Marks `range` as not held (its bytes failed a check): fetched again next time.
  void forget(ByteRange range);
  // Bytes received from the server by this object (the head included).
  uint64_t transferred() const;

 private:
  struct State;
  explicit RemoteFile(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  std::string url_;
  uint64_t size_ = 0;
};

}  // namespace ckpt::detail
