// ckpt::save never loses what was committed: a save that fails half-way
// leaves the previous file intact and no temporary behind, in every format.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "io/atomic_file.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::checkpoint_files;
using testing::read_file;

Tree state_of(float fill, int64_t elements) {
  Tensor tensor = Tensor::empty(DType::kFloat32, {elements});
  auto values = tensor.mutable_bytes();
  for (size_t i = 0; i < values.size(); i += 4) std::memcpy(&values[i], &fill, 4);
  Tree tree = Tree::map();
  tree.set("w", tensor);
  return tree;
}

class SaveAtomicTest : public ::testing::TestWithParam<const Format*> {};

TEST_P(SaveAtomicTest, InjectedWriteFailureKeepsThePreviousFile) {
  const Format& format = *GetParam();
  if (!format.capabilities().write) GTEST_SKIP() << "read-only format";
  testing::TempDir dir;
  const auto path = dir / "state.ckpt";
  const SaveOptions options{.format = std::string(format.id())};
  const Tree old_state = format.capabilities().single_tensor ? Tree(state_of(1, 1000).at("w").tensor()) : state_of(1, 1000);
  save(path, old_state, options);
  const auto before = checkpoint_files(dir.path());
  ASSERT_FALSE(before.empty());

  const Tree new_state = format.capabilities().single_tensor ? Tree(state_of(2, 1 << 20).at("w").tensor()) : state_of(2, 1 << 20);
  for (int64_t fail_after : {0, 100, 1 << 19, 3 << 20}) {
    detail::inject_write_fault_after(fail_after);
    try {
      save(path, new_state, options);
      detail::inject_write_fault_after(-1);
      ADD_FAILURE() << "save succeeded despite a fault after " << fail_after << " bytes";
    } catch (const Error& error) {
      detail::inject_write_fault_after(-1);
      EXPECT_EQ(error.code(), ErrorCode::kIo) << error.what();
      EXPECT_NE(std::string(error.what()).find("state.ckpt"), std::string::npos) << error.what();
    }
    EXPECT_EQ(checkpoint_files(dir.path()), before) << "the previous checkpoint changed, or a temporary was left behind";
    EXPECT_TRUE(load(path, {.format = std::string(format.id())}) == old_state);
  }
}

TEST_P(SaveAtomicTest, FileSizeLimitFailureKeepsThePreviousFile) {
  const Format& format = *GetParam();
  if (!format.capabilities().write) GTEST_SKIP() << "read-only format";
  testing::TempDir dir;
  const auto path = dir / "state.ckpt";
  const SaveOptions options{.format = std::string(format.id())};
  const Tree old_state = format.capabilities().single_tensor ? Tree(state_of(1, 100).at("w").tensor()) : state_of(1, 100);
  save(path, old_state, options);
  const auto before = checkpoint_files(dir.path());
  ASSERT_FALSE(before.empty());

  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 64 << 10;  // the new state needs 4 MiB
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  bool threw = false;
  try {
    save(path, format.capabilities().single_tensor ? Tree(state_of(2, 1 << 20).at("w").tensor()) : state_of(2, 1 << 20),
         options);
  } catch (const Error& error) {
    threw = true;
    EXPECT_EQ(error.code(), ErrorCode::kIo) << error.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(checkpoint_files(dir.path()), before) << "the previous checkpoint changed, or a temporary was left behind";
}

TEST(SaveTest, MissingDirectoryIsNotFoundAndUnknownFormatUnsupported) {
  testing::TempDir dir;
  Tree tree = Tree::map();
  tree.set("w", Tensor::zeros(DType::kFloat32, {2}));
  try {
    save(dir / "absent" / "x.safetensors", tree);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  }
  try {
    save(dir / "x.bin", tree, {.format = "nope"});
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(error.what()).find("safetensors"), std::string::npos) << "lists the known formats";
  }
}

TEST(SaveTest, FormatComesFromTheExtensionElseSafetensors) {
  testing::TempDir dir;
  Tree tree = Tree::map();
  tree.set("w", Tensor::zeros(DType::kFloat32, {2}));
  save(dir / "a.npz", tree);
  save(dir / "b.weights", tree);
  EXPECT_EQ(open(dir / "a.npz").format, "npz");
  EXPECT_EQ(open(dir / "b.weights").format, "safetensors");
}

TEST(LoadTest, MissingAndUnrecognizedFiles) {
  testing::TempDir dir;
  try {
    load(dir / "absent.safetensors");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(error.what()).find("absent.safetensors"), std::string::npos);
  }
  std::ofstream(dir / "text.txt") << "just some text, not a checkpoint";
  try {
    load(dir / "text.txt");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(error.what()).find("text.txt"), std::string::npos);
  }
}

std::string format_name(const ::testing::TestParamInfo<const Format*>& info) { return std::string(info.param->id()); }

INSTANTIATE_TEST_SUITE_P(AllFormats, SaveAtomicTest, ::testing::ValuesIn(formats().begin(), formats().end()),
                         format_name);

}  // namespace
}  // namespace ckpt
