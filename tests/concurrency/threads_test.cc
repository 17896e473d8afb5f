// Threads: ckpt's own worker threads (the positioned writes and reads of
// parallel_for, parallel casts) and a user's threads sharing one opened
// checkpoint. Run as part of the normal suite, and under ThreadSanitizer by
// `make test-tsan` (the ckpt_thread_tests binary, with readers during saves
// in readers_during_saves_test.cc), where a data race is a failure even when
// the bytes come out right.

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "support/random_tensor.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::random_tensor;

constexpr int kUserThreads = 4;

// A tree with enough tensors that the writers and materialize() hand them
// to several workers, in a dtype every writable format holds.
Tree sample_tree(uint32_t seed, bool single_tensor) {
  if (single_tensor) return Tree(random_tensor(DType::kFloat32, {64, 33}, seed));
  Tree tree = Tree::map();
  for (int i = 0; i < 12; ++i) {
    tree.set("layer" + std::to_string(i) + ".weight", random_tensor(DType::kFloat32, {16 + i, 40}, seed + i));
  }
  return tree;
}

std::filesystem::path target(const testing::TempDir& dir, const Format& format) {
  const auto extensions = format.extensions();
  return dir / ("x" + std::string(extensions.empty() ? "" : extensions.front()));
}

class ThreadsTest : public ::testing::TestWithParam<const Format*> {
 protected:
  const Format& format() const { return *GetParam(); }
  bool single() const { return format().capabilities().single_tensor; }
  testing::TempDir dir_;
};

// Several writer threads (SaveOptions::threads) write one checkpoint; what
// reads back is what was saved.
TEST_P(ThreadsTest, AThreadedSaveReadsBackWhole) {
  if (!format().capabilities().write) GTEST_SKIP() << "read-only format";
  const Tree tree = sample_tree(1, single());
  const auto path = target(dir_, format());
  save(path, tree, {.format = std::string(format().id()), .threads = 4});
  EXPECT_TRUE(load(path, {.lazy = false, .threads = 4}) == tree);
}

// A tensor of several 8 MiB pieces beside small ones, saved with two
// threads: the checksum thread waits on the writer piece by piece (the
// lockstep of AtomicFile::write_parallel), which ThreadSanitizer checks.
TEST_P(ThreadsTest, ALargeTensorSavedWithChecksumsInLockstepReadsBackWhole) {
  if (!format().capabilities().write) GTEST_SKIP() << "read-only format";
  const Tensor large = random_tensor(DType::kFloat32, {1088, 4096}, 7);  // 17 MiB: three pieces
  Tree tree = single() ? Tree(large) : sample_tree(4, false);
  if (!single()) tree.set("embedding.weight", large);
  const auto path = target(dir_, format());
  save(path, tree, {.format = std::string(format().id()), .threads = 2});
  EXPECT_TRUE(load(path, {.lazy = false, .threads = 2}) == tree);
}

// Each user thread opens and fully reads the same checkpoint on its own.
TEST_P(ThreadsTest, ThreadsLoadingOneFileEachSeeItWhole) {
  if (!format().capabilities().write) GTEST_SKIP() << "read-only format";
  const Tree tree = sample_tree(2, single());
  const auto path = target(dir_, format());
  save(path, tree, {.format = std::string(format().id())});
  std::atomic<int> equal{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kUserThreads; ++t) {
    threads.emplace_back([&, t] {
      if (load(path, {.lazy = t % 2 == 0, .threads = 2}) == tree) ++equal;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(equal.load(), kUserThreads);
}

// One lazily opened checkpoint shared by user threads: each reads every
// tensor's bytes at once (the first touch of a deferred tensor, a zarr
// chunk's decode, races with the others) and materializes its own copy.
TEST_P(ThreadsTest, ThreadsSharingOneLazyTreeReadTheSameBytes) {
  if (!format().capabilities().write) GTEST_SKIP() << "read-only format";
  const Tree tree = sample_tree(3, single());
  const auto path = target(dir_, format());
  save(path, tree, {.format = std::string(format().id())});
  const Tree shared = load(path, {.lazy = true});
  std::atomic<int> equal{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kUserThreads; ++t) {
    threads.emplace_back([&] {
      bool same = true;
      for (const auto& leaf : shared.tensor_leaves()) {
        const Tree* expected = tree.find_path(leaf.name);
        same = same && expected != nullptr && leaf.value->tensor().equals(expected->tensor());
      }
      Tree copy = shared;
      materialize(copy, 2);
      if (same && copy == tree) ++equal;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(equal.load(), kUserThreads);
}

std::string format_name(const ::testing::TestParamInfo<const Format*>& info) {
  return std::string(info.param->id());
}

INSTANTIATE_TEST_SUITE_P(EveryFormat, ThreadsTest, ::testing::ValuesIn(formats().begin(), formats().end()),
                         format_name);

}  // namespace
}  // namespace ckpt
