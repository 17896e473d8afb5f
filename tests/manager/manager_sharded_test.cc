// The manager of a run that several ranks save together (issue 20;
// ManagerOptions::comm, Manager::save_sharded), with ranks that are threads
// of this process (ThreadGroup): one step directory per sharded checkpoint,
// retention of whole step directories, asynchronous saves, a rank that
// fails or dies mid-save, the lock held by another writer. The same under
// real MPI: tests/distributed/mpi_sharded_test.sh.

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <thread>

#include "ckpt/box.h"
#include "ckpt/checkpoint.h"
#include "ckpt/distributed.h"
#include "ckpt/error.h"
#include "ckpt/manager.h"
#include "core/checksum.h"
#include "core/text.h"
#include "io/atomic_directory.h"
#include "io/deferred_release.h"
#include "manager/manager_support.h"
#include "manager/step_record.h"
#include "support/random_tensor.h"
#include "support/dying_communicator.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::random_tensor;
using testing::TempDir;

constexpr size_t kRanks = 4;

// Runs `body` on `size` ranks, one thread each, each with its own
// communicator of one ThreadGroup; returns each rank's Error (nullopt where
// it returned).
std::vector<std::optional<Error>> on_ranks(size_t size, const std::function<void(Communicator&)>& body) {
  ThreadGroup group(size);
  std::vector<std::optional<Error>> errors(size);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < size; ++r) {
    threads.emplace_back([&, r, comm = group.communicator(r)]() mutable {
      try {
        body(*comm);
      } catch (const Error& error) {
        errors[r] = error;
      }
      comm.reset();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return errors;
}

void expect_no_errors(const std::vector<std::optional<Error>>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_FALSE(errors[r]) << "rank " << r << ": " << errors[r]->what();
}

// A communicator that forwards to another but declares its collectives
// callable from the creating thread only (as MPI below MPI_THREAD_MULTIPLE).
class OneThreadCommunicator final : public Communicator {
 public:
  explicit OneThreadCommunicator(Communicator& inner) : inner_(inner) {}
  size_t rank() const override { return inner_.rank(); }
  size_t size() const override { return inner_.size(); }
  void barrier() override { inner_.barrier(); }
  std::vector<std::string> all_gather(std::string_view bytes) override { return inner_.all_gather(bytes); }
  std::string broadcast(std::string_view bytes, size_t root) override { return inner_.broadcast(bytes, root); }

 private:
  Communicator& inner_;
};

class ManagerShardedTest : public ::testing::Test {
 protected:
  // The global state of step `step`: w [10, 3] split by rows over the
  // ranks, grid [4, 6] in 2x2 blocks, bias [3] replicated, an integer.
  Tensor w(int64_t step) const { return random_tensor(DType::kFloat32, {10, 3}, 100 + uint64_t(step)); }
  Tensor grid(int64_t step) const { return random_tensor(DType::kBFloat16, {4, 6}, 200 + uint64_t(step)); }
  Tensor bias(int64_t step) const { return random_tensor(DType::kInt64, {3}, 300 + uint64_t(step)); }

  static Box rows_of(size_t rank) {
    const int64_t begin = rank < 2 ? int64_t(rank) * 3 : 6 + int64_t(rank - 2) * 2;  // 3, 3, 2, 2 rows
    return {.offsets = {begin, 0}, .sizes = {rank < 2 ? 3 : 2, 3}};
  }
  static Box block_of(size_t rank) {
    return {.offsets = {int64_t(rank / 2) * 2, int64_t(rank % 2) * 3}, .sizes = {2, 3}};
  }

  // Rank `rank`'s tree of step `step` and its shards.
  std::pair<Tree, std::map<std::string, ShardSpec>> local_state(int64_t step, size_t rank) const {
    Tree model = Tree::map();
    model.set("w", read_box(w(step), rows_of(rank)));
    model.set("grid", read_box(grid(step), block_of(rank)));
    model.set("bias", bias(step));
    Tree tree = Tree::map();
    tree.set("model", std::move(model));
    tree.set("step", Tree(step));
    std::map<std::string, ShardSpec> shards = {
        {"model.w", {.global_shape = {10, 3}, .offsets = rows_of(rank).offsets}},
        {"model.grid", {.global_shape = {4, 6}, .offsets = block_of(rank).offsets}},
    };
    return {std::move(tree), std::move(shards)};
  }

  // `tree` is step `step`'s whole state, bit for bit.
  void expect_whole(const Tree& tree, int64_t step) const {
    EXPECT_TRUE(tree.at("model.w").tensor().equals(w(step))) << "step " << step;
    EXPECT_TRUE(tree.at("model.grid").tensor().equals(grid(step))) << "step " << step;
    EXPECT_TRUE(tree.at("model.bias").tensor().equals(bias(step))) << "step " << step;
    EXPECT_EQ(tree.at("step").integer(), step);
  }

  // Saves `steps` on kRanks ranks, each opening its manager with `options`.
  void save_steps(const std::vector<int64_t>& steps, ManagerOptions options, bool blocking = true) {
    expect_no_errors(on_ranks(kRanks, [&](Communicator& comm) {
      ManagerOptions mine = options;
      mine.comm = &comm;
      Manager manager(run, mine);
      for (int64_t step : steps) {
        const auto [tree, shards] = local_state(step, comm.rank());
        manager.save_sharded(step, tree, shards,
                             {.metrics = {{"loss", 1.0 / double(step)}}, .blocking = blocking});
      }
      manager.close();
    }));
    detail::drain_deferred_releases();
  }

  TempDir temp;
  fs::path run = temp / "run";
};

TEST_F(ManagerShardedTest, ThreeStepsKeepLastTwoListAndLoadBitExact) {
  save_steps({1, 2, 3}, {.keep_last = 2, .fsync = false});
  // Retention removed step 1's whole directory, every shard of it.
  EXPECT_FALSE(fs::exists(run / "step-00000001"));
  EXPECT_EQ(detail::AtomicDirectory::leftover_temporaries(run), std::vector<fs::path>{});
  Manager reader(run, {.read_only = true});
  const std::vector<CheckpointEntry> entries = reader.list();
  ASSERT_EQ(testing::listed_steps(entries), (std::vector<int64_t>{2, 3}));
  for (const CheckpointEntry& entry : entries) {
    const int64_t step = *entry.step;
    const fs::path step_dir = run / detail::step_directory_name(step);
    EXPECT_EQ(entry.path, step_dir / "state");
    EXPECT_EQ(entry.metrics.at("loss"), 1.0 / double(step));
    // The entry's path is a checkpoint ckpt::load opens (hf_sharded).
    expect_whole(load(entry.path), step);
    expect_whole(reader.load(step), step);
    // By boxes: other boxes than the saving ranks'.
    const Box w_rows{.offsets = {4, 0}, .sizes = {5, 3}};
    const Box grid_column{.offsets = {0, 2}, .sizes = {4, 1}};
    const Tree boxes = reader.load(step, {.boxes = {{"model.w", w_rows}, {"model.grid", grid_column}}});
    EXPECT_TRUE(boxes.at("model.w").tensor().equals(read_box(w(step), w_rows)));
    EXPECT_TRUE(boxes.at("model.grid").tensor().equals(read_box(grid(step), grid_column)));
    // checkpoint.json lists each rank's shard and the index, with sizes and
    // xxh3 of the files as they are.
    const detail::StepRecord record = detail::read_step_record(step_dir);
    EXPECT_EQ(record.format, "hf_sharded");
    EXPECT_EQ(record.state, "state");
    std::vector<std::string> paths;
    for (const detail::RecordedFile& file : record.files) {
      paths.push_back(file.path);
      const std::string bytes = testing::file_text(step_dir / file.path);
      EXPECT_EQ(file.size, bytes.size()) << file.path;
      EXPECT_EQ(file.xxh3,
                detail::hex_digits(detail::xxh3_64(std::as_bytes(std::span(bytes.data(), bytes.size()))), 16))
          << file.path;
    }
    EXPECT_EQ(paths, (std::vector<std::string>{"state/model-00001-of-00004.safetensors",
                                               "state/model-00002-of-00004.safetensors",
                                               "state/model-00003-of-00004.safetensors",
                                               "state/model-00004-of-00004.safetensors",
                                               "state/model.safetensors.index.json"}));
  }
  // A one-process manager of the run sees the same entries and goes on.
  Manager one(run, {.keep_last = 2, .fsync = false});
  EXPECT_EQ(testing::listed_steps(one.list()), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(one.latest()->path, run / "step-00000003" / "state");
  expect_whole(*one.load_latest(), 3);
  EXPECT_THROW(one.save_sharded(3, local_state(3, 0).first, {}), Error);  // not newer
}

TEST_F(ManagerShardedTest, EveryRankListsLoadsItsBoxesAndRestores) {
  save_steps({5, 6}, {.fsync = false});
  expect_no_errors(on_ranks(kRanks, [&](Communicator& comm) {
    Manager manager(run, {.fsync = false, .comm = &comm});
    EXPECT_EQ(testing::listed_steps(manager.list()), (std::vector<int64_t>{5, 6}));
    EXPECT_EQ(*manager.latest()->step, 6);
    const Box rows = rows_of(comm.rank());
    const Tree mine = manager.load(6, {.boxes = {{"model.w", rows}}});
    EXPECT_TRUE(mine.at("model.w").tensor().equals(read_box(w(6), rows))) << "rank " << comm.rank();
    Tree target = Tree::map();
    Tree model = Tree::map();
    model.set("w", Tensor::zeros(DType::kFloat32, {10, 3}));
    model.set("grid", Tensor::zeros(DType::kBFloat16, {4, 6}));
    model.set("bias", Tensor::zeros(DType::kInt64, {3}));
    target.set("model", std::move(model));
    target.set("step", Tree(int64_t{0}));
    const std::optional<RestoreReport> report = manager.restore_latest(target);
    ASSERT_TRUE(report);
    EXPECT_TRUE(report->missing.empty());
    // The next save goes on from the run's newest step, on every rank.
    EXPECT_THROW(manager.save_sharded(6, local_state(6, comm.rank()).first, {}), Error);
    manager.close();
  }));
}

TEST_F(ManagerShardedTest, EveryRankListsWhatRankZeroKeepsAndWhy) {
  // Step 1 kept forever (rank 0's options decide), then keep_last = 1.
  expect_no_errors(on_ranks(kRanks, [&](Communicator& comm) {
    Manager manager(run, {.keep_last = 1, .fsync = false, .comm = &comm});
    for (int64_t step : {1, 2, 3}) {
      const auto [tree, shards] = local_state(step, comm.rank());
      manager.save_sharded(step, tree, shards, {.keep_forever = step == 1});
    }
    manager.wait();
    const std::vector<CheckpointEntry> entries = manager.list();
    EXPECT_EQ(testing::listed_steps(entries), (std::vector<int64_t>{1, 3})) << "rank " << comm.rank();
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_FALSE(entries[0].kept_by.empty()) << "rank " << comm.rank();
    // The same reasons on every rank: a rank's listing is the run's.
    std::string reasons;
    for (const CheckpointEntry& entry : entries) {
      for (const std::string& why : entry.kept_by) reasons += why + ";";
      reasons += "|";
    }
    const std::vector<std::string> all = comm.all_gather(reasons);
    for (size_t r = 1; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r;
    manager.close();
  }));
}

TEST_F(ManagerShardedTest, AsynchronousSavesSnapshotThenCommitOnWait) {
  expect_no_errors(on_ranks(kRanks, [&](Communicator& comm) {
    Manager manager(run, {.keep_last = 2, .max_in_flight = 2, .fsync = false, .comm = &comm});
    for (int64_t step : {1, 2, 3}) {
      auto [tree, shards] = local_state(step, comm.rank());
      manager.save_sharded(step, tree, shards, {.blocking = false});
      // The caller's memory changes once save returns: the snapshot does not.
      Tensor local_w = tree.at("model.w").tensor();  // shares the caller's memory
      for (std::byte& byte : local_w.mutable_bytes()) byte = std::byte{0xff};
    }
    manager.wait();
    EXPECT_EQ(testing::listed_steps(manager.list()), (std::vector<int64_t>{2, 3}));
    manager.close();
  }));
  detail::drain_deferred_releases();
  EXPECT_FALSE(fs::exists(run / "step-00000001"));
  Manager reader(run, {.read_only = true});
  expect_whole(reader.load(2), 2);
  expect_whole(reader.load(3), 3);
}

TEST_F(ManagerShardedTest, AnEngineOfOneThreadSavesBlockingWhenAskedForAsync) {
  expect_no_errors(on_ranks(kRanks, [&](Communicator& inner) {
    OneThreadCommunicator comm(inner);
    Manager manager(run, {.fsync = false, .comm = &comm});
    const auto [tree, shards] = local_state(4, comm.rank());
    manager.save_sharded(4, tree, shards, {.blocking = false});
    // Committed when save returns: it ran on this thread.
    EXPECT_EQ(testing::listed_steps(manager.list()), (std::vector<int64_t>{4}));
    manager.close();
  }));
  expect_whole(load(run / "step-00000004" / "state"), 4);
}

TEST_F(ManagerShardedTest, ARankFailingAtTheWriteCommitsNothingAndTheNextSaveWorks) {
  save_steps({1}, {.fsync = false});
  expect_no_errors(on_ranks(kRanks, [&](Communicator& comm) {
    Manager manager(run, {.fsync = false, .comm = &comm});
    auto [tree, shards] = local_state(2, comm.rank());
    // Refused by rank 2's shard writer, after the others wrote theirs.
    if (comm.rank() == 2) tree.set("__ckpt_piece__/x", bias(2));
    try {
      manager.save_sharded(2, tree, shards);
      ADD_FAILURE() << "rank " << comm.rank() << " returned";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
      EXPECT_NE(std::string(error.what()).find("rank 2: "), std::string::npos) << error.what();
    }
    EXPECT_EQ(testing::listed_steps(manager.list()), (std::vector<int64_t>{1}));
    // The step is free again: the next save of it works.
    const auto [good, good_shards] = local_state(2, comm.rank());
    manager.save_sharded(2, good, good_shards);
    manager.close();
  }));
  detail::drain_deferred_releases();
  EXPECT_EQ(detail::AtomicDirectory::leftover_temporaries(run), std::vector<fs::path>{});
  Manager reader(run, {.read_only = true});
  EXPECT_EQ(testing::listed_steps(reader.list()), (std::vector<int64_t>{1, 2}));
  expect_whole(reader.load(1), 1);
  expect_whole(reader.load(2), 2);
}

TEST_F(ManagerShardedTest, AnAsynchronousSaveThatFailsIsRaisedOnEveryRankBySaveOrWait) {
  save_steps({1}, {.fsync = false});
  expect_no_errors(on_ranks(kRanks, [&](Communicator& comm) {
    Manager manager(run, {.fsync = false, .comm = &comm});
    auto [tree, shards] = local_state(2, comm.rank());
    if (comm.rank() == 1) tree.set("__ckpt_piece__/x", bias(2));
    manager.save_sharded(2, tree, shards, {.blocking = false});
    EXPECT_THROW(manager.wait(), Error) << "rank " << comm.rank();
    EXPECT_EQ(testing::listed_steps(manager.list()), (std::vector<int64_t>{1}));
    manager.close();
  }));
}

TEST_F(ManagerShardedTest, ARankThatDiesMidSaveFailsTheOthersAndCommitsNothing) {
  save_steps({1}, {.fsync = false});
  ThreadGroup group(kRanks);
  std::vector<std::optional<Error>> errors(kRanks);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < kRanks; ++r) {
    std::unique_ptr<Communicator> comm = group.communicator(r);
    // Rank 3 leaves after its shard is written, before it is gathered (its
    // 1st collective opens the manager, the 2nd announces, the 3rd gathers).
    if (r == 3) comm = std::make_unique<testing::DyingCommunicator>(std::move(comm), 3);
    threads.emplace_back([&, r, comm = std::move(comm)]() mutable {
      try {
        Manager manager(run, {.fsync = false, .comm = comm.get()});
        const auto [tree, shards] = local_state(2, r);
        manager.save_sharded(2, tree, shards);
      } catch (const Error& error) {
        errors[r] = error;
      } catch (const std::runtime_error&) {  // the dying rank
      }
      comm.reset();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " returned";
    EXPECT_EQ(errors[r]->code(), ErrorCode::kIo) << errors[r]->what();
  }
  Manager reader(run, {.read_only = true});
  EXPECT_EQ(testing::listed_steps(reader.list()), (std::vector<int64_t>{1}));
  expect_whole(reader.load(1), 1);
  // The next manager removes what the dead save left.
  save_steps({2}, {.fsync = false});
  EXPECT_EQ(detail::AtomicDirectory::leftover_temporaries(run), std::vector<fs::path>{});
  expect_whole(reader.load(2), 2);
}

TEST_F(ManagerShardedTest, TheLockHeldByAnotherWriterFailsEveryRank) {
  Manager holder(run, {.fsync = false});
  const auto errors = on_ranks(kRanks, [&](Communicator& comm) { Manager manager(run, {.comm = &comm}); });
  for (size_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " opened the run";
    EXPECT_EQ(errors[r]->code(), ErrorCode::kIo) << errors[r]->what();
    EXPECT_NE(std::string(errors[r]->what()).find("rank 0: "), std::string::npos) << errors[r]->what();
    EXPECT_NE(std::string(errors[r]->what()).find("pid " + std::to_string(::getpid())), std::string::npos)
        << errors[r]->what();
  }
  holder.close();
  // Free again: the ranks open it.
  save_steps({1}, {.fsync = false});
}

TEST_F(ManagerShardedTest, RanksThatSaveDifferentStepsFailAlike) {
  const auto errors = on_ranks(kRanks, [&](Communicator& comm) {
    Manager manager(run, {.fsync = false, .comm = &comm});
    const int64_t step = comm.rank() == 1 ? 8 : 7;
    const auto [tree, shards] = local_state(step, comm.rank());
    manager.save_sharded(step, tree, shards);
  });
  for (size_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " returned";
    EXPECT_EQ(errors[r]->code(), ErrorCode::kInvalidArgument) << errors[r]->what();
    EXPECT_NE(std::string(errors[r]->what()).find("rank 1 saves 'step 8' where rank 0 saves 'step 7'"),
              std::string::npos)
        << errors[r]->what();
  }
  EXPECT_EQ(list_run_directory(run).checkpoints.size(), 0u);
}

TEST_F(ManagerShardedTest, OptionsThatASharedRunCannotTakeAreRefused) {
  expect_no_errors(on_ranks(2, [&](Communicator& comm) {
    EXPECT_THROW(Manager(run, {.format = "torch", .comm = &comm}), Error);
    EXPECT_THROW(Manager(run, {.layout = "returnn", .comm = &comm}), Error);
    Manager manager(run, {.fsync = false, .comm = &comm});
    // A whole state through save(): every tensor written once, by rank 0.
    manager.save(1, testing::small_state(1));
    EXPECT_THROW(manager.save(2, std::vector<StatePart>{{.name = "a", .state = testing::small_state(2)}}), Error);
    manager.close();
  }));
  EXPECT_TRUE(load(run / "step-00000001" / "state") == testing::small_state(1));
  // A one-process manager of another format writes no sharded state.
  Manager tf(temp / "tf-run", {.format = "tf", .fsync = false});
  EXPECT_THROW(tf.save_sharded(1, local_state(1, 0).first, {}), Error);
  EXPECT_EQ(list_run_directory(temp / "tf-run").checkpoints.size(), 0u);
}

}  // namespace
}  // namespace ckpt
