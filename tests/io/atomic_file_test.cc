#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <fstream>
#include <sstream>

#include "ckpt/error.h"
#include "io/mapped_file.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt::detail {
namespace {

using ckpt::testing::read_file;

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); }

TEST(AtomicFileTest, CommitRenamesIntoPlace) {
  testing::TempDir dir;
  {
    AtomicFile file(dir / "out.bin");
    file.write_at(bytes_of("world"), 6);
    file.write_at(bytes_of("hello "), 0);
    EXPECT_FALSE(std::filesystem::exists(dir / "out.bin")) << "nothing visible before commit";
    file.commit();
  }
  EXPECT_EQ(read_file(dir / "out.bin"), "hello world");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFileTest, AbandonedFileLeavesNoTemporaryAndKeepsTheOldOne) {
  testing::TempDir dir;
  std::ofstream(dir / "out.bin") << "old";
  {
    AtomicFile file(dir / "out.bin");
    file.write_at(bytes_of("new contents"), 0);
  }
  EXPECT_EQ(read_file(dir / "out.bin"), "old");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFileTest, SealedFileIsClosedAndInvisibleUntilCommit) {
  testing::TempDir dir;
  std::ofstream(dir / "out.bin") << "old";
  {
    AtomicFile file(dir / "out.bin");
    file.write_at(bytes_of("new"), 0);
    file.seal();
    EXPECT_EQ(read_file(dir / "out.bin"), "old") << "sealing renames nothing";
    EXPECT_THROW(file.seal(), Error);
    EXPECT_THROW(file.write_at(bytes_of("x"), 0), Error) << "no write after sealing";
    file.commit();
    EXPECT_THROW(file.commit(), Error);
  }
  EXPECT_EQ(read_file(dir / "out.bin"), "new");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
  {
    AtomicFile file(dir / "out.bin");  // sealed, never committed: removed
    file.write_at(bytes_of("lost"), 0);
    file.seal();
  }
  EXPECT_EQ(read_file(dir / "out.bin"), "new");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFileTest, MissingDirectoryIsNotFound) {
  testing::TempDir dir;
  try {
    AtomicFile file(dir / "no" / "such" / "out.bin");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  }
}

// Writes `spans` (on `threads`) over dir/out.bin, which holds "old", with a
// disk-full fault after `fault_after` bytes: the write fails with kIo naming
// the file, and the old file stays, alone.
void expect_fault_keeps_the_old_file(const testing::TempDir& dir, int64_t fault_after,
                                     const std::vector<WriteSpan>& spans, unsigned threads) {
  std::ofstream(dir / "out.bin") << "old";
  try {
    AtomicFile file(dir / "out.bin");
    inject_write_fault_after(fault_after);
    file.write_parallel(spans, threads);
    inject_write_fault_after(-1);
    FAIL() << "the write should have failed";
  } catch (const Error& error) {
    inject_write_fault_after(-1);
    EXPECT_EQ(error.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(error.what()).find("out.bin"), std::string::npos);
  }
  EXPECT_EQ(read_file(dir / "out.bin"), "old");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFileTest, InjectedFaultFailsTheWriteWithIo) {
  testing::TempDir dir;
  std::vector<std::byte> data(1 << 20, std::byte{7});
  expect_fault_keeps_the_old_file(dir, 1000, {WriteSpan{data, 0}, WriteSpan{data, data.size()}}, 0);
}

TEST(AtomicFileTest, ParallelWritesLandAtTheirOffsetsAndSeeEveryChunk) {
  testing::TempDir dir;
  constexpr size_t kSpan = (size_t{8} << 20) + 123;  // more than one chunk
  std::vector<std::vector<std::byte>> blocks;
  for (int i = 0; i < 5; ++i) blocks.emplace_back(kSpan, std::byte(i + 1));
  std::vector<size_t> seen(blocks.size(), 0);
  std::vector<WriteSpan> spans;
  for (size_t i = 0; i < blocks.size(); ++i) {
    spans.push_back({blocks[i], i * kSpan, [&seen, i](std::span<const std::byte> chunk) { seen[i] += chunk.size(); }});
  }
  AtomicFile file(dir / "big.bin");
  file.resize(blocks.size() * kSpan);
  file.write_parallel(spans, 3);
  file.commit();
  auto mapped = MappedFile::open(dir / "big.bin");
  ASSERT_EQ(mapped->size(), blocks.size() * kSpan);
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(seen[i], kSpan);
    EXPECT_EQ(mapped->bytes()[i * kSpan], std::byte(i + 1));
    EXPECT_EQ(mapped->bytes()[(i + 1) * kSpan - 1], std::byte(i + 1));
  }
}

TEST(AtomicFileTest, SmallBackToBackSpansAreGatheredAndLandExactly) {
  testing::TempDir dir;
  // 3000 small spans back to back, then one after a gap, then a large one.
  std::vector<std::vector<std::byte>> blocks;
  std::vector<WriteSpan> spans;
  std::vector<size_t> seen(3002, 0);
  uint64_t offset = 0;
  for (size_t i = 0; i < 3002; ++i) {
    const size_t size = i == 3001 ? (size_t{1} << 20) : 1 + i % 5000;
    blocks.emplace_back(size, std::byte(i % 251));
    if (i == 3000) offset += 7;  // a gap: must not be gathered across
    spans.push_back({blocks.back(), offset, [&seen, i](std::span<const std::byte> chunk) { seen[i] += chunk.size(); }});
    offset += size;
  }
  AtomicFile file(dir / "small.bin");
  file.write_parallel(spans, 2);
  file.commit();
  auto mapped = MappedFile::open(dir / "small.bin");
  ASSERT_EQ(mapped->size(), offset);
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(seen[i], blocks[i].size()) << i;
    const auto bytes = mapped->bytes().subspan(spans[i].offset, blocks[i].size());
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), blocks[i].begin())) << "span " << i;
  }
}

// With a second thread, checksums follow the writer at most one 8 MiB piece
// ahead: piece k is hashed only once pieces 0 .. k-2 are written.
TEST(AtomicFileTest, ChecksumsRunInLockstepAtMostOnePieceAheadOfTheWriter) {
  testing::TempDir dir;
  constexpr size_t kPiece = size_t{8} << 20;
  std::vector<std::byte> data(6 * kPiece + 5, std::byte{3});
  std::vector<uint64_t> written_before;  // bytes written when each piece was hashed
  const uint64_t start = bytes_written();
  size_t seen = 0;
  AtomicFile file(dir / "lockstep.bin");
  file.write_parallel({{.bytes = data, .offset = 0, .on_chunk = [&](std::span<const std::byte> piece) {
                          written_before.push_back(bytes_written() - start);
                          seen += piece.size();
                        }}},
                      2);
  file.commit();
  EXPECT_EQ(seen, data.size());
  ASSERT_EQ(written_before.size(), 7u);
  for (size_t k = 2; k < written_before.size(); ++k) {
    EXPECT_GE(written_before[k], (k - 1) * kPiece) << "piece " << k << " hashed too far ahead";
  }
  EXPECT_EQ(MappedFile::open(dir / "lockstep.bin")->size(), data.size());
}

// The writer failing half-way releases the checksum thread waiting for it:
// the call returns the write's error, and the previous file stays.
TEST(AtomicFileTest, WriteFailureWithChecksumsAlongsideReturnsTheWriteError) {
  testing::TempDir dir;
  std::vector<std::byte> data(4 * (size_t{8} << 20), std::byte{5});
  size_t seen = 0;
  expect_fault_keeps_the_old_file(
      dir, int64_t{9} << 20,
      {{.bytes = data, .offset = 0, .on_chunk = [&](std::span<const std::byte> piece) { seen += piece.size(); }}}, 2);
  EXPECT_LT(seen, data.size());  // the checksums stopped with the writer
}

// A checksum failing on its thread: the writer finishes, then the call
// throws the checksum's error.
TEST(AtomicFileTest, ChecksumFailureAlongsideIsThrownAfterTheWriterStops) {
  testing::TempDir dir;
  std::vector<std::byte> data(3 * (size_t{8} << 20), std::byte{6});
  int pieces = 0;
  AtomicFile file(dir / "out.bin");
  try {
    file.write_parallel({{.bytes = data, .offset = 0, .on_chunk = [&](std::span<const std::byte>) {
                            if (++pieces == 2) throw Error(ErrorCode::kCorrupt, "checksum failed", {.path = dir / "out.bin"});
                          }}},
                        2);
    FAIL() << "the checksum's error should have been thrown";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_NE(std::string(error.what()).find("checksum failed"), std::string::npos);
  }
  EXPECT_EQ(pieces, 2);
}

// A real operating-system failure: the file-size limit makes write() fail
// with EFBIG half-way through.
TEST(AtomicFileTest, FileSizeLimitFailureKeepsThePreviousFile) {
  testing::TempDir dir;
  std::ofstream(dir / "out.bin") << "previous";
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  std::vector<std::byte> data(1 << 16, std::byte{1});
  bool threw = false;
  try {
    AtomicFile file(dir / "out.bin");
    file.write_at(data, 0);
    file.commit();
  } catch (const Error& error) {
    threw = true;
    EXPECT_EQ(error.code(), ErrorCode::kIo);
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_file(dir / "out.bin"), "previous");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
}

TEST(MappedFileTest, SliceOutsideTheFileIsCorruptWithOffset) {
  testing::TempDir dir;
  std::ofstream(dir / "f") << "0123456789";
  auto file = MappedFile::open(dir / "f");
  EXPECT_EQ(file->size(), 10u);
  Buffer inside = file->slice(2, 3);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(inside.data()), 3), "234");
  EXPECT_EQ(inside.kind(), StorageKind::kMapped);
  try {
    file->slice(8, 3);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().offset, 8u);
  }
}

TEST(MappedFileTest, BuffersKeepTheMappingAliveAndCopyByPread) {
  testing::TempDir dir;
  std::ofstream(dir / "f") << "abcdefgh";
  Buffer view;
  {
    auto file = MappedFile::open(dir / "f");
    view = file->slice(4, 4);
  }
  std::array<std::byte, 4> out{};
  view.copy_to(out);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), 4), "efgh");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(view.data()), 4), "efgh");
}

TEST(MappedFileTest, MissingFileAndDirectory) {
  testing::TempDir dir;
  try {
    MappedFile::open(dir / "absent");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(error.what()).find("absent"), std::string::npos);
  }
  EXPECT_THROW(MappedFile::open(dir.path()), Error);
}

}  // namespace
}  // namespace ckpt::detail
