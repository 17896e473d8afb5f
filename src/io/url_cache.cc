#include "io/url_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "ckpt/error.h"
#include "io/cache_entry.h"
#include "io/download.h"
#include "io/file_system.h"
#include "io/http.h"
#include "io/progress.h"
#include "io/sha256.h"

namespace ckpt {
namespace detail {
namespace {

namespace fs = std::filesystem;

// Neighbouring ranges of one ensure() closer than this become one request.
constexpr uint64_t kCoalesceGap = uint64_t{64} << 10;

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

// The expected hash: the argument's, else the fragment's; both given must agree.
std::string expected_hash(const ParsedUrl& parsed, const FetchOptions& options) {
  std::string given = options.sha256;
  if (!given.empty() && !is_sha256_hex(given)) {
    throw Error(ErrorCode::kInvalidArgument, "sha256 '" + given + "' is not 64 hex digits", {.path = parsed.url});
  }
  given = ascii_lower(given);
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
      parsed.fragment_sha256 = ascii_lower(std::string(digest));
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
  // With no hash to check, the hash is computed after the transfer, on the
  // background commit: on two cores, hashing beside the transfer ran it at
  // two thirds of curl's pace on loopback.
  if (expected.empty() && !(options.check_hash_prefix && !parsed.hash_prefix.empty())) filler.defer_hash();
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
  // A deferred hash is the record's once committed: found there, not here.
  if (!done.sha256.empty()) remember(memo_key, {path, *done.size, done.sha256});
  commit_in_background(std::move(lock), dir, std::move(done));
  return path;
}

std::filesystem::path resolve_local(const std::filesystem::path& path, const FetchOptions& options) {
  if (!is_url(path.native())) return path;
  return fetch(path.native(), options);
}

std::vector<CacheEntry> cache_entries() {
  using namespace detail;
  wait_for_background_commits();
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
  detail::wait_for_background_commits();
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
