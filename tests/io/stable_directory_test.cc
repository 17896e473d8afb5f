#include "io/stable_directory.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt/error.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::write_file;

// What a save's commit does to the path: another directory takes its place
// (the old one moved aside and removed, as AtomicDirectory leaves it).
void replace(const fs::path& path, const std::string& text) {
  const fs::path fresh = path.string() + ".new";
  fs::create_directory(fresh);
  write_file(fresh / "a", text);
  write_file(fresh / "b", text);
  const fs::path old = path.string() + ".old";
  fs::rename(path, old);
  fs::rename(fresh, path);
  fs::remove_all(old);
}

class StableDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directory(path_);
    write_file(path_ / "a", "1");
    write_file(path_ / "b", "1");
  }
  testing::TempDir dir_;
  fs::path path_ = dir_ / "ckpt";
};

TEST_F(StableDirectoryTest, AnUndisturbedReadRunsOnce) {
  int runs = 0;
  std::string seen;
  read_stable_directory(path_, [&] {
    ++runs;
    seen = read_file(path_ / "a") + read_file(path_ / "b");
  });
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(seen, "11");
}

// The save lands between the reader's two opens: the mixed run is not
// returned, the next one reads the new directory whole.
TEST_F(StableDirectoryTest, AReadThatSawTwoDirectoriesIsRunAgain) {
  int runs = 0;
  std::string seen;
  read_stable_directory(path_, [&] {
    const std::string a = read_file(path_ / "a");
    if (runs++ == 0) replace(path_, "2");
    seen = a + read_file(path_ / "b");
  });
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(seen, "22");
}

// An error caused by the swap (a file gone with the old directory) is not
// the caller's: the read runs again.
TEST_F(StableDirectoryTest, AnErrorFromASwapIsRetried) {
  int runs = 0;
  read_stable_directory(path_, [&] {
    if (runs++ == 0) {
      replace(path_, "2");
      throw Error(ErrorCode::kNotFound, "no such file", {.path = path_ / "a"});
    }
  });
  EXPECT_EQ(runs, 2);
}

// An error in an undisturbed directory is the directory's: rethrown at once.
TEST_F(StableDirectoryTest, AnErrorInAStableDirectoryIsRethrown) {
  int runs = 0;
  try {
    read_stable_directory(path_, [&] {
      ++runs;
      throw Error(ErrorCode::kCorrupt, "bad", {.path = path_ / "a"});
    });
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  }
  EXPECT_EQ(runs, 1);
}

TEST_F(StableDirectoryTest, ADirectoryReplacedDuringEveryRunIsAnIoErrorNamingIt) {
  int runs = 0;
  try {
    read_stable_directory(path_, [&] { replace(path_, std::to_string(++runs)); }, 3);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kIo);
    EXPECT_EQ(error.context().path, path_);
  }
  EXPECT_EQ(runs, 3);
}

TEST_F(StableDirectoryTest, AMissingDirectoryIsNotFound) {
  try {
    read_stable_directory(dir_ / "absent", [] {});
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  }
}

}  // namespace
}  // namespace ckpt::detail
