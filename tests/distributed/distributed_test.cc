// Sharded saves across ranks (issue 20) with ranks that are threads of this
// process (ThreadGroup): save on 4, load on 1, 2 and 3 bit-exact, replicated
// boxes written once, a rank that fails or leaves mid-save commits nothing,
// bad input one defect at a time; the planning and the messages apart.

#include <gtest/gtest.h>

#include <exception>
#include <fstream>
#include <functional>
#include <thread>

#include "ckpt/box.h"
#include "ckpt/checkpoint.h"
#include "ckpt/distributed.h"
#include "distributed/plan.h"
#include "distributed/wire.h"
#include "formats/hf_sharded/layout.h"
#include "io/atomic_directory.h"
#include "io/deferred_release.h"
#include "support/peak_memory.h"
#include "support/random_tensor.h"
#include "support/dying_communicator.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::random_tensor;
using testing::TempDir;

// Runs `body` on `size` ranks, one thread each; returns each rank's Error
// (nullopt where it returned).
std::vector<std::optional<Error>> run_ranks(size_t size, const std::function<void(Communicator&)>& body) {
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

void expect_all_ok(const std::vector<std::optional<Error>>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_FALSE(errors[r]) << "rank " << r << ": " << errors[r]->what();
}

// The box `box` of `global` as a tensor of its own.
Tensor part(const Tensor& global, const Box& box) { return read_box(global, box); }

// Splits [0, n) into `parts` ranges as evenly as numpy's array_split does.
std::vector<std::pair<int64_t, int64_t>> split(int64_t n, size_t parts) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t begin = 0;
  for (size_t p = 0; p < parts; ++p) {
    const int64_t count = n / int64_t(parts) + (int64_t(p) < n % int64_t(parts) ? 1 : 0);
    ranges.emplace_back(begin, count);
    begin += count;
  }
  return ranges;
}

class DistributedTest : public ::testing::Test {
 protected:
  // The global state: w [10, 3] split by rows, grid [4, 6] in 2x2 blocks,
  // bias [3] replicated, step an integer.
  Tensor w = random_tensor(DType::kFloat32, {10, 3}, 1);
  Tensor grid = random_tensor(DType::kBFloat16, {4, 6}, 2);
  Tensor bias = random_tensor(DType::kInt64, {3}, 3);

  // Rank `rank`'s (of 4) tree and shards.
  std::pair<Tree, std::map<std::string, ShardSpec>> local_state(size_t rank) const {
    const auto [begin, count] = split(10, 4)[rank];
    const Box rows{.offsets = {begin, 0}, .sizes = {count, 3}};
    const Box block{.offsets = {int64_t(rank / 2) * 2, int64_t(rank % 2) * 3}, .sizes = {2, 3}};
    Tree model = Tree::map();
    model.set("w", part(w, rows));
    model.set("grid", part(grid, block));
    model.set("bias", bias);
    Tree tree = Tree::map();
    tree.set("model", std::move(model));
    tree.set("step", Tree(int64_t{7}));
    std::map<std::string, ShardSpec> shards = {
        {"model.w", {.global_shape = {10, 3}, .offsets = rows.offsets}},
        {"model.grid", {.global_shape = {4, 6}, .offsets = block.offsets}},
    };
    return {std::move(tree), std::move(shards)};
  }

  void save_on_four(const fs::path& path) {
    expect_all_ok(run_ranks(4, [&](Communicator& comm) {
      const auto [tree, shards] = local_state(comm.rank());
      save_sharded(path, tree, shards, comm, {.fsync = false});
    }));
  }

  TempDir temp;
};

TEST_F(DistributedTest, SavedOnFourRanksLoadsWholeOnOne) {
  save_on_four(temp / "step-1");
  const Tree loaded = load(temp / "step-1");
  EXPECT_TRUE(loaded.at("model.w").tensor().equals(w));
  EXPECT_TRUE(loaded.at("model.grid").tensor().equals(grid));
  EXPECT_TRUE(loaded.at("model.bias").tensor().equals(bias));
  EXPECT_EQ(loaded.at("step").integer(), 7);
  // One rank with a communicator of its own.
  expect_all_ok(run_ranks(1, [&](Communicator& comm) {
    const Tree mine = load_sharded(temp / "step-1", {}, comm);
    EXPECT_TRUE(mine.at("model.w").tensor().equals(w));
  }));
}

TEST_F(DistributedTest, SavedOnFourRanksLoadsAnyBoxesOnTwoAndThree) {
  save_on_four(temp / "step-1");
  for (size_t ranks : {2u, 3u}) {
    SCOPED_TRACE(ranks);
    expect_all_ok(run_ranks(ranks, [&](Communicator& comm) {
      const auto [begin, count] = split(10, ranks)[comm.rank()];
      const auto [col_begin, col_count] = split(6, ranks)[comm.rank()];
      const Box rows{.offsets = {begin, 0}, .sizes = {count, 3}};
      const Box columns{.offsets = {0, col_begin}, .sizes = {4, col_count}};
      const Tree mine = load_sharded(temp / "step-1", {{"model.w", rows}, {"model.grid", columns}}, comm);
      EXPECT_EQ(mine.at("model.w").tensor().shape(), rows.sizes);
      EXPECT_TRUE(mine.at("model.w").tensor().equals(part(w, rows)));
      EXPECT_TRUE(mine.at("model.grid").tensor().equals(part(grid, columns)));
      EXPECT_TRUE(mine.at("model.bias").tensor().equals(bias));  // left out: whole
    }));
  }
}

TEST_F(DistributedTest, ReplicatedBoxesAreWrittenOnceByTheLowestRankHoldingThem) {
  // bias on every rank; w's rows replicated in pairs (ranks 0, 1 hold rows
  // 0..4, ranks 2, 3 rows 5..9), as a 2-D mesh's replicated dimension gives.
  expect_all_ok(run_ranks(4, [&](Communicator& comm) {
    const int64_t begin = comm.rank() < 2 ? 0 : 5;
    Tree tree = Tree::map();
    tree.set("w", part(w, {.offsets = {begin, 0}, .sizes = {5, 3}}));
    tree.set("bias", bias);
    save_sharded(temp / "step", tree, {{"w", {.global_shape = {10, 3}, .offsets = {begin, 0}}}}, comm,
                 {.fsync = false});
  }));
  auto keys = [&](size_t rank) {
    std::vector<std::string> names;
    for (const Tree::Leaf& leaf : load(temp / "step" / hf_sharded_detail::shard_file_name(rank + 1, 4)).tensor_leaves()) {
      names.push_back(leaf.name);
    }
    return names;
  };
  EXPECT_EQ(keys(0), (std::vector<std::string>{"bias", "__ckpt_piece__/w/0,0"}));
  EXPECT_EQ(keys(1), std::vector<std::string>{});
  EXPECT_EQ(keys(2), (std::vector<std::string>{"__ckpt_piece__/w/5,0"}));
  EXPECT_EQ(keys(3), std::vector<std::string>{});
  const Tree loaded = load(temp / "step");
  EXPECT_TRUE(loaded.at("w").tensor().equals(w));
  EXPECT_TRUE(loaded.at("bias").tensor().equals(bias));
}

TEST_F(DistributedTest, ASaveReplacesTheCheckpointAtItsPath) {
  save_on_four(temp / "step");
  expect_all_ok(run_ranks(2, [&](Communicator& comm) {
    Tree tree = Tree::map();
    tree.set("x", bias);
    save_sharded(temp / "step", tree, {}, comm, {.fsync = false});
  }));
  const Tree loaded = load(temp / "step");
  EXPECT_EQ(loaded.tensor_leaves().size(), 1u);
  EXPECT_TRUE(loaded.at("x").tensor().equals(bias));
  EXPECT_FALSE(fs::exists(temp / "step" / hf_sharded_detail::shard_file_name(3, 4)));
}

// What a failed save must leave: the previous checkpoint, no temporaries.
void expect_previous_intact(const fs::path& path, const Tensor& w) {
  detail::drain_deferred_releases();  // a removed temporary is freed off the saving thread
  EXPECT_TRUE(load(path).at("model.w").tensor().equals(w));
  EXPECT_EQ(detail::AtomicDirectory::leftover_temporaries(path.parent_path()), std::vector<fs::path>{});
}

TEST_F(DistributedTest, ARankThatFailsMidSaveFailsEveryRankAndCommitsNothing) {
  save_on_four(temp / "step");
  const auto errors = run_ranks(4, [&](Communicator& comm) {
    auto [tree, shards] = local_state(comm.rank());
    // Refused by the shard writer, after the other ranks wrote theirs.
    if (comm.rank() == 2) tree.set("__ckpt_piece__/x", bias);
    tree.set("step", Tree(int64_t{8}));
    save_sharded(temp / "step", tree, shards, comm, {.fsync = false});
  });
  for (size_t r = 0; r < 4; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " returned";
    EXPECT_EQ(errors[r]->code(), ErrorCode::kUnsupported) << errors[r]->what();
    EXPECT_NE(std::string(errors[r]->what()).find("rank 2: "), std::string::npos) << errors[r]->what();
  }
  expect_previous_intact(temp / "step", w);
  EXPECT_EQ(load(temp / "step").at("step").integer(), 7);
}

TEST_F(DistributedTest, ARankThatDiesMidSaveNeverHangsTheOthersAndCommitsNothing) {
  save_on_four(temp / "step");
  for (size_t dying : {0u, 1u, 3u}) {
    for (int at : {1, 2, 3}) {  // before its write, after it (before the gather), at the commit's outcome
      SCOPED_TRACE("rank " + std::to_string(dying) + " dies at collective " + std::to_string(at));
      save_on_four(temp / "step");
      ThreadGroup group(4);
      std::vector<std::optional<Error>> errors(4);
      std::vector<std::thread> threads;
      for (size_t r = 0; r < 4; ++r) {
        std::unique_ptr<Communicator> comm = group.communicator(r);
        if (r == dying) comm = std::make_unique<testing::DyingCommunicator>(std::move(comm), at);
        threads.emplace_back([&, r, comm = std::move(comm)]() mutable {
          try {
            auto [tree, shards] = local_state(r);
            tree.set("step", Tree(int64_t{9}));
            save_sharded(temp / "step", tree, shards, *comm, {.fsync = false});
          } catch (const Error& error) {
            errors[r] = error;
          } catch (const std::runtime_error&) {  // the dying rank
          }
          comm.reset();
        });
      }
      for (std::thread& thread : threads) thread.join();
      for (size_t r = 0; r < 4; ++r) {
        if (r == dying) continue;
        ASSERT_TRUE(errors[r]) << "rank " << r << " returned";
        EXPECT_EQ(errors[r]->code(), ErrorCode::kIo) << errors[r]->what();
        EXPECT_NE(std::string(errors[r]->what()).find("left"), std::string::npos) << errors[r]->what();
      }
      // Before its shard was gathered: nothing committed. At the last
      // collective every shard was synced and rank 0 had renamed the step.
      EXPECT_EQ(load(temp / "step").at("step").integer(), at < 3 ? 7 : 9);
      EXPECT_TRUE(load(temp / "step").at("model.w").tensor().equals(w));
      // Rank 0 removed its temporary, but a rank still writing when the
      // others heard of the death may have added a file after that; the
      // next save removes what is left.
      save_on_four(temp / "step");
      detail::drain_deferred_releases();  // a replaced or abandoned directory is removed off the saving thread
      EXPECT_EQ(detail::AtomicDirectory::leftover_temporaries(temp.path()), std::vector<fs::path>{});
    }
  }
}

TEST_F(DistributedTest, BadInputFailsEveryRankWithTheSameError) {
  struct Case {
    const char* what;
    std::function<void(size_t rank, Tree& tree, std::map<std::string, ShardSpec>& shards)> spoil;
    ErrorCode code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"shard for a name that is not there",
       [](size_t rank, Tree&, auto& shards) {
         if (rank == 1) shards["model.nothing"] = {.global_shape = {1}, .offsets = {0}};
       },
       ErrorCode::kInvalidArgument, "no tensor leaf"},
      {"box outside its global shape",
       [](size_t rank, Tree&, auto& shards) {
         if (rank == 3) shards["model.w"].offsets = {9, 0};
       },
       ErrorCode::kInvalidArgument, "rank 3"},
      {"ranks disagree on the global shape",
       [](size_t rank, Tree&, auto& shards) {
         if (rank == 2) shards["model.w"].global_shape = {11, 3};
       },
       ErrorCode::kInvalidArgument, "global shape"},
      {"one rank holds it whole",
       [](size_t rank, Tree&, auto& shards) {
         if (rank == 2) shards.erase("model.grid");
       },
       ErrorCode::kInvalidArgument, "whole"},
      {"boxes overlap",
       [](size_t rank, Tree&, auto& shards) {
         if (rank == 1) shards["model.w"].offsets = {1, 0};
       },
       ErrorCode::kInvalidArgument, "overlap"},
      {"rank 0 does not name every tensor",
       [](size_t rank, Tree& tree, auto&) {
         if (rank == 1) tree.set("extra", Tensor::empty(DType::kInt8, {2}));
       },
       ErrorCode::kInvalidArgument, "tree"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const auto errors = run_ranks(4, [&](Communicator& comm) {
      auto [tree, shards] = local_state(comm.rank());
      c.spoil(comm.rank(), tree, shards);
      save_sharded(temp / "bad", tree, shards, comm, {.fsync = false});
    });
    for (size_t r = 0; r < 4; ++r) {
      ASSERT_TRUE(errors[r]) << "rank " << r << " returned";
      EXPECT_EQ(errors[r]->code(), c.code) << errors[r]->what();
      EXPECT_NE(std::string(errors[r]->what()).find(c.needle), std::string::npos) << errors[r]->what();
      EXPECT_EQ(std::string(errors[r]->what()), std::string(errors[0]->what()));
    }
    EXPECT_FALSE(fs::exists(temp / "bad"));
    detail::drain_deferred_releases();
    EXPECT_EQ(detail::AtomicDirectory::leftover_temporaries(temp.path()), std::vector<fs::path>{});
  }
}

TEST_F(DistributedTest, TheTargetMustBeASaveableDirectory) {
  fs::create_directories(temp / "other");
  std::ofstream(temp / "other" / "notes.txt") << "mine";
  const auto errors = run_ranks(2, [&](Communicator& comm) {
    save_sharded(temp / "other", Tree::map(), {}, comm, {.fsync = false});
  });
  for (const auto& error : errors) {
    ASSERT_TRUE(error);
    EXPECT_EQ(error->code(), ErrorCode::kInvalidArgument) << error->what();
    EXPECT_NE(std::string(error->what()).find("rank 0: "), std::string::npos) << error->what();
  }
  EXPECT_TRUE(fs::exists(temp / "other" / "notes.txt"));
}

TEST_F(DistributedTest, ALoadThatFailsOnOneRankFailsOnAll) {
  save_on_four(temp / "step");
  const auto errors = run_ranks(3, [&](Communicator& comm) {
    std::map<std::string, Box> boxes;
    if (comm.rank() == 1) boxes["model.w"] = {.offsets = {8, 0}, .sizes = {3, 3}};  // past the end
    load_sharded(temp / "step", boxes, comm);
  });
  for (const auto& error : errors) {
    ASSERT_TRUE(error);
    EXPECT_EQ(error->code(), ErrorCode::kInvalidArgument) << error->what();
    EXPECT_NE(std::string(error->what()).find("rank 1: "), std::string::npos) << error->what();
  }
  const auto missing = run_ranks(2, [&](Communicator& comm) { load_sharded(temp / "absent", {}, comm); });
  for (const auto& error : missing) {
    ASSERT_TRUE(error);
    EXPECT_EQ(error->code(), ErrorCode::kNotFound) << error->what();
  }
}

TEST_F(DistributedTest, ALoadedBoxCostsTheMemoryOfTheBoxNotOfTheTensor) {
  // 128 MiB saved by 4 ranks in pieces of 32 MiB (512 rows of 64 KiB each).
  const Tensor big = random_tensor(DType::kFloat32, {2048, 16384}, 9);
  expect_all_ok(run_ranks(4, [&](Communicator& comm) {
    const Box rows{.offsets = {int64_t(comm.rank()) * 512, 0}, .sizes = {512, 16384}};
    Tree tree = Tree::map();
    tree.set("big", read_box(big, rows));
    save_sharded(temp / "big", tree, {{"big", {.global_shape = {2048, 16384}, .offsets = rows.offsets}}}, comm,
                 {.fsync = false});
  }));
  // 16 MiB of it, inside one piece: the copy and the mapped pages it reads.
  const Box box{.offsets = {600, 0}, .sizes = {256, 16384}};
  const uint64_t before = testing::reset_peak_rss();
  Tree mine;
  expect_all_ok(run_ranks(1, [&](Communicator& comm) { mine = load_sharded(temp / "big", {{"big", box}}, comm); }));
  const uint64_t grown = testing::peak_rss_bytes() - before;
  EXPECT_LT(grown, 48 * testing::kMiB) << "a 16 MiB box of a 128 MiB tensor";
  EXPECT_TRUE(mine.at("big").tensor().equals(read_box(big, box)));
}

TEST(ThreadGroupTest, GathersAndBroadcastsInRankOrder) {
  const auto errors = run_ranks(3, [](Communicator& comm) {
    const std::vector<std::string> all = comm.all_gather(std::string(comm.rank() + 1, 'x'));
    EXPECT_EQ(all, (std::vector<std::string>{"x", "xx", "xxx"}));
    EXPECT_EQ(comm.broadcast(comm.rank() == 2 ? "from two" : "ignored", 2), "from two");
    comm.barrier();
    EXPECT_THROW(comm.broadcast("", 3), Error);
  });
  expect_all_ok(errors);
  ThreadGroup group(2);
  auto first = group.communicator(0);
  EXPECT_THROW(group.communicator(0), Error);
  EXPECT_THROW(group.communicator(2), Error);
  EXPECT_THROW(ThreadGroup(0), Error);
}

// ---- Planning (pure) ----

TEST(DistributedPlanTest, TheLowestHolderOfEachBoxWritesIt) {
  using distributed_detail::boxes_to_write;
  using distributed_detail::HeldBox;
  auto whole = [](std::string name) {
    return HeldBox{.name = std::move(name), .dtype = DType::kFloat32, .global_shape = {4},
                   .box = {.offsets = {0}, .sizes = {4}}, .sharded = false};
  };
  auto shard = [](int64_t offset) {
    return HeldBox{.name = "w", .dtype = DType::kFloat32, .global_shape = {4},
                   .box = {.offsets = {offset}, .sizes = {2}}, .sharded = true};
  };
  const std::vector<std::vector<HeldBox>> held = {
      {whole("b"), shard(0)}, {whole("b"), shard(0), whole("c")}, {shard(2)}, {whole("c"), shard(2)}};
  EXPECT_EQ(boxes_to_write(held, 0), (std::vector<bool>{true, true}));
  EXPECT_EQ(boxes_to_write(held, 1), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(boxes_to_write(held, 2), (std::vector<bool>{true}));
  EXPECT_EQ(boxes_to_write(held, 3), (std::vector<bool>{false, false}));

  HeldBox other_dtype = shard(2);
  other_dtype.dtype = DType::kFloat64;
  EXPECT_THROW(boxes_to_write({{shard(0)}, {other_dtype}}, 0), Error);
  HeldBox whole_w = whole("w");
  EXPECT_THROW(boxes_to_write({{shard(0)}, {whole_w}}, 1), Error);
}

TEST(DistributedPlanTest, HeldBoxesComeFromTheTreeAndItsShards) {
  Tree tree = Tree::map();
  tree.set("w", Tensor::empty(DType::kFloat32, {2, 3}));
  tree.set("b", Tensor::empty(DType::kFloat32, {3}));
  tree.set("n", Tree(int64_t{1}));
  const auto held = distributed_detail::held_boxes(tree, {{"w", {.global_shape = {4, 3}, .offsets = {2, 0}}}});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_TRUE(held[0].sharded);
  EXPECT_EQ(held[0].box, (Box{.offsets = {2, 0}, .sizes = {2, 3}}));
  EXPECT_FALSE(held[1].sharded);
  EXPECT_EQ(held[1].box, whole_box({3}));
  EXPECT_EQ(distributed_detail::decode_held(distributed_detail::encode_held(held), 0), held);
  EXPECT_THROW(distributed_detail::held_boxes(tree, {{"n", {.global_shape = {}, .offsets = {}}}}), Error);
  EXPECT_THROW(distributed_detail::held_boxes(tree, {{"w", {.global_shape = {4}, .offsets = {0}}}}), Error);
  EXPECT_THROW(distributed_detail::held_boxes(tree, {{"w", {.global_shape = {3, 3}, .offsets = {2, 0}}}}), Error);
}

TEST(DistributedWireTest, TruncatedMessagesAreCorruptNotCrashes) {
  hf_sharded_detail::RankShard shard{.file = "model-00001-of-00002.safetensors", .tensors = {"b"}, .pieces = {},
                                     .nbytes = 12};
  shard.pieces.push_back({.name = "w", .dtype = DType::kBFloat16, .shape = {4, 2},
                          .pieces = {{.file = shard.file, .key = "k", .box = {.offsets = {0, 0}, .sizes = {2, 2}}}}});
  const std::string bytes = distributed_detail::encode_rank_shard(shard);
  const auto back = distributed_detail::decode_rank_shard(bytes, 1);
  EXPECT_EQ(back.file, shard.file);
  EXPECT_EQ(back.nbytes, 12u);
  EXPECT_EQ(back.tensors, shard.tensors);
  ASSERT_EQ(back.pieces.size(), 1u);
  EXPECT_EQ(back.pieces[0].dtype, DType::kBFloat16);
  EXPECT_EQ(back.pieces[0].pieces[0].box.sizes, (std::vector<int64_t>{2, 2}));
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    try {
      distributed_detail::decode_rank_shard(std::string_view(bytes).substr(0, cut), 1);
      ADD_FAILURE() << "decoded a message cut at " << cut;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    }
  }
  std::optional<Error> failure;
  EXPECT_THROW(distributed_detail::decode_outcome("\x01", 0, failure), Error);
  const std::string failed = distributed_detail::encode_outcome(Error(ErrorCode::kNotFound, "gone", {.entry = "x"}), "");
  EXPECT_FALSE(distributed_detail::decode_outcome(failed, 3, failure));
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->code(), ErrorCode::kNotFound);
  EXPECT_EQ(failure->message(), "rank 3: gone");
  EXPECT_EQ(failure->context().entry, "x");
}

}  // namespace
}  // namespace ckpt
