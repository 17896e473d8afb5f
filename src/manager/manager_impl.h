#pragma once
// The manager's state (ckpt/manager.h's Manager::Impl), shared by
// manager.cc (opening, the worker, retention, loads) and step_commit.cc
// (the commits of step directories, one process's and sharded ones).

#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/distributed.h"
#include "ckpt/error.h"
#include "ckpt/manager.h"
#include "manager/run_config.h"
#include "manager/run_lock.h"
#include "manager/step_record.h"

namespace ckpt {
namespace manager_detail {

[[noreturn]] inline void invalid(const std::string& message, const std::filesystem::path& path = {}) {
  throw Error(ErrorCode::kInvalidArgument, message, {.path = path});
}

}  // namespace manager_detail

struct Manager::Impl {
  struct Job {
    int64_t step = 0;
    std::vector<StatePart> parts;
    // A sharded save (save_sharded): this rank's tree and shards instead of parts.
    bool sharded = false;
    Tree local_tree;
    std::map<std::string, ShardSpec> shards;
    Buffer block;  // where an asynchronous save's snapshot lies
    SaveStepOptions options;
    bool done = false;
    std::exception_ptr error;
  };

  std::filesystem::path run_dir;
  ManagerOptions options;
  const Format* format = nullptr;
  std::unique_ptr<detail::RunLock> lock;
  std::vector<RetentionPolicy> policies;  // as configured (a CustomPolicy with its function)
  detail::RunConfig config;               // as persisted

  bool returnn = false;  // ManagerOptions::layout "returnn"
  // ManagerOptions::comm of a writing manager; `follower`: a rank other than
  // 0 of it, which writes its shards and nothing else (no lock).
  Communicator* comm = nullptr;
  bool follower = false;
  // The one-rank group of save_sharded without a communicator.
  std::unique_ptr<ThreadGroup> solo_group;
  std::unique_ptr<Communicator> solo;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::shared_ptr<Job>> queue;  // saves not yet committed, in step order
  bool cleanup_due = false;
  bool busy = false;  // the worker is committing or cleaning up
  bool stopping = false;
  bool closed = false;
  std::exception_ptr error;                    // of a background save or cleanup, not yet rethrown
  std::optional<int64_t> last_step;            // newest step committed or queued
  std::optional<int64_t> last_epoch;           // the returnn layout: newest epoch committed or queued
  std::optional<int64_t> committed_step;       // the returnn layout, sharded saves: newest step (and epoch) committed
  std::optional<int64_t> committed_epoch;
  std::optional<int64_t> protected_step;       // loaded or restored from: kept until a newer commit
  std::optional<detail::StepRecord> last_record;  // the newest committed checkpoint's (dedup)
  Buffer spare;  // a written snapshot's block, for the next snapshot
  std::thread worker;

  bool writing() const { return lock != nullptr || follower; }
  // Whether this manager writes the run's records and runs retention: rank
  // 0 of a sharded run, or the one process.
  bool leader() const { return !follower; }
  // The newest step committed, as this manager knows it.
  std::optional<int64_t> newest_committed() const;
  // The communicator of save_sharded: ManagerOptions::comm, else one rank of its own.
  Communicator& sharded_comm();
  std::filesystem::path step_dir(int64_t step) const { return run_dir / detail::step_directory_name(step); }

  // Retention's policies now: the configured ones (a custom one with its
  // function), plus the steps kept forever.
  std::vector<RetentionPolicy> live_policies() const;

  std::vector<CheckpointEntry> committed() const;

  void worker_loop();

  // Commits job: a step directory, or a RETURNN epoch; then what follows
  // every commit.
  void commit(Job& job);

  // The returnn layout: the epoch recorded as this manager's first, then its
  // files and learning_rates (returnn_writer.h). A crash in between leaves a
  // record of an epoch whose model never appeared, which lists as nothing.
  void commit_epoch(Job& job);

  // Writes job.parts into a temporary step directory and commits it;
  // returns its record (step_commit.cc, as the four below).
  detail::StepRecord commit_step(Job& job);
  // Throws Error{kInvalidArgument} if something is at `final_path` already.
  static void refuse_existing(const std::filesystem::path& final_path);
  // Writes `record` as checkpoint.json into the temporary step directory `directory`.
  void write_step_record(const std::filesystem::path& directory, const detail::StepRecord& record) const;
  // A sharded save's step directory: state/ (the Hugging Face sharded
  // directory, each rank's shard) and checkpoint.json (rank 0's, from the
  // files the ranks report), committed by the protocol of
  // distributed/sharded_commit.h. Returns the record on rank 0.
  std::optional<detail::StepRecord> commit_sharded_step(Job& job);
  // The digest `record` gives its part stored as `file_name` ("" if none).
  static std::string previous_digest(const detail::StepRecord& record, const std::string& file_name);

  // Retention after a commit: removes what no policy keeps.
  void clean_up();

  // Persists what a custom policy kept, for those who cannot run its function.
  void record_custom_decision(const std::vector<CheckpointEntry>& entries);

  // Loads `entry` (protected from retention until a newer commit): the
  // returnn layout's model state, else the union of its parts.
  Tree load_entry(const CheckpointEntry& entry, const LoadOptions& load_options);

  void rethrow_error();

  // Throws Error{kInvalidArgument} unless `step` is newer than every step
  // committed or pending (`mutex` held).
  void check_newer(int64_t step) const;

  // Waits for the queue and the cleanup after it (the lock held by `guard`).
  void wait_idle(std::unique_lock<std::mutex>& guard);

  void stop() noexcept;

  // Runs `job` (a sharded save) on the calling thread, as the worker would,
  // once the saves before it and the cleanup after them are done; then the
  // cleanup after it follows on the worker. `guard` holds the mutex.
  void commit_here(Job& job, std::unique_lock<std::mutex>& guard);
};

}  // namespace ckpt
