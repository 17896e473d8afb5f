#include "ckpt/manager.h"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "core/text.h"
#include "distributed/sharded_commit.h"
#include "distributed/wire.h"
#include "io/deferred_release.h"
#include "io/file_system.h"
#include "manager/run_config.h"
#include "manager/run_files.h"
#include "manager/run_layouts.h"
#include "manager/returnn_writer.h"
#include "manager/manager_impl.h"
#include "manager/run_lock.h"
#include "manager/state_files.h"
#include "manager/step_record.h"

namespace ckpt {

namespace fs = std::filesystem;
using manager_detail::invalid;

namespace {

// The policies `options` configure, in the documented order.
std::vector<RetentionPolicy> configured_policies(const ManagerOptions& options) {
  std::vector<RetentionPolicy> policies;
  if (options.keep_last) policies.push_back(KeepLast{.n = *options.keep_last});
  if (options.keep_best) {
    policies.push_back(KeepBest{.n = *options.keep_best,
                                .metric = options.metric,
                                .mode = options.mode,
                                .keep_missing_metric = options.keep_missing_metric});
  }
  if (options.keep_every_steps) policies.push_back(KeepEverySteps{.steps = *options.keep_every_steps});
  if (options.keep_every_seconds) policies.push_back(KeepEverySeconds{.seconds = *options.keep_every_seconds});
  if (options.keep) policies.push_back(CustomPolicy{.keep = options.keep, .last_kept = {}});
  policies.insert(policies.end(), options.policy.begin(), options.policy.end());
  for (const RetentionPolicy& policy : policies) validate_policy(policy);
  return policies;
}

}  // namespace

std::optional<int64_t> Manager::Impl::newest_committed() const {
  if (returnn || follower) return committed_step;
  return last_record ? std::optional(last_record->step) : std::nullopt;
}

Communicator& Manager::Impl::sharded_comm() {
  if (comm != nullptr) return *comm;
  if (!solo) {
    solo_group = std::make_unique<ThreadGroup>(1);
    solo = solo_group->communicator(0);
  }
  return *solo;
}

std::vector<RetentionPolicy> Manager::Impl::live_policies() const {
  return detail::with_kept_forever(policies, config.keep_forever);
}

std::vector<CheckpointEntry> Manager::Impl::committed() const {
  if (returnn) return detail::list_managed_returnn_run(run_dir);
  std::optional<RunListing> listing = detail::list_ckpt_run(run_dir);
  return listing ? std::move(listing->checkpoints) : std::vector<CheckpointEntry>{};
}

void Manager::Impl::worker_loop() {
  std::unique_lock<std::mutex> guard(mutex);
  while (true) {
    changed.wait(guard, [&] { return stopping || !queue.empty() || cleanup_due; });
    if (!queue.empty()) {
      std::shared_ptr<Job> job = queue.front();
      busy = true;
      guard.unlock();
      std::exception_ptr failure;
      try {
        commit(*job);
      } catch (abi::__forced_unwind&) {
        throw;  // the thread is being cancelled (pthread_exit, a finalizing Python): let it end
      } catch (...) {
        failure = std::current_exception();
      }
      guard.lock();
      queue.pop_front();
      busy = false;
      job->done = true;
      job->error = failure;
      if (failure && !job->options.blocking && !error) error = failure;
      // A failed save leaves its step free again unless a later one is queued.
      if (failure && last_step == job->step) {
        last_step = newest_committed();
        if (returnn) last_epoch = committed_epoch;
      }
      if (!failure && leader()) cleanup_due = true;
      changed.notify_all();
      continue;
    }
    if (cleanup_due) {
      cleanup_due = false;
      busy = true;
      guard.unlock();
      std::exception_ptr failure;
      try {
        clean_up();
      } catch (abi::__forced_unwind&) {
        throw;  // the thread is being cancelled (pthread_exit, a finalizing Python): let it end
      } catch (...) {
        failure = std::current_exception();
      }
      guard.lock();
      busy = false;
      if (failure && !error) error = failure;
      changed.notify_all();
      continue;
    }
    if (stopping) return;
  }
}

void Manager::Impl::commit(Job& job) {
  std::optional<detail::StepRecord> record;
  if (returnn) {
    commit_epoch(job);
  } else if (job.sharded) {
    record = commit_sharded_step(job);
  } else {
    record = commit_step(job);
  }
  job.parts.clear();  // the snapshot's memory goes as soon as it is written (or waits as the spare)
  job.local_tree = Tree();
  if (!job.block.empty() && job.block.storage().use_count() == 1) {
    std::lock_guard<std::mutex> guard(mutex);
    if (job.block.size() > spare.size()) spare = std::move(job.block);
  }
  job.block = Buffer();
  if (job.options.keep_forever && leader()) {
    {
      std::lock_guard<std::mutex> guard(mutex);
      if (!std::count(config.keep_forever.begin(), config.keep_forever.end(), job.step)) {
        config.keep_forever.push_back(job.step);
        std::sort(config.keep_forever.begin(), config.keep_forever.end());
      }
    }
    detail::write_run_config(run_dir, config);
  }
  if (format->capabilities().state_file && !returnn) {
    detail::write_tf_state_file(run_dir, committed(), options.fsync);
  }
  std::lock_guard<std::mutex> guard(mutex);
  if (record) last_record = std::move(record);
  if (job.sharded) committed_step = job.step;
  if (returnn) {
    committed_step = job.step;
    committed_epoch = job.options.epoch;
  }
  if (protected_step && job.step > *protected_step) protected_step.reset();
}

void Manager::Impl::commit_epoch(Job& job) {
  {
    std::lock_guard<std::mutex> guard(mutex);
    config.committed_epochs[*job.options.epoch] = job.step;
  }
  detail::write_run_config(run_dir, config);
  detail::write_returnn_epoch(run_dir, job.step, *job.options.epoch, job.parts, job.options.metrics,
                              options.fsync);
}

void Manager::Impl::clean_up() {
  std::vector<RetentionPolicy> live;
  std::optional<int64_t> keep;
  {
    std::lock_guard<std::mutex> guard(mutex);
    live = live_policies();
    keep = protected_step;
  }
  if (live.empty()) return;
  std::vector<CheckpointEntry> entries = committed();
  detail::fill_kept_by(entries, live);
  record_custom_decision(entries);
  const std::vector<size_t> remove = detail::entries_to_remove(entries, true, keep);
  size_t removed = 0;
  for (size_t index : remove) {
    if (!returnn) {
      detail::remove_committed(entries[index].files.front(), options.fsync);  // the step directory
    } else if (entries[index].step) {  // an epoch this manager committed; RETURNN's own stay
      for (const std::filesystem::path& file : entries[index].files) detail::remove_committed(file, options.fsync);
    } else {
      continue;
    }
    ++removed;
  }
  if (removed == 0) return;
  if (options.fsync) detail::sync_directory(run_dir, run_dir);
  if (format->capabilities().state_file && !returnn) {
    detail::write_tf_state_file(run_dir, committed(), options.fsync);
  }
}

void Manager::Impl::record_custom_decision(const std::vector<CheckpointEntry>& entries) {
  if (!options.keep) return;
  std::vector<int64_t> kept;
  for (const CheckpointEntry& entry : entries) {
    if (std::count(entry.kept_by.begin(), entry.kept_by.end(), "custom")) kept.push_back(*entry.step);
  }
  for (RetentionPolicy& policy : config.policies) {
    if (auto* custom = std::get_if<CustomPolicy>(&policy)) {
      if (custom->last_kept == kept) return;
      custom->last_kept = kept;
    }
  }
  detail::write_run_config(run_dir, config);
}

Tree Manager::Impl::load_entry(const CheckpointEntry& entry, const LoadOptions& load_options) {
  if (writing() && entry.step) {
    std::lock_guard<std::mutex> guard(mutex);
    protected_step = entry.step;
  }
  Tree tree = load_checkpoint(entry, load_options);
  if (!returnn) return tree;
  Tree* model = tree.is_map() ? tree.find(Key{std::string("model")}) : nullptr;
  if (model == nullptr) {
    throw Error(ErrorCode::kCorrupt, "a RETURNN checkpoint without its \"model\" entry", {.path = entry.path});
  }
  return std::move(*model);
}

void Manager::Impl::rethrow_error() {
  if (error) {
    std::exception_ptr failure = error;
    error = nullptr;
    std::rethrow_exception(failure);
  }
}

void Manager::Impl::wait_idle(std::unique_lock<std::mutex>& guard) {
  changed.wait(guard, [&] { return queue.empty() && !cleanup_due && !busy; });
}

void Manager::Impl::stop() noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex);
    stopping = true;
  }
  changed.notify_all();
  if (worker.joinable()) worker.join();
  lock.reset();
  follower = false;
}

void Manager::Impl::check_newer(int64_t step) const {
  if (last_step && step <= *last_step) {
    invalid("step " + std::to_string(step) + " is not newer than step " + std::to_string(*last_step) +
                ", the run's latest",
            run_dir);
  }
}

void Manager::Impl::commit_here(Job& job, std::unique_lock<std::mutex>& guard) {
  busy = true;
  guard.unlock();
  std::exception_ptr failure;
  try {
    commit(job);
  } catch (abi::__forced_unwind&) {
    guard.lock();
    busy = false;
    changed.notify_all();
    throw;  // the thread is being cancelled: let it end
  } catch (...) {
    failure = std::current_exception();
  }
  guard.lock();
  busy = false;
  if (failure && last_step == job.step) last_step = newest_committed();
  if (!failure && leader()) cleanup_due = true;
  changed.notify_all();
  if (failure) std::rethrow_exception(failure);
}


Manager::Manager(fs::path run_dir, ManagerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.run_dir = std::move(run_dir);
  m.options = std::move(options);
  if (m.options.max_in_flight == 0) invalid("max_in_flight must be at least 1");
  if (m.options.layout != "ckpt" && m.options.layout != "returnn") {
    invalid("layout must be \"ckpt\" or \"returnn\", not " + detail::quoted(m.options.layout));
  }
  m.returnn = m.options.layout == "returnn";
  if (m.returnn && !m.options.format.empty() && m.options.format != "torch") {
    invalid("a RETURNN directory holds torch files (epoch.NNN.pt): the returnn layout takes format \"torch\", not " +
            detail::quoted(m.options.format));
  }
  if (m.options.comm != nullptr) {
    if (m.returnn) invalid("a run saved by several ranks (comm) uses the ckpt layout, not returnn");
    if (!m.options.format.empty() && m.options.format != "safetensors") {
      invalid("a run saved by several ranks (comm) holds sharded safetensors states: format \"safetensors\", not " +
              detail::quoted(m.options.format));
    }
  }
  m.policies = configured_policies(m.options);
  const std::string format = m.options.format.empty() ? (m.returnn ? "torch" : "safetensors") : m.options.format;
  m.format = &save_format(m.run_dir, {.format = format});
  if (!m.format->capabilities().write) {
    throw Error(ErrorCode::kUnsupported, "the manager cannot save in " + std::string(m.format->id()) +
                                             ", which ckpt only reads");
  }
  if (m.format->capabilities().single_tensor) {
    throw Error(ErrorCode::kUnsupported,
                "the manager saves whole states; " + std::string(m.format->id()) + " holds one tensor");
  }
  std::error_code error;
  if (m.options.read_only) {
    if (!fs::is_directory(m.run_dir, error)) {
      throw Error(ErrorCode::kNotFound, "not a run directory (no such directory)", {.path = m.run_dir});
    }
    // A RETURNN directory a manager writes reads as one, whatever the options say.
    const std::optional<detail::RunConfig> persisted = detail::read_run_config(m.run_dir);
    if (persisted && persisted->layout == "returnn") m.returnn = true;
    return;
  }
  // Takes the lock, removes leftovers, records the policies, and learns
  // the newest step: the one process's, or rank 0's of a sharded run.
  const auto open_writer = [&] {
    // Another tool's run is refused before anything is written into it (the
    // lock file included); checked again below, under the lock.
    const auto refuse_foreign = [&] {
      const std::optional<detail::RunConfig> persisted = detail::read_run_config(m.run_dir);
      if (persisted && persisted->layout != m.options.layout) {
        invalid("the run directory is managed in the " + persisted->layout + " layout, not " + m.options.layout,
                m.run_dir);
      }
      if (m.returnn) {
        const RunListing other = list_run_directory(m.run_dir);
        if (other.layout != "returnn" && other.layout != "empty") {
          invalid("the directory holds a " + other.layout + " run; the returnn layout writes only RETURNN's", m.run_dir);
        }
        return;
      }
      if (detail::list_ckpt_run(m.run_dir)) return;
      const RunListing other = list_run_directory(m.run_dir);
      if (other.layout != "empty") {
        invalid("the directory holds a " + other.layout + " run; the manager writes only its own layout", m.run_dir);
      }
    };
    if (fs::is_directory(m.run_dir, error)) refuse_foreign();
    fs::create_directories(m.run_dir, error);
    if (!fs::is_directory(m.run_dir)) {
      throw Error(ErrorCode::kIo, "cannot create the run directory: " + error.message(), {.path = m.run_dir});
    }
    m.lock = std::make_unique<detail::RunLock>(m.run_dir);
    refuse_foreign();
    detail::remove_leftovers(m.run_dir);
    const std::optional<RunListing> listing = detail::list_ckpt_run(m.run_dir);
    const std::optional<detail::RunConfig> persisted = detail::read_run_config(m.run_dir);
    m.config.format = std::string(m.format->id());
    m.config.layout = m.options.layout;
    if (persisted) m.config.committed_epochs = persisted->committed_epochs;
    std::set<int64_t> forever(m.options.keep_steps.begin(), m.options.keep_steps.end());
    if (persisted) forever.insert(persisted->keep_forever.begin(), persisted->keep_forever.end());
    m.config.keep_forever.assign(forever.begin(), forever.end());
    for (const RetentionPolicy& policy : m.policies) {
      if (const auto* custom = std::get_if<CustomPolicy>(&policy)) {
        CustomPolicy recorded{.keep = {}, .last_kept = custom->last_kept};
        if (persisted) {
          for (const RetentionPolicy& old : persisted->policies) {
            if (const auto* old_custom = std::get_if<CustomPolicy>(&old)) recorded.last_kept = old_custom->last_kept;
          }
        }
        m.config.policies.push_back(recorded);
      } else {
        m.config.policies.push_back(policy);
      }
    }
    detail::write_run_config(m.run_dir, m.config);
    if (m.returnn) {
      for (const CheckpointEntry& entry : m.committed()) {  // RETURNN's own epochs count, steps where known
        if (entry.epoch && (!m.last_epoch || *entry.epoch > *m.last_epoch)) m.last_epoch = entry.epoch;
        if (entry.step && (!m.last_step || *entry.step > *m.last_step)) m.last_step = entry.step;
      }
      m.committed_step = m.last_step;
      m.committed_epoch = m.last_epoch;
    } else if (listing && !listing->checkpoints.empty()) {
      const CheckpointEntry& newest = listing->checkpoints.back();
      m.last_step = newest.step;
      m.last_record = detail::read_step_record(newest.files.front());
    }
  };
  if (m.options.comm == nullptr) {
    open_writer();
  } else {
    Communicator& comm = *m.options.comm;
    distributed_detail::check_communicator(comm, m.run_dir);
    // Rank 0 opens; every rank hears its outcome and its newest step.
    const std::vector<std::string> opened = distributed_detail::exchange(comm, m.run_dir, [&] {
      distributed_detail::Encoder out;
      if (comm.rank() != 0) return out.take();
      open_writer();
      out.u64(m.last_step ? 1 : 0);
      out.u64(m.last_step ? static_cast<uint64_t>(*m.last_step) : 0);
      return out.take();
    });
    m.comm = &comm;
    if (comm.rank() != 0) {
      distributed_detail::Decoder in(opened[0], 0);
      const bool any = in.u64() != 0;
      const auto newest = static_cast<int64_t>(in.u64());
      in.finish();
      if (any) m.last_step = newest;
      m.committed_step = m.last_step;
      m.follower = true;
    }
  }
  m.worker = std::thread([&m] { m.worker_loop(); });
}

Manager::~Manager() {
  if (impl_) impl_->stop();
}

const fs::path& Manager::run_dir() const noexcept { return impl_->run_dir; }

namespace {

// The checks every save makes before it is queued: a writing manager, the
// metrics' names, the step's sign.
void check_save(bool writing, bool closed, const fs::path& run_dir, int64_t step, const SaveStepOptions& options) {
  if (!writing) invalid(closed ? "the manager is closed" : "the manager is read-only", run_dir);
  for (const auto& [name, value] : options.metrics) {
    if (name.empty() || !detail::valid_utf8(name)) invalid("a metric's name must be non-empty UTF-8: " + detail::quoted(name));
  }
  if (step < 0) invalid("a step must be >= 0, not " + std::to_string(step));
}

}  // namespace

void Manager::save(int64_t step, const Tree& state, const SaveStepOptions& options) {
  if (impl_->comm != nullptr) {
    save_sharded(step, state, {}, options);
    return;
  }
  save(step, std::vector<StatePart>{{.name = "state", .state = state}}, options);
}

void Manager::save(int64_t step, const std::vector<StatePart>& parts, const SaveStepOptions& options) {
  Impl& m = *impl_;
  check_save(m.writing(), m.closed, m.run_dir, step, options);
  if (m.comm != nullptr) invalid("a run saved by several ranks (comm) takes no state in parts", m.run_dir);
  if (parts.empty()) invalid("a checkpoint needs at least one state part");
  std::set<std::string_view> names;
  for (const StatePart& part : parts) {
    detail::validate_part_name(part.name);
    if (!names.insert(part.name).second) invalid("two state parts are named " + detail::quoted(part.name));
    if (parts.size() > 1 && !part.state.is_map()) {
      invalid("a state saved in parts is a map in each part; part " + detail::quoted(part.name) + " is not");
    }
  }
  if (m.returnn) {
    detail::validate_returnn_parts(parts);
    if (!options.epoch) {
      invalid("a RETURNN directory names its checkpoints by epoch: save() needs the epoch", m.run_dir);
    }
    if (*options.epoch < 1) invalid("RETURNN's epochs start at 1, not " + std::to_string(*options.epoch), m.run_dir);
    const bool optimizer = std::any_of(parts.begin(), parts.end(), [](const StatePart& p) { return p.name == "optimizer"; });
    if (!optimizer && detail::returnn_has_optimizer_states(m.run_dir)) {
      invalid("the directory holds optimizer states (epoch.NNN.opt.pt), and RETURNN resumes only from an epoch "
              "that has one: save an \"optimizer\" part too",
              m.run_dir);
    }
  }
  std::unique_lock<std::mutex> guard(m.mutex);
  m.rethrow_error();
  m.check_newer(step);
  if (m.returnn && m.last_epoch && *options.epoch <= *m.last_epoch) {
    invalid("epoch " + std::to_string(*options.epoch) + " is not newer than epoch " + std::to_string(*m.last_epoch) +
                ", the run's latest",
            m.run_dir);
  }
  auto job = std::make_shared<Impl::Job>();
  job->step = step;
  job->options = options;
  if (options.blocking) {
    // The saves before it first, so that their failure is reported here.
    m.changed.wait(guard, [&] { return m.queue.empty(); });
    m.rethrow_error();
    job->parts = parts;  // the caller waits: its memory stays as it is
  } else {
    m.changed.wait(guard, [&] { return m.queue.size() < m.options.max_in_flight; });
    m.rethrow_error();
    Buffer spare = std::move(m.spare);
    m.spare = Buffer();
    guard.unlock();
    // One snapshot of all parts (one block; ties across parts stay tied).
    Tree together = Tree::list();
    for (const StatePart& part : parts) together.push_back(part.state);
    detail::Snapshot snapshot = detail::snapshot_state(together, std::move(spare));
    for (size_t i = 0; i < parts.size(); ++i) {
      job->parts.push_back({.name = parts[i].name, .state = std::move(snapshot.state[i])});
    }
    job->block = std::move(snapshot.block);
    guard.lock();
  }
  m.last_step = step;
  if (m.returnn) m.last_epoch = options.epoch;
  m.queue.push_back(job);
  m.changed.notify_all();
  if (!options.blocking) return;
  m.changed.wait(guard, [&] { return job->done; });
  if (job->error) std::rethrow_exception(job->error);
}

void Manager::save_sharded(int64_t step, const Tree& local_tree, const std::map<std::string, ShardSpec>& shards,
                           const SaveStepOptions& options) {
  Impl& m = *impl_;
  check_save(m.writing(), m.closed, m.run_dir, step, options);
  if (m.returnn) invalid("a RETURNN directory holds no sharded states", m.run_dir);
  if (m.format->id() != "safetensors") {
    invalid("a sharded state is safetensors shards: save_sharded needs a manager of format \"safetensors\", not " +
                detail::quoted(std::string(m.format->id())),
            m.run_dir);
  }
  std::unique_lock<std::mutex> guard(m.mutex);
  m.rethrow_error();
  m.check_newer(step);
  auto job = std::make_shared<Impl::Job>();
  job->step = step;
  job->options = options;
  job->sharded = true;
  job->shards = shards;
  // In the background only where the engine lets another thread run the
  // collectives (Communicator::callable_from_any_thread).
  const bool background = !options.blocking && m.sharded_comm().callable_from_any_thread();
  if (!background) {
    job->options.blocking = true;
    // The saves before it and the cleanup after them first: the protocol
    // runs on this thread, one commit at a time.
    m.wait_idle(guard);
    m.rethrow_error();
    job->local_tree = local_tree;  // the caller waits: its memory stays as it is
    m.last_step = step;
    m.commit_here(*job, guard);
    return;
  }
  m.changed.wait(guard, [&] { return m.queue.size() < m.options.max_in_flight; });
  m.rethrow_error();
  Buffer spare = std::move(m.spare);
  m.spare = Buffer();
  guard.unlock();
  detail::Snapshot snapshot = detail::snapshot_state(local_tree, std::move(spare));
  job->local_tree = std::move(snapshot.state);
  job->block = std::move(snapshot.block);
  guard.lock();
  m.last_step = step;
  m.queue.push_back(job);
  m.changed.notify_all();
}

std::vector<CheckpointEntry> Manager::list() const {
  const Impl& m = *impl_;
  std::vector<CheckpointEntry> entries = m.committed();
  // kept_by as the run recorded it: a reader's, and a rank other than 0 of
  // a sharded run (rank 0 keeps the run's records: its policies, the steps
  // kept forever).
  if (!m.writing() || m.follower) return entries;
  std::optional<int64_t> keep;
  std::vector<RetentionPolicy> live;
  {
    std::lock_guard<std::mutex> guard(impl_->mutex);
    live = m.live_policies();
    keep = m.protected_step;
  }
  detail::fill_kept_by(entries, live);
  for (CheckpointEntry& entry : entries) {
    if (keep && entry.step == keep) entry.kept_by.push_back("restored from");
  }
  return entries;
}

std::optional<CheckpointEntry> Manager::latest() const {
  std::vector<CheckpointEntry> entries = list();
  if (entries.empty()) return std::nullopt;
  return std::move(entries.back());
}

std::optional<CheckpointEntry> Manager::best(const std::string& metric, MetricMode mode) const {
  std::vector<CheckpointEntry> entries = list();
  std::optional<size_t> found;
  double best_value = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto value = entries[i].metrics.find(metric);
    if (value == entries[i].metrics.end() || std::isnan(value->second)) continue;
    const double key = mode == MetricMode::kMin ? value->second : -value->second;
    if (!found || key <= best_value) {  // <=: among ties the newer one
      found = i;
      best_value = key;
    }
  }
  if (!found) return std::nullopt;
  return std::move(entries[*found]);
}

Tree Manager::load(int64_t step, const LoadOptions& options) {
  for (const CheckpointEntry& entry : impl_->committed()) {
    if (entry.step == step) return impl_->load_entry(entry, options);
  }
  throw Error(ErrorCode::kNotFound, "the run has no committed checkpoint of step " + std::to_string(step),
              {.path = impl_->run_dir});
}

std::optional<Tree> Manager::load_latest(const LoadOptions& options) {
  const std::vector<CheckpointEntry> entries = impl_->committed();
  if (entries.empty()) return std::nullopt;
  return impl_->load_entry(entries.back(), options);
}

std::optional<RestoreReport> Manager::restore_latest(const Tree& target, const RestoreOptions& options) {
  const std::optional<Tree> source = load_latest();
  if (!source) return std::nullopt;
  return restore(target, *source, options);
}

void Manager::wait() {
  Impl& m = *impl_;
  if (!m.worker.joinable()) return;
  {
    std::unique_lock<std::mutex> guard(m.mutex);
    m.wait_idle(guard);
  }
  detail::drain_deferred_releases();  // what the cleanup removed is gone from the disk too
  // A sharded run: until rank 0's cleanup is done too (it passes the barrier after it).
  if (m.comm != nullptr && m.writing()) m.comm->barrier();
  std::unique_lock<std::mutex> guard(m.mutex);
  m.rethrow_error();
}

void Manager::close() {
  Impl& m = *impl_;
  if (m.closed) return;
  std::exception_ptr failure;
  if (m.worker.joinable()) {
    std::unique_lock<std::mutex> guard(m.mutex);
    m.wait_idle(guard);
    failure = m.error;
    m.error = nullptr;
  }
  detail::drain_deferred_releases();  // what pruning removed is gone from the disk too
  m.stop();
  m.closed = true;
  if (failure) std::rethrow_exception(failure);
}

}  // namespace ckpt
