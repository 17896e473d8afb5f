#include "io/atomic_directory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "ckpt/error.h"
#include "io/atomic_file.h"
#include "io/deferred_release.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;
using ckpt::testing::read_file;
using ckpt::testing::write_file;

// Names of the entries of `directory`, sorted (hidden ones included).
std::vector<std::string> names_in(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(directory)) names.push_back(item.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AtomicDirectoryTest, CommitMakesTheDirectoryVisibleWithItsFiles) {
  for (const bool files_synced : {false, true}) {
    testing::TempDir dir;
    {
      AtomicDirectory directory(dir / "step", {.fsync = true, .files_synced = files_synced});
      EXPECT_TRUE(AtomicDirectory::is_temporary(directory.path())) << directory.path();
      EXPECT_EQ(directory.path().parent_path(), dir.path());
      write_file(directory.path() / "a", "one");
      fs::create_directory(directory.path() / "sub");
      write_file(directory.path() / "sub" / "b", "two");
      EXPECT_FALSE(fs::exists(dir / "step")) << "nothing visible before commit";
      directory.commit();
      EXPECT_THROW(directory.commit(), Error) << "a second commit";
    }
    EXPECT_EQ(dir.list(), std::vector<std::string>{"step"});
    EXPECT_EQ(read_file(dir / "step" / "a"), "one");
    EXPECT_EQ(read_file(dir / "step" / "sub" / "b"), "two");
  }
}

TEST(AtomicDirectoryTest, AbandonLeavesNothing) {
  testing::TempDir dir;
  {
    AtomicDirectory directory(dir / "step");
    write_file(directory.path() / "a", "lost");
    fs::create_directory(directory.path() / "sub");
    write_file(directory.path() / "sub" / "b", "lost too");
  }
  EXPECT_TRUE(dir.list().empty());
}

TEST(AtomicDirectoryTest, AbandonKeepsTheOldDirectoryAsItWas) {
  testing::TempDir dir;
  fs::create_directory(dir / "step");
  write_file(dir / "step" / "old", "old");
  {
    AtomicDirectory directory(dir / "step");
    write_file(directory.path() / "new", "new");
  }
  EXPECT_EQ(dir.list(), std::vector<std::string>{"step"});
  EXPECT_EQ(names_in(dir / "step"), std::vector<std::string>{"old"});
}

TEST(AtomicDirectoryTest, CommitReplacesAnExistingDirectoryWhole) {
  testing::TempDir dir;
  fs::create_directories(dir / "step" / "nested");
  write_file(dir / "step" / "old", "old");
  write_file(dir / "step" / "nested" / "old", "old");
  write_file(dir / "step" / "kept name", "old");
  AtomicDirectory directory(dir / "step", {.fsync = false});
  write_file(directory.path() / "kept name", "new");
  write_file(directory.path() / "new", "new");
  EXPECT_EQ(read_file(dir / "step" / "kept name"), "old") << "nothing half-visible before commit";
  EXPECT_EQ(names_in(dir / "step"), (std::vector<std::string>{"kept name", "nested", "old"}));
  directory.commit();
  drain_deferred_releases();  // the old one is removed off the committing thread
  EXPECT_EQ(dir.list(), std::vector<std::string>{"step"}) << "the old directory is removed";
  EXPECT_EQ(names_in(dir / "step"), (std::vector<std::string>{"kept name", "new"}));
  EXPECT_EQ(read_file(dir / "step" / "kept name"), "new");
}

TEST(AtomicDirectoryTest, FilesWrittenByAtomicFileInsideAreCommittedWithIt) {
  testing::TempDir dir;
  AtomicDirectory directory(dir / "step", {.fsync = true});
  {
    AtomicFile file(directory.path() / "data", {.fsync = false});
    const std::string text = "bytes";
    file.write_at(std::as_bytes(std::span(text)), 0);
    file.commit();
  }
  directory.commit();
  EXPECT_EQ(names_in(dir / "step"), std::vector<std::string>{"data"});
  EXPECT_EQ(read_file(dir / "step" / "data"), "bytes");
}

TEST(AtomicDirectoryTest, RefusesToReplaceAFile) {
  testing::TempDir dir;
  write_file(dir / "step", "a file");
  try {
    AtomicDirectory directory(dir / "step");
    write_file(directory.path() / "a", "new");
    directory.commit();
    FAIL() << "a file was replaced by a directory";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(error.context().path, dir / "step");
  }
  EXPECT_EQ(dir.list(), std::vector<std::string>{"step"}) << "the temporary is removed";
  EXPECT_EQ(read_file(dir / "step"), "a file");
}

TEST(AtomicDirectoryTest, MissingParentIsNotFound) {
  testing::TempDir dir;
  try {
    AtomicDirectory directory(dir / "no" / "step");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
    EXPECT_EQ(error.context().path, dir / "no" / "step");
  }
  EXPECT_THROW(AtomicDirectory(fs::path("step") / ""), Error) << "a path without a name";
}

// A real operating-system failure: a name so long that the temporary's
// (the name plus ".", ".ckpt-tmp-" and 16 digits) passes NAME_MAX.
TEST(AtomicDirectoryTest, SystemFailureIsIoNamingThePath) {
  testing::TempDir dir;
  const fs::path path = dir / std::string(240, 's');
  try {
    AtomicDirectory directory(path);
    FAIL() << "a temporary name over NAME_MAX was created";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kIo) << error.what();
    EXPECT_EQ(error.context().path, path);
    EXPECT_NE(std::string(error.what()).find(std::string(240, 's')), std::string::npos);
  }
  EXPECT_TRUE(dir.list().empty());
}

TEST(AtomicDirectoryTest, CommitFailureLeavesTheOldDirectoryAndNoTemporary) {
  testing::TempDir dir;
  fs::create_directory(dir / "parent");
  try {
    AtomicDirectory directory(dir / "parent" / "step");
    write_file(directory.path() / "a", "new");
    fs::rename(dir / "parent", dir / "moved");  // the temporary goes with it: commit cannot find it
    directory.commit();
    FAIL() << "a commit of a vanished directory succeeded";
  } catch (const Error& error) {
    EXPECT_TRUE(error.code() == ErrorCode::kIo || error.code() == ErrorCode::kNotFound) << error.what();
    EXPECT_EQ(error.context().path, dir / "parent" / "step");
  }
  EXPECT_FALSE(fs::exists(dir / "parent" / "step"));
}

TEST(AtomicDirectoryTest, LeftoverTemporariesAreRecognisedAndListed) {
  testing::TempDir dir;
  fs::create_directory(dir / "step");
  write_file(dir / "model.safetensors", "x");
  write_file(dir / ".model.safetensors.ckpt-tmp-0123456789abcdef", "left by AtomicFile");
  fs::create_directory(dir / ".step.ckpt-tmp-fedcba9876543210");
  write_file(dir / ".step.ckpt-tmp-short", "not ours: no 16 digits");
  write_file(dir / "step.ckpt-tmp-0123456789abcdef", "not ours: not hidden");
  write_file(dir / ".step.ckpt-tmp-0123456789ABCDEF", "not ours: upper case");
  {
    AtomicDirectory open(dir / "other");  // one being written now is one too
    EXPECT_EQ(AtomicDirectory::leftover_temporaries(dir.path()),
              (std::vector<fs::path>{dir / ".model.safetensors.ckpt-tmp-0123456789abcdef", open.path(),
                                     dir / ".step.ckpt-tmp-fedcba9876543210"}));
  }
  EXPECT_TRUE(AtomicDirectory::is_temporary("/a/.x.ckpt-tmp-0000000000000000"));
  EXPECT_FALSE(AtomicDirectory::is_temporary("/a/.x.ckpt-tmp-0000000000000000/inner"));
  EXPECT_TRUE(AtomicDirectory::leftover_temporaries(dir / "missing").empty());
}

}  // namespace
}  // namespace ckpt::detail
