// Malformed safetensors files, one defect at a time. Every file is assembled
// here from bytes (length prefix + header text + data), never by the writer.

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/json_writer.h"
#include "formats/safetensors/format.h"
#include "support/safetensors_bytes.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::le64;

// A file: the header's length, the header, the data.
std::string file_of(std::string_view header, std::string_view data = {}) {
  return le64(header.size()) + std::string(header) + std::string(data);
}

// One U8 tensor "w" of shape [n] at [begin, begin + n).
std::string u8_entry(std::string_view name, int n, int begin) {
  return "\"" + std::string(name) + R"(":{"dtype":"U8","shape":[)" + std::to_string(n) + R"(],"data_offsets":[)" +
         std::to_string(begin) + "," + std::to_string(begin + n) + "]}";
}

// A file with one tensor "w" = "x" and ckpt's metadata value `ckpt_json`.
std::string ckpt_file(std::string_view ckpt_json, std::string_view data = "x") {
  std::string value;
  detail::append_json_string(value, ckpt_json);
  return file_of(R"({"__metadata__":{"ckpt":)" + value + "}," + u8_entry("w", 1, 0) + "}", data);
}

std::string xxh3_of(std::string_view bytes) {
  return detail::checksum_hex(ChecksumKind::kXxh3, std::as_bytes(std::span(bytes.data(), bytes.size())));
}

class SafetensorsMalformedTest : public ::testing::Test {
 protected:
  // Reads `bytes` as a file; expects an Error of `code` whose message names
  // the file (and `entry`, when given). Returns the error.
  std::optional<Error> expect_error(std::string_view bytes, ErrorCode code, std::string_view entry = {},
                                    LoadOptions options = {}) {
    const auto path = dir_ / "bad.safetensors";
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    try {
      safetensors_format().read(path, options);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), code) << error.what();
      EXPECT_NE(std::string(error.what()).find("bad.safetensors"), std::string::npos) << error.what();
      if (!entry.empty()) {
        EXPECT_EQ(error.context().entry, entry) << error.what();
      }
      return error;
    }
    ADD_FAILURE() << "accepted a malformed file";
    return std::nullopt;
  }

  void expect_corrupt(std::string_view bytes, std::string_view entry = {}) {
    expect_error(bytes, ErrorCode::kCorrupt, entry);
  }

  testing::TempDir dir_;
};

// ---- length prefix ----

TEST_F(SafetensorsMalformedTest, FileShorterThanTheLengthPrefix) {
  expect_corrupt("");
  const auto error = expect_error(std::string("\x08\x00\x00", 3), ErrorCode::kCorrupt);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->context().offset, 0u);
}

TEST_F(SafetensorsMalformedTest, HeaderLengthOverTheCap) {
  // tensor.rs test_header_too_large, and just over 100,000,000.
  expect_corrupt(std::string("<\x00\x00\x00\x00\xff\xff\xff", 8) + R"({"test":{}})");
  expect_corrupt(le64(100'000'001) + "{}");
  expect_corrupt(le64(std::numeric_limits<uint64_t>::max()) + "{}");
}

TEST_F(SafetensorsMalformedTest, HeaderLengthPastTheEndOfTheFile) {
  // tensor.rs test_invalid_header_length: N = 60, nothing after it.
  expect_corrupt(le64(60));
  expect_corrupt(le64(3) + "{}");
}

TEST_F(SafetensorsMalformedTest, TruncatedHeader) {
  const std::string whole = file_of("{" + u8_entry("w", 1, 0) + "}", "x");
  expect_corrupt(whole.substr(0, 20));
}

// ---- header text ----

TEST_F(SafetensorsMalformedTest, HeaderIsNotUtf8) {
  expect_corrupt(le64(1) + "\xff");  // tensor.rs test_invalid_header_non_utf8
  expect_corrupt(file_of("{\"w\xc3\":{}}"));
}

TEST_F(SafetensorsMalformedTest, HeaderIsNotJson) {
  expect_corrupt(le64(1) + "{");  // tensor.rs test_invalid_header_not_json
  expect_corrupt(file_of("{} x"));
  expect_corrupt(file_of(std::string("{}\0\0", 4)));
  expect_corrupt(file_of("\xef\xbb\xbf{}"));  // a byte-order mark is not JSON
  expect_corrupt(file_of(R"({"\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"));  // lone surrogate
}

TEST_F(SafetensorsMalformedTest, TopLevelIsNotAnObject) {
  expect_corrupt(file_of("[]"));
  expect_corrupt(file_of("\"text\""));
  expect_corrupt(file_of("null"));
}

TEST_F(SafetensorsMalformedTest, MetadataIsNotAMapOfStrings) {
  expect_corrupt(file_of(R"({"__metadata__":{"k":1}})"), "__metadata__.k");
  expect_corrupt(file_of(R"({"__metadata__":{"k":null}})"), "__metadata__.k");
  expect_corrupt(file_of(R"({"__metadata__":[]})"));
  expect_corrupt(file_of(R"({"__metadata__":"text"})"));
  expect_corrupt(file_of(R"({"__metadata__":{"k":"a","k":"b"}})"), "__metadata__.k");
  expect_corrupt(file_of(R"({"__metadata__":{},"__metadata__":{}})"));
}

TEST_F(SafetensorsMalformedTest, UnknownDtype) {
  for (const char* code : {"F33", "f32", "C128", "", "float32"}) {
    expect_corrupt(file_of(std::string(R"({"w":{"dtype":")") + code + R"(","shape":[1],"data_offsets":[0,1]}})", "x"),
                   "w");
  }
}

TEST_F(SafetensorsMalformedTest, MissingFields) {
  expect_corrupt(file_of(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "x"), "w");
  expect_corrupt(file_of(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "x"), "w");
  expect_corrupt(file_of(R"({"w":{"dtype":"U8","shape":[1]}})", "x"), "w");
  expect_corrupt(file_of(R"({"w":{}})", "x"), "w");
}

TEST_F(SafetensorsMalformedTest, FieldsOfTheWrongType) {
  const char* infos[] = {
      R"(3)",
      R"([])",
      R"({"dtype":1,"shape":[1],"data_offsets":[0,1]})",
      R"({"dtype":"U8","shape":"1","data_offsets":[0,1]})",
      R"({"dtype":"U8","shape":[[1]],"data_offsets":[0,1]})",
      R"({"dtype":"U8","shape":[null],"data_offsets":[0,1]})",
      R"({"dtype":"U8","shape":[true],"data_offsets":[0,1]})",
      R"({"dtype":"U8","shape":[1],"data_offsets":[0]})",
      R"({"dtype":"U8","shape":[1],"data_offsets":[0,1,2]})",
      R"({"dtype":"U8","shape":[1],"data_offsets":"0,1"})",
      R"({"dtype":"U8","shape":[1],"data_offsets":{"begin":0,"end":1}})",
      R"({"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]})",
  };
  for (const char* info : infos) expect_corrupt(file_of(std::string(R"({"w":)") + info + "}", "x"), "w");
}

TEST_F(SafetensorsMalformedTest, NegativeOrNonIntegerDimensions) {
  for (const char* shape : {"[-1]", "[1.0]", "[1e0]", "[0.5]", "[18446744073709551616]"}) {
    expect_corrupt(file_of(std::string(R"({"w":{"dtype":"U8","shape":)") + shape + R"(,"data_offsets":[0,1]}})", "x"));
  }
}

TEST_F(SafetensorsMalformedTest, ShapeTimesSizeOverflows) {
  // tensor.rs test_validation_overflow, both vectors.
  expect_corrupt(le64('O') +
                     std::string(R"({"test":{"dtype":"I32","shape":[2,18446744073709551614],"data_offsets":[0,16]}})") +
                     std::string(16, '\0'),
                 "test");
  expect_corrupt(le64('N') +
                     std::string(R"({"test":{"dtype":"I32","shape":[2,9223372036854775807],"data_offsets":[0,16]}})") +
                     std::string(16, '\0'),
                 "test");
}

// ---- data offsets ----

TEST_F(SafetensorsMalformedTest, EndBeforeBegin) {
  expect_corrupt(file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                         R"("b":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}})", "xy"),
                 "b");
  expect_corrupt(file_of(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", "xxxx"), "w");
}

TEST_F(SafetensorsMalformedTest, OffsetsThatOverflow) {
  expect_corrupt(file_of(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,18446744073709551615]}})"),
                 "w");
  expect_corrupt(file_of(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x"), "w");
  expect_corrupt(file_of(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}})", "x"));
}

TEST_F(SafetensorsMalformedTest, HoleBetweenTensors) {
  const auto error = expect_error(file_of("{" + u8_entry("a", 4, 0) + "," + u8_entry("b", 4, 8) + "}", "123456789abc"),
                                  ErrorCode::kCorrupt, "b");
  ASSERT_TRUE(error);
  EXPECT_NE(error->message().find("hole"), std::string::npos) << error->what();
}

TEST_F(SafetensorsMalformedTest, OverlappingTensors) {
  expect_corrupt(file_of("{" + u8_entry("a", 8, 0) + "," + u8_entry("b", 8, 4) + "}", "123456789abc"), "b");
  // tensor.rs test_json_attack: ten tensors all at [0, 16].
  std::string header = "{";
  for (int i = 0; i < 10; ++i) {
    if (i) header += ",";
    header += "\"weight_" + std::to_string(i) + R"(":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  }
  expect_corrupt(file_of(header + "}", std::string(16, '\0')));
}

TEST_F(SafetensorsMalformedTest, DataNotStartingAtZero) {
  const auto error = expect_error(file_of("{" + u8_entry("a", 4, 4) + "}", "12345678"), ErrorCode::kCorrupt, "a");
  ASSERT_TRUE(error);
  const uint64_t header_size = ("{" + u8_entry("a", 4, 4) + "}").size();
  EXPECT_EQ(error->context().offset, 8 + header_size + 4);
}

TEST_F(SafetensorsMalformedTest, SizeDisagreesWithShape) {
  // tensor.rs test_invalid_info: I32 [2, 2] in 4 bytes.
  expect_corrupt(le64(60) + R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0, 4]}})" + "\0\0\0\0", "test");
  // Sub-byte dtypes must end on a byte boundary (MisalignedSlice): 3 × F4.
  expect_corrupt(file_of(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", "x"), "w");
}

TEST_F(SafetensorsMalformedTest, TrailingBytes) {
  // tensor.rs test_metadata_incomplete_buffer: a polyglot file.
  expect_corrupt(le64(60) + R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})" +
                 std::string(16, '\0') + "extra_bogus_data_for_polyglot_file");
  expect_corrupt(file_of("{}", "x"));
}

TEST_F(SafetensorsMalformedTest, DataShorterThanDeclared) {
  expect_corrupt(le64(60) + R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})" + std::string(14, '\0'));
}

TEST_F(SafetensorsMalformedTest, DuplicateTensorNames) {
  // simdjson keeps both; the reader must refuse (serde would keep the last).
  expect_corrupt(file_of("{" + u8_entry("w", 1, 0) + "," + u8_entry("w", 1, 1) + "}", "xy"), "w");
  expect_corrupt(file_of("{" + u8_entry("w", 1, 0) + "," + u8_entry("\\u0077", 1, 1) + "}", "xy"), "w");
}

// ---- ckpt's extras ----

TEST_F(SafetensorsMalformedTest, CkptMetadataMalformed) {
  const std::string good_tree = R"("tree":{"map":[["w",{"tensor":"w"}]]})";
  const std::string cases[] = {
      "not json",
      "[]",
      "{" + good_tree + "}",                                          // no version
      R"({"version":"1",)" + good_tree + "}",                         // version not an integer
      R"({"version":0,)" + good_tree + "}",                           // version 0
      R"({"version":1})",                                             // no tree
      R"({"version":1,"tree":{"map":3}})",                            // bad skeleton
      R"({"version":1,"tree":{"map":[["w",{"tensor":"v"}]]}})",       // names a tensor not in the file
      R"({"version":1,"tree":[{"tensor":"w"},{"tensor":"w"}]})",      // names a tensor twice
      R"({"version":1,"tree":{"map":[]}})",                           // leaves a tensor out
      R"({"version":1,"version":1,)" + good_tree + "}",               // duplicate field
      R"({"version":1,)" + good_tree + R"(,"checksum":"xxh3"})",      // no checksums
      R"({"version":1,)" + good_tree + R"(,"checksum":"xxh3","checksums":{}})",  // missing one
      R"({"version":1,)" + good_tree + R"(,"checksum":"xxh3","checksums":{"w":"00"}})",  // wrong width
      R"({"version":1,)" + good_tree + R"(,"checksum":"xxh3","checksums":{"w":"ABCDEF0123456789"}})",
      R"({"version":1,)" + good_tree + R"(,"checksum":"xxh3","checksums":{"w":")" + xxh3_of("x") +
          R"(","v":")" + xxh3_of("x") + R"("}})",                     // names a tensor not in the file
      R"({"version":1,)" + good_tree + R"(,"dtypes":{"w":"float32"}})",      // not an allowed override
      R"({"version":1,)" + good_tree + R"(,"dtypes":{"w":"complex128"}})",   // U8 [1] is no F64 pair
  };
  for (const std::string& ckpt_json : cases) {
    SCOPED_TRACE(ckpt_json);
    expect_corrupt(ckpt_file(ckpt_json));
  }
}

TEST_F(SafetensorsMalformedTest, CkptMetadataFromTheFuture) {
  expect_error(ckpt_file(R"({"version":3,"tree":{"map":[["w",{"tensor":"w"}]]}})"), ErrorCode::kUnsupported);
  expect_error(ckpt_file(R"({"version":1,"tree":{"map":[["w",{"tensor":"w"}]]},"checksum":"sha9","checksums":{}})"),
               ErrorCode::kUnsupported);
}

// ---- ckpt's extras: aliases (tied tensors) ----

// A version-2 document whose tree is `tree` (a skeleton of "w" = "x" and any
// aliases) and whose remaining fields are `rest` (starting with a comma).
std::string alias_document(std::string_view tree, std::string_view rest, int version = 2) {
  return R"({"version":)" + std::to_string(version) + R"(,"tree":{"map":[)" + std::string(tree) + "]}" +
         std::string(rest) + "}";
}

constexpr std::string_view kTreeWithAlias = R"(["w",{"tensor":"w"}],["a",{"tensor":"a"}])";

TEST_F(SafetensorsMalformedTest, WellFormedAliasIsTheControl) {
  const auto path = dir_ / "good.safetensors";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const std::string good = ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":{"a":"w"})"));
    out.write(good.data(), static_cast<std::streamsize>(good.size()));
  }
  const Contents contents = safetensors_format().read(path, {});
  EXPECT_TRUE(contents.tree.at("a").tensor().same_memory(contents.tree.at("w").tensor()));
}

TEST_F(SafetensorsMalformedTest, AliasDefects) {
  struct Case {
    std::string file;
    std::string_view why;  // a piece of the message
  };
  const std::string tree_abw = R"(["w",{"tensor":"w"}],["a",{"tensor":"a"}],["b",{"tensor":"b"}])";
  const std::string sum = xxh3_of("x");
  const Case cases[] = {
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":["a","w"])")), "not an object"},
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":{"a":1})")), "not a string"},
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":{"a":null})")), "not a string"},
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":{"a":"nope"})")), "not in the file"},
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":{"a":"a"})")), "names itself"},
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":{"a":"w","a":"w"})")), "twice"},
      {ckpt_file(alias_document(tree_abw, R"(,"aliases":{"a":"b","b":"w"})")), "stored tensors only"},  // chain
      {ckpt_file(alias_document(tree_abw, R"(,"aliases":{"a":"b","b":"a"})")), "stored tensors only"},  // cycle
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":{"a":"w"},"aliases":{"a":"w"})")), "duplicate"},
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"aliases":{"a":"w"})", 1)), "needs version 2"},
      {ckpt_file(alias_document(R"(["w",{"tensor":"w"}])", R"(,"aliases":{"a":"w"})")), "missing from the tree"},
      {ckpt_file(alias_document(std::string(kTreeWithAlias) + R"(,["c",{"tensor":"a"}])", R"(,"aliases":{"a":"w"})")),
       "twice"},
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"checksum":"xxh3","checksums":{"w":")" + sum + R"(","a":")" +
                                                    sum + R"("},"aliases":{"a":"w"})")),
       "names alias"},
      {ckpt_file(alias_document(kTreeWithAlias, R"(,"dtypes":{"a":"complex128"},"aliases":{"a":"w"})")),
       "names alias"},
  };
  for (const Case& defect : cases) {
    SCOPED_TRACE(defect.file);
    const auto error = expect_error(defect.file, ErrorCode::kCorrupt, "__metadata__.ckpt");
    ASSERT_TRUE(error);
    EXPECT_NE(error->message().find(defect.why), std::string::npos) << error->what();
  }
}

TEST_F(SafetensorsMalformedTest, AliasThatIsAlsoAStoredTensor) {
  // Two stored tensors, "w" and "v"; "v" also claims to be an alias of "w".
  std::string value;
  detail::append_json_string(
      value, R"({"version":2,"tree":{"map":[["w",{"tensor":"w"}],["v",{"tensor":"v"}]]},"aliases":{"v":"w"}})");
  const std::string file = file_of(R"({"__metadata__":{"ckpt":)" + value + "}," + u8_entry("w", 1, 0) + "," +
                                       u8_entry("v", 1, 1) + "}",
                                   "xy");
  const auto error = expect_error(file, ErrorCode::kCorrupt, "__metadata__.ckpt");
  ASSERT_TRUE(error);
  EXPECT_NE(error->message().find("also the name of a stored tensor"), std::string::npos) << error->what();
}

TEST_F(SafetensorsMalformedTest, ChecksumMismatchUnderVerify) {
  const std::string ckpt_json = R"({"version":1,"tree":{"map":[["w",{"tensor":"w"}]]},"checksum":"xxh3","checksums":{"w":")" +
                                xxh3_of("x") + R"("}})";
  // The stored sum is of "x"; the data says "y".
  const auto error = expect_error(ckpt_file(ckpt_json, "y"), ErrorCode::kCorrupt, "w", {.verify = true});
  ASSERT_TRUE(error);
  EXPECT_NE(error->message().find("checksum"), std::string::npos);
  EXPECT_TRUE(error->context().offset.has_value());
  // Without verify the bytes are not read, and the file opens.
  const auto path = dir_ / "bad.safetensors";
  EXPECT_NO_THROW(safetensors_format().read(path, {}));
  // With the right data it verifies.
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const std::string good = ckpt_file(ckpt_json, "x");
    out.write(good.data(), static_cast<std::streamsize>(good.size()));
  }
  EXPECT_NO_THROW(safetensors_format().read(path, {.verify = true}));
}

}  // namespace
}  // namespace ckpt
