#include "io/file_hashes.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>

#include "core/checksum.h"
#include "io/atomic_file.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt::detail {
namespace {

using ckpt::testing::read_file;

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); }

// The xxh3 of the committed file as it lies on disk, read back.
std::string xxh3_on_disk(const std::filesystem::path& path) { return checksum_hex(ChecksumKind::kXxh3, bytes_of(read_file(path))); }

TEST(FileHashesTest, FileWrittenInOrderIsReportedWithTheHashOfItsBytes) {
  testing::TempDir dir;
  FileHashes hashes;
  {
    AtomicFile file(dir / "a.bin");
    file.write_at(bytes_of("header"), 0);
    file.write_parallel({{.bytes = bytes_of("data one"), .offset = 6}, {.bytes = bytes_of("two"), .offset = 14}}, 2);
    file.commit();
  }
  const std::vector<HashedFile> files = hashes.files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].path, dir / "a.bin");
  EXPECT_EQ(files[0].size, 17u);
  EXPECT_EQ(read_file(dir / "a.bin"), "headerdata onetwo");
  EXPECT_EQ(files[0].xxh3, xxh3_on_disk(dir / "a.bin"));
}

TEST(FileHashesTest, HolesAndTheTailUpToTheSizeAreHashedAsZeros) {
  testing::TempDir dir;
  FileHashes hashes;
  {
    AtomicFile file(dir / "holes.bin");
    file.resize(300000);  // beyond one block of the zeros the hash feeds
    file.write_at(bytes_of("abc"), 10);
    file.write_at(bytes_of("def"), 200000);
    file.commit();
  }
  const std::vector<HashedFile> files = hashes.files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].size, 300000u);
  EXPECT_EQ(std::filesystem::file_size(dir / "holes.bin"), 300000u);
  EXPECT_EQ(files[0].xxh3, xxh3_on_disk(dir / "holes.bin"));
}

TEST(FileHashesTest, FileWrittenOutOfOrderIsLeftOut) {
  testing::TempDir dir;
  FileHashes hashes;
  {
    AtomicFile file(dir / "late-header.bin");
    file.write_at(bytes_of("world"), 6);
    file.write_at(bytes_of("hello "), 0);  // before what was hashed: the hash ends
    file.commit();
  }
  {
    AtomicFile file(dir / "shrunk.bin");
    file.write_at(bytes_of("0123456789"), 0);
    file.resize(4);  // below what was hashed
    file.commit();
  }
  EXPECT_EQ(read_file(dir / "late-header.bin"), "hello world");
  EXPECT_EQ(read_file(dir / "shrunk.bin"), "0123");
  EXPECT_TRUE(hashes.files().empty());
}

TEST(FileHashesTest, OnlyCommittedFilesOfThisThreadsCollectorAreReported) {
  testing::TempDir dir;
  {
    AtomicFile before(dir / "before.bin");  // created with no collector
    FileHashes hashes;
    before.write_at(bytes_of("x"), 0);
    before.commit();
    {
      AtomicFile abandoned(dir / "abandoned.bin");
      abandoned.write_at(bytes_of("y"), 0);
    }
    std::thread other([&] {
      AtomicFile elsewhere(dir / "elsewhere.bin");  // another thread: no collector there
      elsewhere.write_at(bytes_of("z"), 0);
      elsewhere.commit();
    });
    other.join();
    EXPECT_TRUE(hashes.files().empty());
  }
  EXPECT_EQ(FileHashes::current(), nullptr);
}

TEST(FileHashesTest, NestedCollectorsEachSeeTheirOwnFilesAndTheOuterOneComesBack) {
  testing::TempDir dir;
  FileHashes outer;
  {
    FileHashes inner;
    EXPECT_EQ(FileHashes::current(), &inner);
    AtomicFile file(dir / "inner.bin");
    file.write_at(bytes_of("inner"), 0);
    file.commit();
    ASSERT_EQ(inner.files().size(), 1u);
  }
  EXPECT_EQ(FileHashes::current(), &outer);
  AtomicFile file(dir / "outer.bin");
  file.write_at(bytes_of("outer"), 0);
  file.commit();
  const std::vector<HashedFile> files = outer.files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].path, dir / "outer.bin");
  EXPECT_EQ(files[0].xxh3, xxh3_on_disk(dir / "outer.bin"));
}

}  // namespace
}  // namespace ckpt::detail
