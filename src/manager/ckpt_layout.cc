// ckpt's own run layout: RUN_DIR/step-NNNNNNNN/ directories, each holding
// its state and checkpoint.json (step_record.h), beside ckpt_manager.json
// (run_config.h). A step directory without checkpoint.json, a temporary and
// every other name are not checkpoints and are ignored.
#include <algorithm>
#include <optional>
#include <system_error>

#include "ckpt/error.h"
#include "manager/run_config.h"
#include "manager/run_layouts.h"
#include "manager/step_record.h"

namespace ckpt::detail {

std::optional<RunListing> list_ckpt_run(const std::filesystem::path& run_dir) {
  namespace fs = std::filesystem;
  const std::optional<RunConfig> config = read_run_config(run_dir);
  // A RETURNN directory that a manager writes: its epochs are RETURNN's files.
  if (config && config->layout != "ckpt") return std::nullopt;
  std::vector<CheckpointEntry> entries;
  std::error_code error;
  fs::directory_iterator it(run_dir, error);
  if (error) throw Error(ErrorCode::kIo, "cannot list the run directory: " + error.message(), {.path = run_dir});
  for (const fs::directory_entry& item : it) {
    const std::optional<int64_t> step = parse_step_directory_name(item.path().filename().string());
    if (!step) continue;
    std::error_code status_error;
    // A symbolic link is not a directory the manager committed.
    if (!fs::is_directory(fs::symlink_status(item.path(), status_error))) continue;
    if (!fs::exists(fs::symlink_status(item.path() / kStepRecordName, status_error))) continue;
    std::optional<StepRecord> read;
    try {
      read = read_step_record(item.path());
    } catch (const Error& error) {
      // Pruned since the directory was listed (a pruned step is renamed
      // away whole): not a checkpoint any more.
      if (error.code() == ErrorCode::kNotFound) continue;
      throw;
    }
    const StepRecord& record = *read;
    CheckpointEntry entry;
    entry.step = record.step;
    entry.epoch = record.epoch;
    entry.metrics = record.metrics;
    entry.path = item.path() / record.state;
    if (!record.parts.empty()) {
      entry.parts.push_back(entry.path);
      for (const RecordedPart& part : record.parts) entry.parts.push_back(item.path() / part.state);
    }
    entry.files = {item.path()};
    entry.size = fs::file_size(item.path() / kStepRecordName, status_error);
    if (status_error) entry.size = 0;
    for (const RecordedFile& file : record.files) entry.size += file.size;
    entry.time = record.time;
    entries.push_back(std::move(entry));
  }
  if (entries.empty() && !config) return std::nullopt;
  std::sort(entries.begin(), entries.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return *a.step < *b.step; });
  if (config) fill_kept_by(entries, effective_policies(*config));
  return RunListing{.run_dir = run_dir, .layout = "ckpt", .checkpoints = std::move(entries)};
}

}  // namespace ckpt::detail
