#include "core/checksum.h"

#include <gtest/gtest.h>

#include "ckpt/checksum.h"
#include "ckpt/error.h"
#include "core/json_writer.h"

namespace ckpt::detail {
namespace {

std::span<const std::byte> bytes_of(std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); }

TEST(ChecksumTest, KnownVectors) {
  // The standard check value of each CRC over "123456789" (Rocksoft catalogue).
  EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u);
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  // XXH3_64bits of the empty input, from xxhash's own test suite.
  EXPECT_EQ(xxh3_64({}), 0x2D06800538D394C2ull);
}

TEST(ChecksumTest, IncrementalEqualsWhole) {
  std::string text(100000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 31);
  for (ChecksumKind kind : {ChecksumKind::kXxh3, ChecksumKind::kCrc32c}) {
    Checksummer sum(kind);
    sum.update(bytes_of(std::string_view(text).substr(0, 777)));
    sum.update(bytes_of(std::string_view(text).substr(777)));
    EXPECT_EQ(sum.hex(), checksum_hex(kind, bytes_of(text)));
    EXPECT_EQ(sum.hex().size(), checksum_hex_width(kind));
  }
  EXPECT_EQ(crc32(bytes_of("6789"), crc32(bytes_of("12345"))), 0xCBF43926u);
}

TEST(ChecksumTest, NamesRoundTrip) {
  for (ChecksumKind kind : {ChecksumKind::kNone, ChecksumKind::kXxh3, ChecksumKind::kCrc32c}) {
    EXPECT_EQ(checksum_from_name(checksum_name(kind)), kind);
  }
  EXPECT_THROW(checksum_from_name("md5"), Error);
}

TEST(ChecksumTest, PublicNamesAreTheOnesCkptWrites) {
  // ckpt/checksum.h: the names in ckpt's extras, on the command line and in Python.
  EXPECT_EQ(ckpt::checksum_name(ChecksumKind::kNone), "none");
  EXPECT_EQ(ckpt::checksum_name(ChecksumKind::kXxh3), "xxh3");
  EXPECT_EQ(ckpt::checksum_name(ChecksumKind::kCrc32c), "crc32c");
  EXPECT_EQ(ckpt::checksum_name(ChecksumKind::kCrc32), "crc32");
  EXPECT_EQ(ckpt::checksum_from_name("crc32"), ChecksumKind::kCrc32);
  for (std::string_view name : {"md5", "", "XXH3", "none "}) {
    try {
      ckpt::checksum_from_name(name);
      ADD_FAILURE() << "'" << name << "' was taken for a checksum kind";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(error.what()).find("known: xxh3, crc32c, crc32, none"), std::string::npos) << error.what();
    }
  }
}

TEST(JsonWriterTest, CompactLikeSerdeJson) {
  JsonWriter w;
  w.begin_object();
  w.key("a");
  w.begin_array();
  w.integer(1);
  w.integer(-2);
  w.unsigned_integer(18446744073709551615ull);
  w.end_array();
  w.key("s");
  w.string("q\"\\\n\x01/é");
  w.key("e");
  w.begin_object();
  w.end_object();
  w.key("f");
  w.real(0.5);
  w.key("g");
  w.real(3.0);
  w.key("b");
  w.boolean(true);
  w.key("n");
  w.null();
  w.end_object();
  EXPECT_EQ(w.text(), "{\"a\":[1,-2,18446744073709551615],\"s\":\"q\\\"\\\\\\n\\u0001/é\",\"e\":{},\"f\":0.5,\"g\":3.0,\"b\":true,\"n\":null}");
}

}  // namespace
}  // namespace ckpt::detail
