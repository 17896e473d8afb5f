// The commits of step directories (manager_impl.h): a state in parts,
// each part digested, linked or written and recorded beside the others,
// and a sharded state over distributed/sharded_commit.h.

#include <algorithm>
#include <chrono>
#include <future>
#include <set>

#include "ckpt/checkpoint.h"
#include "distributed/sharded_commit.h"
#include "io/atomic_directory.h"
#include "io/atomic_file.h"
#include "io/file_hashes.h"
#include "manager/manager_impl.h"
#include "manager/state_files.h"

namespace ckpt {
namespace fs = std::filesystem;
using manager_detail::invalid;

namespace {

// Seconds since the epoch, as checkpoint.json records a commit's time.
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

detail::StepRecord Manager::Impl::commit_step(Job& job) {
  const fs::path final_path = step_dir(job.step);
  refuse_existing(final_path);
  std::optional<detail::StepRecord> previous;
  {
    std::lock_guard<std::mutex> guard(mutex);
    previous = last_record;
  }
  detail::AtomicDirectory directory(final_path, {.fsync = options.fsync, .files_synced = true});
  // Each part on its own: its digest, then its files linked from the
  // previous step when the digest is the same (and dedup is on), else
  // written. The digest's checksums go to the writer even with dedup off:
  // known before the data is written, they let a writer put its header
  // first and write in file order, so that the file is hashed for its
  // record as it is written (io/file_hashes.h) instead of read back. Several
  // parts run in parallel, so that a frozen part's digest overlaps the
  // trained part's write.
  struct PartDone {
    std::string digest;
    std::vector<detail::RecordedFile> linked;   // empty: written
    std::vector<detail::RecordedFile> written;  // recorded by the part's own task, beside the others' work
  };
  std::vector<std::string> names;
  for (const StatePart& part : job.parts) names.push_back(detail::part_file_name(*format, part.name));
  const std::string format_id(format->id());
  // A blocking save has the machine to itself: every core hashes and
  // writes. A background one shares it with the training loop: one thread
  // per part, so that the loop keeps a core.
  const unsigned threads = job.options.blocking ? 0 : 1;
  const auto commit_part = [&](size_t i) {
    PartDone done;
    std::shared_ptr<const std::map<std::string, std::string>> checksums;
    detail::StateDigest digest = detail::state_digest(job.parts[i].state, threads);
    checksums = std::move(digest.checksums);
    if (options.dedup) done.digest = std::move(digest.hex);
    if (!done.digest.empty() && previous && previous->format == format_id &&
        previous_digest(*previous, names[i]) == done.digest) {
      std::vector<detail::RecordedFile> files;
      for (const detail::RecordedFile& file : previous->files) {
        if (detail::file_of_part(file.path, names[i])) files.push_back(file);
      }
      if (!files.empty() &&
          detail::link_state_files(step_dir(previous->step), directory.path(), files, options.fsync)) {
        done.linked = std::move(files);
        return done;
      }
    }
    // The digest's checksums are the writer's (xxh3): not computed twice.
    // The files the save writes in file order are hashed as they are
    // written, not read back for their record.
    detail::FileHashes hashed;
    ckpt::save(directory.path() / names[i], job.parts[i].state,
               {.format = format_id, .known_checksums = std::move(checksums), .fsync = options.fsync,
                .threads = threads, .state_file = StateFilePolicy::kLeave});
    done.written = detail::record_state_files(directory.path(), {}, names[i], hashed.files());
    return done;
  };
  std::vector<PartDone> parts_done(job.parts.size());
  if (job.parts.size() == 1) {
    parts_done[0] = commit_part(0);
  } else {
    std::vector<std::future<PartDone>> tasks;
    for (size_t i = 0; i < job.parts.size(); ++i) tasks.push_back(std::async(std::launch::async, commit_part, i));
    std::exception_ptr failure;  // the first, after every task has ended
    for (size_t i = 0; i < tasks.size(); ++i) {
      try {
        parts_done[i] = tasks[i].get();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  }
  std::vector<detail::RecordedPart> parts;
  for (size_t i = 0; i < names.size(); ++i) parts.push_back({.state = names[i], .digest = parts_done[i].digest});
  detail::StepRecord record{.step = job.step,
                            .epoch = job.options.epoch,
                            .metrics = job.options.metrics,
                            .time = 0,
                            .format = format_id,
                            .state = parts.front().state,
                            .state_digest = parts.front().digest,
                            .parts = std::vector<detail::RecordedPart>(parts.begin() + 1, parts.end()),
                            .files = {}};
  std::vector<detail::RecordedFile> recorded;  // linked from the previous step, or written and recorded
  std::set<std::string> recorded_paths;
  for (PartDone& done : parts_done) {
    for (std::vector<detail::RecordedFile>* files : {&done.linked, &done.written}) {
      for (detail::RecordedFile& file : *files) {
        recorded_paths.insert(file.path);
        recorded.push_back(std::move(file));
      }
    }
  }
  record.files = detail::record_state_files(directory.path(), recorded_paths);  // any other file a writer left
  record.files.insert(record.files.end(), recorded.begin(), recorded.end());
  std::sort(record.files.begin(), record.files.end(),
            [](const detail::RecordedFile& a, const detail::RecordedFile& b) { return a.path < b.path; });
  record.time = now_seconds();
  write_step_record(directory.path(), record);
  directory.commit();
  return record;
}

void Manager::Impl::refuse_existing(const fs::path& final_path) {
  std::error_code status_error;
  if (fs::exists(fs::symlink_status(final_path, status_error))) {
    invalid("step directory exists already and is not one this manager committed", final_path);
  }
}

void Manager::Impl::write_step_record(const fs::path& directory, const detail::StepRecord& record) const {
  const std::string json = detail::step_record_json(record);
  detail::AtomicFile file(directory / detail::kStepRecordName, {.fsync = options.fsync});
  file.write_at(std::as_bytes(std::span(json.data(), json.size())), 0);
  file.commit({.sync_directory = false});  // the directory's commit syncs it
}

std::optional<detail::StepRecord> Manager::Impl::commit_sharded_step(Job& job) {
  const fs::path final_path = step_dir(job.step);
  std::optional<detail::StepRecord> record;
  distributed_detail::commit_sharded(
      job.local_tree, job.shards, sharded_comm(),
      {.directory = final_path,
       .state_subdirectory = fs::path(detail::kShardedStateName),
       .agreement = "step " + std::to_string(job.step),
       .record_files = true,
       .save = {.fsync = options.fsync, .threads = job.options.blocking ? 0u : 1u},
       .files_synced = true,
       .check_target = [&] { refuse_existing(final_path); },
       .commit_files =
           [&](const fs::path& temporary, const std::vector<distributed_detail::WrittenFile>& written) {
             detail::StepRecord made{.step = job.step,
                                     .epoch = job.options.epoch,
                                     .metrics = job.options.metrics,
                                     .time = now_seconds(),
                                     .format = "hf_sharded",
                                     .state = std::string(detail::kShardedStateName),
                                     .state_digest = {},
                                     .parts = {},
                                     .files = {}};
             for (const distributed_detail::WrittenFile& file : written) {
               made.files.push_back({.path = file.path, .size = file.size, .xxh3 = file.xxh3});
             }
             std::sort(made.files.begin(), made.files.end(),
                       [](const detail::RecordedFile& a, const detail::RecordedFile& b) { return a.path < b.path; });
             write_step_record(temporary, made);
             record = std::move(made);
           }});
  return record;
}

std::string Manager::Impl::previous_digest(const detail::StepRecord& record, const std::string& file_name) {
  if (record.state == file_name) return record.state_digest;
  for (const detail::RecordedPart& part : record.parts) {
    if (part.state == file_name) return part.digest;
  }
  return {};
}

}  // namespace ckpt
