#pragma once
// What the foreign layouts (foreign.cc, returnn_layout.cc) share: the
// entries of a run directory, a checkpoint's files with their bytes and
// newest mtime, a TF bundle's files, and the order of a listing.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/run_directory.h"

namespace ckpt::detail {

// One entry of a run directory, symbolic links followed.
struct RunEntry {
  std::string name;
  bool file = false;       // a regular file
  bool directory = false;  // a directory
};

// The entries of `run_dir`, sorted by name. Throws Error{kIo} (as
// io/file_system.h's throw_io) if it cannot be listed.
std::vector<RunEntry> run_entries(const std::filesystem::path& run_dir);

// `text` as a decimal number of at most 18 digits (leading zeros allowed),
// or nullopt: the step and epoch numbers in file names.
std::optional<int64_t> decimal_number(std::string_view text);

// Sets entry.files to `files`, entry.size to their bytes (a directory's
// files counted recursively, links not followed) and entry.time to their
// newest mtime (seconds since the epoch), unless `commit_time` gives it.
// Throws Error{kIo} if one cannot be examined.
void set_files(CheckpointEntry& entry, std::vector<std::filesystem::path> files,
               std::optional<double> commit_time = std::nullopt);

// The files of the TF bundle at `prefix` when it is complete (its .index
// and every data shard "<prefix>.data-K-of-M" of the count M its shards
// name, plus "<prefix>.meta" if present), else nullopt (no .index, no data,
// a shard missing). `entries` are the prefix's directory's.
std::optional<std::vector<std::filesystem::path>> tf_bundle_files(const std::filesystem::path& prefix,
                                                                  const std::vector<RunEntry>& entries);

// What an Orbax step directory records of itself: its metrics (the
// numbers of _CHECKPOINT_METADATA's "metrics" object, else of the
// "metrics/metrics" item that CheckpointManager with a best_fn writes) and
// its commit time (commit_timestamp_nsecs, in seconds). Throws
// Error{kCorrupt} naming the file if one is not a JSON object or is over
// 16 MiB, {kIo}.
struct OrbaxStepRecord {
  std::map<std::string, double> metrics;
  std::optional<double> commit_time;
};
OrbaxStepRecord read_orbax_step_record(const std::filesystem::path& step_directory);

// Sorts a listing oldest first: by step, then epoch (an entry without one
// after those with), then `later_last` (an entry that names the newest copy
// of its step, Lightning's last.ckpt, after the others), then path.
void sort_listing(std::vector<CheckpointEntry>& entries,
                  const std::vector<std::filesystem::path>& later_last = {});

}  // namespace ckpt::detail
