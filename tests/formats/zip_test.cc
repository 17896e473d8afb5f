// ZipReader and ZipWriter: archives built by hand (zip_test_builder.h) read
// back; archives written read back by ckpt's reader and checked byte by byte
// where the layout is fixed; malformed archives one defect at a time.

#include <gtest/gtest.h>

#include <functional>

#include "ckpt/error.h"
#include "formats/zip/layout.h"
#include "formats/zip/reader.h"
#include "formats/zip/writer.h"
#include "formats/zip_test_builder.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::build_test_zip;
using testing::TestZip;
using testing::TestZipEntry;
using testing::TestZipOptions;
using zip_detail::ZipReader;
using zip_detail::ZipWriter;

std::string text_of(const Buffer& buffer) {
  return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size());
}

Buffer buffer_of(std::string_view text) { return Buffer::copy_of(std::as_bytes(std::span(text))); }

class ZipTestBase : public ::testing::Test {
 protected:
  std::filesystem::path write(std::string_view bytes, const std::string& name = "a.zip") {
    const auto path = dir_ / name;
    testing::write_file(path, bytes);
    return path;
  }
  ZipReader open(std::string_view bytes) { return ZipReader(detail::MappedFile::open(write(bytes))); }

  testing::TempDir dir_;
};

// ---------------------------------------------------------------- reading

class ZipReaderTest : public ZipTestBase {};

TEST_F(ZipReaderTest, StoredEntriesAreViewsOfTheMapping) {
  const TestZip zip = build_test_zip({{.name = "a.bin", .data = "hello"}, {.name = "dir/b.bin", .data = "world!"}});
  const ZipReader reader = open(zip.bytes);
  ASSERT_EQ(reader.entries().size(), 2u);
  EXPECT_EQ(reader.entries()[0].name, "a.bin");
  EXPECT_EQ(reader.entries()[1].name, "dir/b.bin");
  EXPECT_EQ(reader.entries()[1].data_offset, zip.data_offsets[1]);
  EXPECT_EQ(reader.directory_offset(), zip.directory_offset);
  const Buffer a = reader.read(reader.entries()[0], {.verify_crc = true});
  EXPECT_EQ(text_of(a), "hello");
  EXPECT_EQ(a.kind(), StorageKind::kMapped);
  ASSERT_NE(reader.find("dir/b.bin"), nullptr);
  EXPECT_EQ(text_of(reader.read(*reader.find("dir/b.bin"))), "world!");
  EXPECT_EQ(reader.find("missing"), nullptr);
}

TEST_F(ZipReaderTest, DeflatedEntriesAreInflatedAndChecked) {
  std::string data;
  for (int i = 0; i < 5000; ++i) data += "line " + std::to_string(i % 37) + "\n";
  const TestZip zip = build_test_zip({{.name = "big.txt", .data = data, .method = 8},
                                      {.name = "empty.txt", .data = "", .method = 8}});
  const ZipReader reader = open(zip.bytes);
  EXPECT_LT(reader.entries()[0].compressed_size, data.size());
  const Buffer inflated = reader.read(reader.entries()[0]);
  EXPECT_EQ(inflated.kind(), StorageKind::kHeap);
  EXPECT_EQ(text_of(inflated), data);
  EXPECT_EQ(reader.read(reader.entries()[1]).size(), 0u);
}

TEST_F(ZipReaderTest, Zip64RecordsAndExtraFields) {
  const TestZip zip = build_test_zip({{.name = "x", .data = "zip64 data"}, {.name = "y", .data = "more", .method = 8}},
                                     {.zip64 = true});
  const ZipReader reader = open(zip.bytes);
  ASSERT_EQ(reader.entries().size(), 2u);
  EXPECT_EQ(reader.entries()[0].uncompressed_size, 10u);
  EXPECT_EQ(reader.entries()[1].local_header_offset, zip.local_offsets[1]);
  EXPECT_EQ(text_of(reader.read(reader.entries()[0], {.verify_crc = true})), "zip64 data");
  EXPECT_EQ(text_of(reader.read(reader.entries()[1])), "more");
}

TEST_F(ZipReaderTest, ArchiveCommentAndEmptyArchive) {
  const ZipReader commented = open(build_test_zip({{.name = "a", .data = "1"}}, {.comment = "PK\x05\x06 in a comment"}).bytes);
  EXPECT_EQ(commented.comment(), "PK\x05\x06 in a comment");
  EXPECT_EQ(commented.entries().size(), 1u);
  const ZipReader empty = open(build_test_zip({}).bytes);
  EXPECT_TRUE(empty.entries().empty());
}

TEST_F(ZipReaderTest, NamesWithoutTheUtf8FlagAreCp437) {
  const ZipReader reader = open(build_test_zip({{.name = "gr\x81n", .data = "1"}}).bytes);
  EXPECT_EQ(reader.entries()[0].name, "gr\xC3\xBCn");  // "grün"
  const ZipReader utf8 = open(build_test_zip({{.name = "gr\xC3\xBCn", .data = "1", .flags = 1 << 11}}).bytes);
  EXPECT_EQ(utf8.entries()[0].name, "gr\xC3\xBCn");
}

TEST_F(ZipReaderTest, DataDescriptorsDeferToTheCentralDirectory) {
  const TestZip zip = build_test_zip({{.name = "a", .data = "described", .flags = 8}, {.name = "b", .data = "x"}});
  const ZipReader reader = open(zip.bytes);
  EXPECT_EQ(text_of(reader.read(reader.entries()[0], {.verify_crc = true})), "described");
  EXPECT_EQ(text_of(reader.read(reader.entries()[1])), "x");
}

TEST_F(ZipReaderTest, DetectionHelpers) {
  const TestZip zip = build_test_zip({{.name = "archive/data.pkl", .data = "x"}});
  const auto head = std::as_bytes(std::span(zip.bytes));
  EXPECT_TRUE(zip_detail::detect_zip(head, zip.bytes.size()));
  EXPECT_EQ(zip_detail::first_entry_name(head), "archive/data.pkl");
  EXPECT_EQ(zip_detail::first_entry_name(head.first(40)), "");
  const TestZip empty = build_test_zip({});
  EXPECT_TRUE(zip_detail::detect_zip(std::as_bytes(std::span(empty.bytes)), empty.bytes.size()));
  EXPECT_FALSE(zip_detail::detect_zip(std::as_bytes(std::span(empty.bytes)), empty.bytes.size() + 1));
}

// ---------------------------------------------------------------- writing

class ZipWriterTest : public ZipTestBase {
 protected:
  std::filesystem::path write_archive(ZipWriter& writer, const std::string& name = "w.zip") {
    const auto path = dir_ / name;
    detail::AtomicFile file(path, {.fsync = false});
    const uint64_t size = writer.write(file);
    file.commit();
    EXPECT_EQ(size, std::filesystem::file_size(path));
    return path;
  }
};

TEST_F(ZipWriterTest, StoredEntriesRoundTripWithPrefixes) {
  ZipWriter writer;
  writer.add("a.npy", "header-a:", buffer_of("payload a"));
  writer.add("b", "", buffer_of("only data"));
  writer.add("c", "only prefix", Buffer());
  writer.add("empty", "", Buffer());
  writer.add("名前.npy", "", buffer_of("unicode"));
  const auto path = write_archive(writer);
  const ZipReader reader(detail::MappedFile::open(path));
  ASSERT_EQ(reader.entries().size(), 5u);
  const char* expected[] = {"header-a:payload a", "only data", "only prefix", "", "unicode"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(text_of(reader.read(reader.entries()[i], {.verify_crc = true})), expected[i]);
    EXPECT_EQ(reader.entries()[i].data_offset, writer.data_offset(i));
  }
  EXPECT_EQ(reader.entries()[4].name, "名前.npy");
  EXPECT_TRUE(reader.entries()[4].flags & zip_detail::kFlagUtf8);
  EXPECT_FALSE(reader.entries()[0].flags & zip_detail::kFlagUtf8);
}

TEST_F(ZipWriterTest, AlignmentPadsWithTorchStyleExtraField) {
  ZipWriter writer({.alignment = 64});
  for (int i = 0; i < 20; ++i) {
    writer.add("entry" + std::string(static_cast<size_t>(i), 'x'), "", buffer_of(std::string(static_cast<size_t>(i) * 7 + 1, 'd')));
  }
  const auto path = write_archive(writer);
  const std::string bytes = testing::read_file(path);
  const ZipReader reader(detail::MappedFile::open(path));
  for (const zip_detail::ZipEntry& entry : reader.entries()) {
    EXPECT_EQ(entry.data_offset % 64, 0u) << entry.name;
    // The extra field is "FB", its length, then that many 'Z'.
    const size_t extra = entry.local_header_offset + 30 + entry.name.size();
    EXPECT_EQ(bytes.substr(extra, 2), "FB");
    const uint16_t padding = testing::get_u16(bytes, extra + 2);
    EXPECT_EQ(bytes.substr(extra + 4, padding), std::string(padding, 'Z'));
    EXPECT_EQ(extra + 4 + padding, entry.data_offset);
    reader.read(entry, {.verify_crc = true});
  }
}

TEST_F(ZipWriterTest, Zip64FieldsWhenValuesExceedTheLimit) {
  // A low limit exercises every zip64 path without writing 4 GiB.
  ZipWriter writer({.zip64_limit = 100, .data_descriptor = true});
  writer.add("small", "", buffer_of("tiny"));
  writer.add("large", "", buffer_of(std::string(300, 'L')));
  writer.add("late", "", buffer_of("at an offset above the limit"));
  const auto path = write_archive(writer);
  const std::string bytes = testing::read_file(path);
  const ZipReader reader(detail::MappedFile::open(path));
  ASSERT_EQ(reader.entries().size(), 3u);
  EXPECT_EQ(reader.entries()[1].uncompressed_size, 300u);
  EXPECT_EQ(text_of(reader.read(reader.entries()[2], {.verify_crc = true})), "at an offset above the limit");
  // The end record defers to the zip64 record: its offset field is the real
  // offset only where it fits in 32 bits (as Python writes it).
  const size_t end = bytes.size() - zip_detail::kEndRecordSize;
  EXPECT_EQ(testing::get_u32(bytes, end - zip_detail::kZip64LocatorSize), zip_detail::kZip64EndLocatorSignature);
  EXPECT_EQ(testing::get_u32(bytes, end + 16), reader.directory_offset());
}

TEST_F(ZipWriterTest, MoreThan65535EntriesUseTheZip64EndRecord) {
  ZipWriter writer;
  constexpr size_t kCount = 70000;
  for (size_t i = 0; i < kCount; ++i) writer.add(std::to_string(i), "", buffer_of(std::to_string(i * 3)));
  const auto path = write_archive(writer);
  const std::string bytes = testing::read_file(path);
  EXPECT_EQ(testing::get_u16(bytes, bytes.size() - 12), 0xFFFF);
  const ZipReader reader(detail::MappedFile::open(path));
  ASSERT_EQ(reader.entries().size(), kCount);
  EXPECT_EQ(text_of(reader.read(*reader.find("69999"), {.verify_crc = true})), std::to_string(69999 * 3));
}

TEST_F(ZipWriterTest, MatchesPythonZipfileForNpSavez) {
  // Python 3.11 zipfile with force_zip64=True (what np.savez does), one
  // stored member "a" holding "abc": bytes from
  //   with zipfile.ZipFile(f, "w") as z:
  //       with z.open("a", "w", force_zip64=True) as m: m.write(b"abc")
  const std::string expected(
      "PK\x03\x04\x2d\x00\x00\x00\x00\x00\x00\x00\x21\x00\xc2\x41\x24\x35\xff\xff\xff\xff\xff\xff\xff\xff"
      "\x01\x00\x14\x00" "a" "\x01\x00\x10\x00\x03\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00"
      "abc"
      "PK\x01\x02\x2d\x03\x2d\x00\x00\x00\x00\x00\x00\x00\x21\x00\xc2\x41\x24\x35\x03\x00\x00\x00\x03\x00\x00\x00"
      "\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00\x00" "a"
      "PK\x05\x06\x00\x00\x00\x00\x01\x00\x01\x00\x2f\x00\x00\x00\x36\x00\x00\x00\x00\x00",
      54 + 47 + 22);
  ZipWriter writer({.zip64_limit = (uint64_t{1} << 31) - 1, .force_zip64_local = true});
  writer.add("a", "", buffer_of("abc"));
  EXPECT_EQ(testing::read_file(write_archive(writer)), expected);
}

TEST_F(ZipWriterTest, ArchiveCommentFollowsTheEndRecord) {
  for (const std::string& comment : {std::string("a note"), std::string(zip_detail::kMaxCommentLength, 'c')}) {
    ZipWriter writer({.alignment = 64, .comment = comment});
    writer.add("a", "", buffer_of("abc"));
    const auto path = write_archive(writer);
    const std::string bytes = testing::read_file(path);
    const ZipReader reader(detail::MappedFile::open(path));
    EXPECT_EQ(reader.comment(), comment);
    EXPECT_EQ(reader.comment_offset(), bytes.size() - comment.size());
    EXPECT_EQ(testing::get_u16(bytes, reader.comment_offset() - 2), comment.size());
    EXPECT_EQ(text_of(reader.read(reader.entries()[0], {.verify_crc = true})), "abc");
  }
  // An empty archive with a comment: the end record and the comment.
  ZipWriter empty({.comment = "x"});
  EXPECT_EQ(testing::read_file(write_archive(empty, "empty.zip")),
            std::string("PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01\0x", 23));
}

TEST_F(ZipWriterTest, RejectsBadNamesAndAlignments) {
  ZipWriter writer;
  writer.add("a", "", Buffer());
  const auto code_of = [](const std::function<void()>& action) {
    try {
      action();
    } catch (const Error& error) {
      return error.code();
    }
    return ErrorCode::kIo;  // "no error" for these tests
  };
  EXPECT_EQ(code_of([&] { writer.add("a", "", Buffer()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { writer.add("", "", Buffer()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { writer.add(std::string("a\0b", 3), "", Buffer()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { writer.add(std::string(70000, 'n'), "", Buffer()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { ZipWriter({.alignment = 48}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { ZipWriter({.alignment = 65536}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { ZipWriter({.comment = std::string(65536, 'c')}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { ZipWriter({.comment = "a PK\x05\x06 b"}); }), ErrorCode::kInvalidArgument);
}

// ---------------------------------------------------------------- malformed

// Each case breaks one thing in a valid archive and expects one error code.
class ZipMalformedTest : public ZipTestBase {
 protected:
  TestZip valid(const TestZipOptions& options = {}) {
    return build_test_zip({{.name = "first.bin", .data = "first entry data"},
                           {.name = "second.bin", .data = std::string(100, 's'), .method = 8}},
                          options);
  }
  // Opens `bytes` and reads every entry (verifying CRCs); returns the error.
  Error open_error(std::string_view bytes) {
    const auto path = write(bytes, "bad.zip");
    try {
      const ZipReader reader(detail::MappedFile::open(path));
      for (const zip_detail::ZipEntry& entry : reader.entries()) reader.read(entry, {.verify_crc = true});
    } catch (const Error& error) {
      EXPECT_EQ(error.context().path, path) << error.what();
      return error;
    }
    ADD_FAILURE() << "the archive was accepted";
    return Error(ErrorCode::kIo, "accepted");
  }
  // The error's code; its message must contain `fragment` (which names the
  // check that fired, so that an earlier check cannot mask a missing one).
  ErrorCode code(std::string_view bytes, std::string_view fragment = {}) {
    const Error error = open_error(bytes);
    EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
    return error.code();
  }
};

TEST_F(ZipMalformedTest, ValidArchivesAreAccepted) {
  const ZipReader plain = open(valid().bytes);
  const ZipReader zip64 = open(valid({.zip64 = true}).bytes);
  EXPECT_EQ(plain.entries().size(), 2u);
  EXPECT_EQ(zip64.entries().size(), 2u);
}

TEST_F(ZipMalformedTest, TooSmallForAnEndRecord) { EXPECT_EQ(code("PK\x05\x06", "too small"), ErrorCode::kCorrupt); }

TEST_F(ZipMalformedTest, NoEndRecord) {
  std::string bytes = valid().bytes;
  bytes.resize(bytes.size() - 4);
  EXPECT_EQ(code(bytes), ErrorCode::kCorrupt);
  EXPECT_EQ(code(std::string(200, 'x')), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, CommentLengthLies) {
  TestZip zip = valid({.comment = "note"});
  testing::put_u16(zip.bytes, zip.end_offset + 20, 9);
  const Error error = open_error(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().offset, zip.end_offset + 20);
}

TEST_F(ZipMalformedTest, CentralDirectoryOutsideTheFile) {
  TestZip zip = valid();
  testing::put_u32(zip.bytes, zip.end_offset + 16, 0x7FFFFFF0);
  EXPECT_EQ(code(zip.bytes, "central directory ("), ErrorCode::kCorrupt);
  zip = valid();
  testing::put_u32(zip.bytes, zip.end_offset + 12, 0xFFFFFFF0);  // size
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, EntryCountMismatch) {
  TestZip more = valid();
  testing::put_u16(more.bytes, more.end_offset + 8, 3);
  testing::put_u16(more.bytes, more.end_offset + 10, 3);
  EXPECT_EQ(code(more.bytes, "more than a central directory"), ErrorCode::kCorrupt);
  TestZip fewer = valid();
  testing::put_u16(fewer.bytes, fewer.end_offset + 8, 1);
  testing::put_u16(fewer.bytes, fewer.end_offset + 10, 1);
  EXPECT_EQ(code(fewer.bytes, "entry count mismatch"), ErrorCode::kCorrupt);
  TestZip disagree = valid();
  testing::put_u16(disagree.bytes, disagree.end_offset + 8, 1);
  EXPECT_EQ(code(disagree.bytes), ErrorCode::kCorrupt);
  TestZip huge = valid();
  testing::put_u16(huge.bytes, huge.end_offset + 8, 0xFFFE);
  testing::put_u16(huge.bytes, huge.end_offset + 10, 0xFFFE);
  EXPECT_EQ(code(huge.bytes, "more than a central directory"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, MultiDiskArchive) {
  TestZip zip = valid();
  testing::put_u16(zip.bytes, zip.end_offset + 4, 1);
  EXPECT_EQ(code(zip.bytes, "multi-disk"), ErrorCode::kUnsupported);
}

TEST_F(ZipMalformedTest, CentralHeaderSignatureWrong) {
  TestZip zip = valid();
  zip.bytes[zip.central_offsets[1]] = 'X';
  const Error error = open_error(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().offset, zip.central_offsets[1]);
}

TEST_F(ZipMalformedTest, LocalHeaderSignatureWrong) {
  TestZip zip = valid();
  zip.bytes[zip.local_offsets[1] + 2] = 7;
  const Error error = open_error(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().entry, "second.bin");
  EXPECT_EQ(error.context().offset, zip.local_offsets[1]);
}

TEST_F(ZipMalformedTest, LocalHeaderNameMismatch) {
  TestZip zip = valid();
  zip.bytes[zip.local_offsets[0] + 30] = 'F';
  EXPECT_EQ(code(zip.bytes, "names the entry"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, LocalHeaderMethodOrSizeMismatch) {
  TestZip method = valid();
  testing::put_u16(method.bytes, method.local_offsets[0] + 8, 8);
  EXPECT_EQ(code(method.bytes, "compression method"), ErrorCode::kCorrupt);
  TestZip size = valid();
  testing::put_u32(size.bytes, size.local_offsets[0] + 18, 3);
  EXPECT_EQ(code(size.bytes, "compressed size 3"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, LocalHeaderOffsetPastTheDirectory) {
  TestZip zip = valid();
  testing::put_u32(zip.bytes, zip.central_offsets[0] + 42, static_cast<uint32_t>(zip.directory_offset + 4));
  EXPECT_EQ(code(zip.bytes, "lies past the central directory"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, DataExtendsPastTheEnd) {
  TestZip zip = valid();
  // A stored entry whose both sizes claim more than the file holds.
  for (size_t at : {zip.local_offsets[0] + 18, zip.local_offsets[0] + 22, zip.central_offsets[0] + 20,
                    zip.central_offsets[0] + 24}) {
    testing::put_u32(zip.bytes, at, 1u << 30);
  }
  EXPECT_EQ(code(zip.bytes, "entry data"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, StoredSizesDisagree) {
  TestZip zip = valid();
  testing::put_u32(zip.bytes, zip.central_offsets[0] + 24, 5);
  EXPECT_EQ(code(zip.bytes, "stored entry"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, OverlappingEntries) {
  TestZip zip = valid();
  // Entry 0 grows over entry 1's local header (local and central agree).
  const uint32_t grown = static_cast<uint32_t>(zip.local_offsets[1] - zip.data_offsets[0] + 10);
  for (size_t at : {zip.local_offsets[0] + 18, zip.local_offsets[0] + 22, zip.central_offsets[0] + 20,
                    zip.central_offsets[0] + 24}) {
    testing::put_u32(zip.bytes, at, grown);
  }
  const Error error = open_error(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().entry, "second.bin");
  EXPECT_EQ(error.context().offset, zip.local_offsets[1]);
  EXPECT_NE(error.message().find("overlaps"), std::string::npos) << error.what();
}

TEST_F(ZipMalformedTest, BadZip64Locator) {
  TestZip outside = valid({.zip64 = true});
  testing::put_u64(outside.bytes, outside.zip64_locator_offset + 8, 1ull << 40);
  EXPECT_EQ(code(outside.bytes, "no 56-byte zip64 end record fits"), ErrorCode::kCorrupt);
  TestZip wrong = valid({.zip64 = true});
  testing::put_u64(wrong.bytes, wrong.zip64_locator_offset + 8, 0);  // points at a local header
  EXPECT_EQ(code(wrong.bytes, "does not point at a zip64"), ErrorCode::kCorrupt);
  TestZip size = valid({.zip64 = true});
  testing::put_u64(size.bytes, size.zip64_record_offset + 4, 1ull << 62);
  EXPECT_EQ(code(size.bytes, "impossible size"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, Zip64RecordDisagreesWithEndRecord) {
  TestZip zip = valid({.zip64 = true});
  testing::put_u16(zip.bytes, zip.end_offset + 8, 1);
  testing::put_u16(zip.bytes, zip.end_offset + 10, 1);
  EXPECT_EQ(code(zip.bytes, "disagree about the central directory"), ErrorCode::kCorrupt);
  TestZip count = valid({.zip64 = true});
  testing::put_u64(count.bytes, count.zip64_record_offset + 32, 5);
  EXPECT_EQ(code(count.bytes, "entry counts disagree"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, Zip64ExtraFieldTooShort) {
  TestZip zip = valid({.zip64 = true});
  const size_t extra = zip.central_offsets[0] + 46 + std::string("first.bin").size();
  testing::put_u16(zip.bytes, extra + 2, 8);  // holds one u64 where three are needed
  EXPECT_EQ(code(zip.bytes, "zip64 extra field holds 8 bytes"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, ExtraFieldExtendsPastItsData) {
  TestZip zip = valid({.zip64 = true});
  const size_t extra = zip.central_offsets[0] + 46 + std::string("first.bin").size();
  testing::put_u16(zip.bytes, extra + 2, 200);
  EXPECT_EQ(code(zip.bytes, "extends past the extra data"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, UnsupportedCompressionMethod) {
  const TestZip zip = build_test_zip({{.name = "a", .data = "BZh9...", .method = 12}});
  const Error error = open_error(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
  EXPECT_EQ(error.context().entry, "a");
}

TEST_F(ZipMalformedTest, DeflateStreamCorrupt) {
  TestZip zip = valid();
  // Block type 3 is reserved: the stream is invalid from its first bits.
  zip.bytes[zip.data_offsets[1]] = static_cast<char>(0x07);
  const Error error = open_error(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().entry, "second.bin");
}

TEST_F(ZipMalformedTest, DeflatedSizeDisagreesWithDeclaredSize) {
  TestZip smaller = valid();
  testing::put_u32(smaller.bytes, smaller.central_offsets[1] + 24, 99);
  EXPECT_EQ(code(smaller.bytes, "more than the declared 99"), ErrorCode::kCorrupt);
  TestZip larger = valid();
  testing::put_u32(larger.bytes, larger.central_offsets[1] + 24, 101);
  EXPECT_EQ(code(larger.bytes, "inflates to 100 bytes, declared 101"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, ImpossibleInflatedSizeIsRefusedBeforeAllocating) {
  TestZip zip = valid({.zip64 = true});
  const size_t extra = zip.central_offsets[1] + 46 + std::string("second.bin").size();
  testing::put_u64(zip.bytes, extra + 4, 1ull << 50);  // 1 PiB from a few bytes
  EXPECT_EQ(code(zip.bytes, "more than deflate can produce"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, CrcMismatch) {
  TestZip stored = valid();
  stored.bytes[stored.data_offsets[0]] ^= 1;
  EXPECT_EQ(code(stored.bytes, "CRC-32 mismatch"), ErrorCode::kCorrupt);
  // Without verification a stored entry is not read, so no CRC is checked.
  const ZipReader reader = open(stored.bytes);
  EXPECT_NO_THROW(reader.read(reader.entries()[0]));
  TestZip deflated = valid();
  testing::put_u32(deflated.bytes, deflated.central_offsets[1] + 16, 0x12345678);
  const ZipReader always = open(deflated.bytes);
  EXPECT_THROW(always.read(always.entries()[1]), Error);
}

TEST_F(ZipMalformedTest, DuplicateNames) {
  const TestZip zip = build_test_zip({{.name = "same", .data = "1"}, {.name = "same", .data = "2"}});
  const Error error = open_error(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().entry, "same");
}

TEST_F(ZipMalformedTest, EncryptedEntry) {
  const TestZip zip = build_test_zip({{.name = "secret", .data = "xxxxxxxxxxxx", .flags = 1}});
  EXPECT_EQ(code(zip.bytes, "encrypted"), ErrorCode::kUnsupported);
}

TEST_F(ZipMalformedTest, BadNames) {
  const TestZip utf8 = build_test_zip({{.name = "bad\xC3", .data = "1", .flags = 1 << 11}});
  EXPECT_EQ(code(utf8.bytes, "not valid UTF-8"), ErrorCode::kCorrupt);
  const TestZip nul = build_test_zip({{.name = std::string("a\0b", 3), .data = "1"}});
  EXPECT_EQ(code(nul.bytes, "NUL"), ErrorCode::kCorrupt);
}

TEST_F(ZipMalformedTest, EveryTruncationAndByteFlipFailsCleanly) {
  // Never a crash, never an unbounded allocation: either an Error or a
  // (possibly different) valid archive.
  const TestZip zip = valid({.zip64 = true});
  const auto path = dir_ / "fuzz.zip";
  const auto attempt = [&](std::string_view bytes) {
    testing::write_file(path, bytes);
    try {
      const ZipReader reader(detail::MappedFile::open(path));
      for (const zip_detail::ZipEntry& entry : reader.entries()) reader.read(entry, {.verify_crc = true});
    } catch (const Error&) {
    }
  };
  for (size_t keep = 0; keep < zip.bytes.size(); ++keep) attempt(std::string_view(zip.bytes).substr(0, keep));
  for (size_t at = 0; at < zip.bytes.size(); ++at) {
    for (unsigned char value : {0x00, 0xFF, 0x80}) {
      std::string bytes = zip.bytes;
      bytes[at] = static_cast<char>(value);
      attempt(bytes);
    }
  }
}

}  // namespace
}  // namespace ckpt
