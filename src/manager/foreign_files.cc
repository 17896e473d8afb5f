#include "manager/foreign_files.h"

#include <simdjson.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <system_error>
#include <tuple>

#include "ckpt/error.h"
#include "formats/orbax/metadata.h"
#include "formats/tf/layout.h"
#include "io/file_system.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;

// An Orbax step record is a few kilobytes; this bounds what a listing reads.
constexpr uintmax_t kMaxStepRecordBytes = 16u << 20;
// orbax.checkpoint.CheckpointManager's METRIC_ITEM_NAME: the item and the
// file its JsonCheckpointHandler writes.
constexpr std::string_view kOrbaxMetricsItem = "metrics";

struct FileFacts {
  uint64_t size = 0;
  double mtime = 0;
};

double seconds(const struct timespec& time) {
  return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_nsec) * 1e-9;
}

// Bytes and newest mtime of `path`: a file's own, a directory's files'
// (and its own mtime), recursively, without following links inside it.
FileFacts facts_of(const fs::path& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) throw_io(path, "cannot examine a checkpoint file", errno);
  FileFacts facts{.size = S_ISREG(info.st_mode) ? static_cast<uint64_t>(info.st_size) : 0,
                  .mtime = seconds(info.st_mtim)};
  if (!S_ISDIR(info.st_mode)) return facts;
  std::error_code error;
  fs::recursive_directory_iterator walk(path, fs::directory_options::none, error);
  if (error) throw_io(path, "cannot list a checkpoint directory", error.value());
  for (; walk != fs::recursive_directory_iterator(); walk.increment(error)) {
    if (error) break;
    struct stat inner;
    if (::lstat(walk->path().c_str(), &inner) != 0) continue;  // removed meanwhile
    if (S_ISREG(inner.st_mode)) facts.size += static_cast<uint64_t>(inner.st_size);
    facts.mtime = std::max(facts.mtime, seconds(inner.st_mtim));
  }
  if (error) throw_io(path, "cannot list a checkpoint directory", error.value());
  return facts;
}

}  // namespace

std::vector<RunEntry> run_entries(const fs::path& run_dir) {
  std::vector<RunEntry> entries;
  std::error_code error;
  fs::directory_iterator walk(run_dir, error);
  if (error) throw_io(run_dir, "cannot list the run directory", error.value());
  for (; walk != fs::directory_iterator(); walk.increment(error)) {
    if (error) break;
    std::error_code ignored;
    entries.push_back({.name = walk->path().filename().string(),
                       .file = walk->is_regular_file(ignored),
                       .directory = walk->is_directory(ignored)});
  }
  if (error) throw_io(run_dir, "cannot list the run directory", error.value());
  std::sort(entries.begin(), entries.end(), [](const RunEntry& a, const RunEntry& b) { return a.name < b.name; });
  return entries;
}

std::optional<int64_t> decimal_number(std::string_view text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

void set_files(CheckpointEntry& entry, std::vector<fs::path> files, std::optional<double> commit_time) {
  entry.size = 0;
  entry.time = 0;
  for (const fs::path& file : files) {
    const FileFacts facts = facts_of(file);
    entry.size += facts.size;
    entry.time = std::max(entry.time, facts.mtime);
  }
  if (commit_time) entry.time = *commit_time;
  entry.files = std::move(files);
}

std::optional<std::vector<fs::path>> tf_bundle_files(const fs::path& prefix, const std::vector<RunEntry>& entries) {
  const std::string name = prefix.filename().string();
  const fs::path directory = prefix.parent_path();
  const auto has_file = [&](const std::string& file) {
    const auto found = std::lower_bound(entries.begin(), entries.end(), file,
                                        [](const RunEntry& entry, const std::string& key) { return entry.name < key; });
    return found != entries.end() && found->name == file && found->file;
  };
  if (!has_file(name + ".index")) return std::nullopt;
  // The shard count: from the first data file's name (DataFilename's
  // "%05d-of-%05d"); every shard of that count must be there.
  std::optional<int64_t> count;
  const std::string data = name + ".data-";
  for (const RunEntry& entry : entries) {
    if (!entry.file || !entry.name.starts_with(data)) continue;
    const std::string_view suffix = std::string_view(entry.name).substr(data.size());
    const size_t of = suffix.find("-of-");
    if (of == std::string_view::npos) continue;
    const auto shard = decimal_number(suffix.substr(0, of));
    const auto total = decimal_number(suffix.substr(of + 4));
    if (!shard || !total || *total < 1 || *shard >= *total || *total > tf_detail::kMaxWriteShards) continue;
    count = *total;
    break;
  }
  if (!count) return std::nullopt;
  std::vector<fs::path> files = {directory / (name + ".index")};
  for (int shard = 0; shard < *count; ++shard) {
    const fs::path path = tf_detail::shard_path(directory / name, shard, static_cast<int>(*count));
    if (!has_file(path.filename().string())) return std::nullopt;
    files.push_back(path);
  }
  if (has_file(name + ".meta")) files.push_back(directory / (name + ".meta"));
  return files;
}

namespace {

// The text of a step's small JSON file, at most kMaxStepRecordBytes.
std::string read_step_file(const fs::path& file) {
  std::error_code error;
  const uintmax_t size = fs::file_size(file, error);
  if (error) throw_io(file, "cannot read the step's metadata", error.value());
  if (size > kMaxStepRecordBytes) {
    throw Error(ErrorCode::kCorrupt, "file of " + std::to_string(size) + " bytes is over ckpt's limit of " +
                                         std::to_string(kMaxStepRecordBytes) + " for a step's metadata",
                {.path = file});
  }
  std::ifstream in(file, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(size))) {
    throw Error(ErrorCode::kIo, "cannot read the step's metadata", {.path = file});
  }
  return text;
}

std::optional<double> json_number(const std::string& json) {
  double value = 0;
  const auto [end, failure] = std::from_chars(json.data(), json.data() + json.size(), value);
  if (failure != std::errc() || end != json.data() + json.size()) return std::nullopt;
  return value;
}

}  // namespace

OrbaxStepRecord read_orbax_step_record(const fs::path& step_directory) {
  const fs::path record_file = step_directory / orbax_detail::kCheckpointMetadataFile;
  const Metadata fields =
      orbax_detail::flatten_checkpoint_metadata(read_step_file(record_file), {.path = record_file}, "custom_metadata");
  OrbaxStepRecord record;
  constexpr std::string_view kMetrics = "metrics.";
  for (const auto& [key, value] : fields) {
    if (key.starts_with(kMetrics)) {
      if (const auto metric = json_number(value)) record.metrics.emplace(key.substr(kMetrics.size()), *metric);
    } else if (key == "commit_timestamp_nsecs") {
      if (const auto nanoseconds = json_number(value)) record.commit_time = *nanoseconds * 1e-9;
    }
  }
  // CheckpointManager with a best_fn saves the metrics as an item of their
  // own: <step>/metrics/metrics, a JSON object.
  const fs::path metrics_file = step_directory / kOrbaxMetricsItem / kOrbaxMetricsItem;
  std::error_code error;
  if (record.metrics.empty() && fs::is_regular_file(metrics_file, error)) {
    const std::string text = read_step_file(metrics_file);
    simdjson::dom::parser parser;
    simdjson::dom::object object;
    if (parser.parse(text.data(), text.size()).get_object().get(object)) {
      throw Error(ErrorCode::kCorrupt, "the step's metrics are not a JSON object", {.path = metrics_file});
    }
    for (const auto field : object) {
      double value = 0;
      if (field.value.is_number() && !field.value.get_double().get(value)) {
        record.metrics.emplace(std::string(field.key), value);
      }
    }
  }
  return record;
}

void sort_listing(std::vector<CheckpointEntry>& entries, const std::vector<fs::path>& later_last) {
  const auto rank = [&](const CheckpointEntry& entry) {
    constexpr int64_t kUnknown = INT64_MAX;
    const bool later = std::find(later_last.begin(), later_last.end(), entry.path) != later_last.end();
    return std::make_tuple(entry.step.value_or(kUnknown), entry.epoch.value_or(kUnknown), later, entry.path.string());
  };
  std::sort(entries.begin(), entries.end(),
            [&](const CheckpointEntry& a, const CheckpointEntry& b) { return rank(a) < rank(b); });
}

}  // namespace ckpt::detail
