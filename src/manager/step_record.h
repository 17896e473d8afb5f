#pragma once
// StepRecord: the checkpoint.json that every committed step directory of a
// ckpt run holds (docs/manager.md, "checkpoint.json"), and the names of the
// step directories. The record is what makes a step directory a committed
// checkpoint of ckpt's: the manager deletes nothing without one.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

// The record's version (its "ckpt_version"); a reader refuses newer ones.
inline constexpr int64_t kStepRecordVersion = 1;
// The record's file name inside a step directory.
inline constexpr std::string_view kStepRecordName = "checkpoint.json";
// A record larger than this is refused before parsing (a step of an Orbax
// state of 100,000 arrays lists ~12 MB of files).
inline constexpr uint64_t kMaxStepRecordBytes = uint64_t{64} << 20;

// One file of a step directory, below it.
struct RecordedFile {
  std::string path;  // relative to the step directory, '/'-separated
  uint64_t size = 0;
  std::string xxh3;  // 16 lower-case hex digits of the whole file's xxh3-64
};

// A further part of a state saved in parts (Manager::save with StateParts:
// per-module files): its name in the step directory and its digest.
struct RecordedPart {
  std::string state;   // "encoder.safetensors", as StepRecord::state
  std::string digest;  // as StepRecord::state_digest ("" without dedup)
  bool operator==(const RecordedPart&) const = default;
};

struct StepRecord {
  int64_t step = 0;
  std::optional<int64_t> epoch;
  std::map<std::string, double> metrics;  // NaN and infinities allowed
  double time = 0;                        // seconds since the epoch, of the commit
  std::string format;                     // the state's format id
  std::string state;                      // the state's name in the directory ("state.safetensors")
  // A digest of the whole state tree (structure, leaves, every tensor's
  // xxh3): equal digests mean the same state byte for byte (dedup).
  std::string state_digest;
  // The state's other parts when it was saved in parts ("parts" in the JSON,
  // absent otherwise); the state is the union of `state` and these.
  std::vector<RecordedPart> parts;
  std::vector<RecordedFile> files;  // every file of the state (all parts), sorted by path
};

// The record as JSON text.
std::string step_record_json(const StepRecord& record);

// Parses checkpoint.json text. Throws Error{kCorrupt} naming `path` and the
// field for anything but a record of this version or older: not JSON, a
// field missing or of the wrong type, a negative step or size, a state or
// file path that is absolute, empty, holds "." / ".." components or a NUL,
// a checksum that is not 16 hex digits, two files with one path, a part
// that is not a plain name or that repeats another part's name.
StepRecord parse_step_record(std::string_view json, const std::filesystem::path& path);

// Reads and parses `step_dir`/checkpoint.json. Throws Error{kNotFound} if it
// is missing, {kCorrupt} as parse_step_record (also for a file larger than
// kMaxStepRecordBytes, and for a record whose step is not the directory's).
StepRecord read_step_record(const std::filesystem::path& step_dir);

// "step-00001200": 8 digits, more where the step needs them.
std::string step_directory_name(int64_t step);
// The step a directory name gives, or nullopt for any other name: "step-"
// then 8 digits, or more without a leading zero (one name per step; listings
// sort by the number, so step-100000000 comes after step-99999999).
std::optional<int64_t> parse_step_directory_name(std::string_view name);

}  // namespace ckpt::detail
