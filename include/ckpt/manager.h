#pragma once
// Manager: the history of one training run in a run directory, on top of the
// plain save/load of checkpoint.h, for one process or for the ranks of a
// Communicator saving together (save_sharded). One step directory per
// committed checkpoint,
//
//   RUN_DIR/step-00001200/state.safetensors   (the format's natural name:
//                                              a TF bundle prefix `state`,
//                                              an Orbax directory `state/`,
//                                              a sharded save's `state/`)
//   RUN_DIR/step-00001200/checkpoint.json     (step, epoch, metrics, time,
//                                              every file with size and xxh3)
//   RUN_DIR/ckpt_manager.json                 (policies, steps kept forever)
//   RUN_DIR/ckpt_manager.lock                 (the one writer's flock)
//
// each written under a temporary name, synced and renamed into place, so a
// reader (list_run_directory, ckpt::load of an entry's path) never sees half
// of one. Retention (retention.h) runs after each commit, in the background;
// a checkpoint is kept if any policy keeps it, and with no policy nothing is
// deleted. docs/manager.md has the layout, the records and the safety rules.
//
//   ckpt::Manager manager("runs/a", {.keep_last = 3, .keep_best = 2, .metric = "dev_loss"});
//   if (auto report = manager.restore_latest(target)) { ...continue... }
//   manager.save(step, state, {.metrics = {{"dev_loss", 0.31}}, .blocking = false});
//   manager.close();

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/distributed.h"
#include "ckpt/format.h"
#include "ckpt/restore.h"
#include "ckpt/retention.h"
#include "ckpt/run_directory.h"
#include "ckpt/tree.h"

namespace ckpt {

struct ManagerOptions {
  // The policies, by their Python names; each that is set adds one policy.
  std::optional<int64_t> keep_last;                  // KeepLast
  std::optional<int64_t> keep_best;                  // KeepBest, by `metric` and `mode`
  std::string metric;
  MetricMode mode = MetricMode::kMin;
  bool keep_missing_metric = true;                   // KeepBest: keep checkpoints without the metric
  std::optional<int64_t> keep_every_steps;           // KeepEverySteps
  std::optional<double> keep_every_seconds;          // KeepEverySeconds
  std::vector<int64_t> keep_steps;                   // kept forever (persisted, with keep_forever saves)
  KeepFunction keep;                                 // CustomPolicy
  std::vector<RetentionPolicy> policy;               // composed policies (ReturnnPolicy, ...), after the above
  // Any writable format id; "" or "safetensors" by default.
  std::string format = "safetensors";
  // Asynchronous saves pending at once (queued or being written); a save
  // beyond them waits. At least 1.
  size_t max_in_flight = 1;
  // Hard-link the state from the previous committed checkpoint when it is
  // the same state byte for byte (copy where links fail).
  bool dedup = true;
  // fsync every file and directory of a commit (off: faster, not durable
  // across a power loss; still atomic for readers).
  bool fsync = true;
  // Open for reading only: no lock, no cleanup, no config written; save(),
  // restore_latest() and load() still read. save() throws.
  bool read_only = false;
  // "ckpt": step-NNNNNNNN/ directories (above). "returnn": a RETURNN model
  // directory, as RETURNN's torch engine writes it (docs/manager.md,
  // "Managing a RETURNN directory"): save(step, state, {.epoch = E}) writes
  // RUN_DIR/epoch.EEE.pt = {"model": state, "epoch": E, "step": step,
  // "effective_learning_rate": metrics["learning_rate"] or None} (a part
  // named "optimizer" goes to epoch.EEE.opt.pt, written first), then records
  // the metrics as epoch E's scores in RETURNN's learning_rates file. Needs
  // format "torch" (or ""), an epoch with every save (newer than the last),
  // parts "state" or "model" (and "optimizer"), no dedup. list() shows
  // RETURNN's listing (steps filled in for the epochs this manager
  // committed), load() and restore_latest() give the "model" state, and
  // retention removes only epochs this manager committed, never RETURNN's own
  // or the learning_rates file. A directory RETURNN wrote is continued; a
  // ckpt-layout one is refused (and the other way round).
  std::string layout = "ckpt";
  // The ranks that save this run together (issue 20; docs/manager.md,
  // "Sharded runs"): every rank opens a Manager on the same run_dir with its
  // own communicator of one group, which must outlive the manager; nullptr:
  // one process. Opening is then collective: rank 0 alone takes the run's
  // lock, removes the temporaries, writes ckpt_manager.json, and later runs
  // retention; the other ranks write only their shards. An Error on any
  // rank while opening (the lock held by another writer, naming its pid and
  // host; a directory of another layout) is thrown on every rank. Needs the
  // "ckpt" layout and format "safetensors" (or ""): each step's state is a
  // Hugging Face sharded directory. With read_only every rank opens on its
  // own, and the communicator is not used.
  Communicator* comm = nullptr;
};

// One file of a checkpoint saved in parts (per-module files: a frozen
// encoder in a file of its own is linked, not rewritten, while it does not
// change). The part is stored as `name` plus the format's extension
// ("encoder.safetensors"; a TF prefix "encoder", an Orbax "encoder/").
struct StatePart {
  std::string name;  // 1 to 100 letters, digits, '_' or '-'; "state" is the name of an unsplit state
  Tree state;        // a map; the parts of one checkpoint hold disjoint leaves
};

struct SaveStepOptions {
  std::map<std::string, double> metrics;
  std::optional<int64_t> epoch;
  // False: return once the state is snapshotted (tensors whose memory the
  // caller can still change are copied: heap and lent memory, and views of
  // them; tensors mapping a file, and deferred views of file data, are
  // not), write and commit on the background thread.
  bool blocking = true;
  // Keep this checkpoint forever (recorded in ckpt_manager.json).
  bool keep_forever = false;
};

class Manager {
 public:
  // Opens `run_dir` (created if missing, unless read_only). A writing
  // manager takes the run's lock, removes the temporaries that killed saves
  // left (those no live writer holds) and records its policies in
  // ckpt_manager.json (keeping the steps already marked to keep forever; a
  // CustomPolicy's last decision stays until its function runs again).
  // Throws Error{kIo} naming the holder's pid and host if another writer
  // holds the lock; {kInvalidArgument} for a bad option (a policy's count,
  // keep_best without a metric, max_in_flight 0); {kUnsupported} for a
  // format that cannot be written; {kNotFound} for a missing run_dir when
  // read_only; {kCorrupt} if the run's records cannot be parsed.
  explicit Manager(std::filesystem::path run_dir, ManagerOptions options = {});
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;
  // Waits for the pending saves and the cleanup after them, swallowing their
  // errors (call close() to see them), then releases the lock. Never throws.
  ~Manager();

  const std::filesystem::path& run_dir() const noexcept;

  // Saves `state` as checkpoint `step`, which must be newer than every step
  // committed or pending. Blocking (the default): returns once committed.
  // With ManagerOptions::comm: save_sharded(step, state, {}) (every tensor
  // whole, written once, by rank 0; collective).
  // Either way, retention runs after the commit on the background thread.
  // Throws the error of an earlier background save or cleanup first (once);
  // Error{kInvalidArgument} for a step not newer than the last, or a
  // read-only manager; what save() of checkpoint.h throws (blocking).
  void save(int64_t step, const Tree& state, const SaveStepOptions& options = {});
  // Saves a state in parts, one file each, as one checkpoint (one commit):
  // the step directory holds every part, checkpoint.json lists them, and
  // each part is deduplicated on its own (hard-linked from the previous
  // step when that step has a part of the same name with the same state).
  // load() and restore_latest() return the union of the parts. Throws as
  // save() above, and Error{kInvalidArgument} with ManagerOptions::comm, for no part, a part's name
  // that is not a plain name or repeats another's, a part that is not a map.
  void save(int64_t step, const std::vector<StatePart>& parts, const SaveStepOptions& options = {});

  // Saves the state that the ranks of ManagerOptions::comm hold together as
  // checkpoint `step`; collective (every rank calls it with the same step,
  // its `local_tree` and `shards` as ckpt::save_sharded takes them). The step
  // directory holds state/, the Hugging Face sharded directory
  // (model-0000K-of-0000N.safetensors, one per rank, and
  // model.safetensors.index.json), and checkpoint.json, which rank 0 writes
  // listing every file with its size and xxh3 (each rank hashes the shard
  // it wrote). The whole step directory is one commit, rank 0's rename
  // (the protocol of save_sharded): a rank that fails or leaves mid-save
  // commits nothing, leaves the checkpoints before intact, and every live
  // rank throws its Error. The metrics, epoch and keep_forever are rank 0's
  // options'. Blocking: returns once committed on every rank. Not blocking:
  // each rank snapshots its tensors as save() does and the protocol runs on
  // the manager's background thread, when the communicator is
  // callable_from_any_thread(); otherwise (MPI below
  // MPI_THREAD_MULTIPLE, a torch ProcessGroup from Python) the save blocks.
  // Retention runs on rank 0 after each commit, in the background, and
  // removes whole step directories (every shard). No dedup: a sharded state
  // is written every time. Without a communicator: one rank, the same
  // layout. Throws as save() (ranks that pass different steps throw
  // Error{kInvalidArgument} on all; so does a manager whose format is not
  // safetensors, or of the returnn layout), and what ckpt::save_sharded
  // throws for the tree and shards.
  void save_sharded(int64_t step, const Tree& local_tree, const std::map<std::string, ShardSpec>& shards,
                    const SaveStepOptions& options = {});

  // The committed checkpoints, oldest first, with kept_by (a read of the
  // directory; pending saves are not listed until committed).
  std::vector<CheckpointEntry> list() const;
  // The newest committed checkpoint; nullopt for an empty run.
  std::optional<CheckpointEntry> latest() const;
  // The best committed checkpoint by `metric` (ties: the newer one), among
  // those that record it; nullopt when none does.
  std::optional<CheckpointEntry> best(const std::string& metric, MetricMode mode = MetricMode::kMin) const;

  // Loads committed checkpoint `step` (a state saved in parts: the union of
  // its parts, load_checkpoint()). On a writing manager, that checkpoint is
  // not deleted until this manager commits a newer one.
  // Throws Error{kNotFound} for a step that is not committed.
  Tree load(int64_t step, const LoadOptions& options = {});
  // The newest committed checkpoint's state, as load() gives it (protected
  // as load()'s), also where the listing knows no step for it (an epoch a
  // RETURNN directory had before the manager); nullopt for an empty run.
  std::optional<Tree> load_latest(const LoadOptions& options = {});
  // Restores the newest committed checkpoint into `target` through
  // restore() (strict by default) and returns its report; nullopt for an
  // empty run (a fresh start). The checkpoint is protected as load()'s.
  std::optional<RestoreReport> restore_latest(const Tree& target, const RestoreOptions& options = {});

  // Waits until every pending save is committed and the cleanup after it
  // is done, the checkpoints that retention removed gone from the disk too
  // (their removal runs off the saving thread, in the background: until
  // then they lie under hidden temporary names, in no listing); rethrows
  // the first error one of them hit. With ManagerOptions::comm: collective
  // (every rank calls it), returning once rank 0's cleanup is done too, so
  // that every rank then lists the same.
  void wait();
  // wait(), then releases the lock; the manager reads only afterwards.
  // Rethrows as wait(). A second close() does nothing.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct PruneOptions {
  // The policies to apply; empty: those a ckpt run recorded in
  // ckpt_manager.json (a foreign run records none). A ckpt run's steps kept
  // forever are kept whatever the policies.
  std::vector<RetentionPolicy> policies;
  // Decide and report, remove nothing.
  bool dry_run = false;
  // Allow pruning a run directory of another tool's layout
  // (list_run_directory().layout other than "ckpt"): its entries' files are
  // removed.
  bool foreign = false;
};

struct PruneReport {
  // The run as it was, kept_by filled by the policies applied.
  RunListing listing;
  // What was removed (with dry_run: what would be), in listing order.
  std::vector<std::filesystem::path> removed;
};

// Applies retention to `run_dir` once, as a manager does after a commit
// (the newest checkpoint is always kept; with no policy nothing is
// removed). Takes the run's writer lock for a ckpt run (not with dry_run).
// Throws Error{kInvalidArgument} (nothing removed) for a foreign layout
// without options.foreign, {kIo} naming the holder if a manager holds the
// lock, what list_run_directory() throws.
PruneReport prune_run_directory(const std::filesystem::path& run_dir, const PruneOptions& options = {});

}  // namespace ckpt
