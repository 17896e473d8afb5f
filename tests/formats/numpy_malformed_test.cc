// Malformed .npy and .npz files, one defect at a time (like llama.cpp's
// test-gguf.cpp), each expecting its error code and a message that names the
// file, the member and the byte offset. Zip-level defects are in zip_test.cc.

#include <gtest/gtest.h>

#include "ckpt/error.h"
#include "formats/numpy/format.h"
#include "formats/zip_test_builder.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

// An .npy whose header text is exactly `text` (no padding added).
std::string raw_npy(std::string_view text, std::string_view data, int major = 1, int minor = 0) {
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(static_cast<char>(minor));
  if (major == 1) {
    testing::add_u16(out, static_cast<uint16_t>(text.size()));
  } else {
    testing::add_u32(out, static_cast<uint32_t>(text.size()));
  }
  out += text;
  out += data;
  return out;
}

// An .npy with `dict` padded to 64 bytes as numpy does.
std::string npy(std::string_view dict, std::string_view data) {
  std::string text(dict);
  text.append(64 - (10 + dict.size() + 1) % 64, ' ');
  text += '\n';
  return raw_npy(text, data);
}

const std::string kSixFloats(24, '\x01');

class NpyMalformedTest : public ::testing::Test {
 protected:
  Error error_of(std::string_view bytes) {
    const auto path = dir_ / "bad.npy";
    testing::write_file(path, bytes);
    try {
      npy_format().read(path, {});
    } catch (const Error& error) {
      EXPECT_EQ(error.context().path, path) << error.what();
      EXPECT_NE(std::string(error.what()).find("bad.npy"), std::string::npos) << error.what();
      return error;
    }
    ADD_FAILURE() << "the file was accepted";
    return Error(ErrorCode::kIo, "accepted");
  }
  // The error's code; its message must contain `fragment` (which names the
  // check that fired, so that an earlier check cannot mask a missing one).
  ErrorCode code(std::string_view bytes, std::string_view fragment = {}) {
    const Error error = error_of(bytes);
    EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
    return error.code();
  }
  // The code for an .npy with header dict `dict` (padded) and six floats.
  ErrorCode code_of_dict(std::string_view dict, std::string_view fragment = {}) {
    return code(npy(dict, kSixFloats), fragment);
  }

  testing::TempDir dir_;
};

constexpr const char* kValidDict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

TEST_F(NpyMalformedTest, TheValidBaseIsAccepted) {
  const auto path = dir_ / "good.npy";
  testing::write_file(path, npy(kValidDict, kSixFloats));
  EXPECT_EQ(npy_format().read(path, {}).tree.tensor().shape(), (Shape{2, 3}));
}

TEST_F(NpyMalformedTest, EmptyFile) { EXPECT_EQ(code("", "magic"), ErrorCode::kCorrupt); }

TEST_F(NpyMalformedTest, BadMagic) {
  std::string bytes = npy(kValidDict, kSixFloats);
  bytes[1] = 'n';
  const Error error = error_of(bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().offset, 0u);
}

TEST_F(NpyMalformedTest, TruncatedPrefix) {
  EXPECT_EQ(code(std::string("\x93NUMPY\x01\x00\x76", 9), "truncated"), ErrorCode::kCorrupt);
  EXPECT_EQ(code(std::string("\x93NUMPY\x02\x00\x76\x00", 10), "truncated"), ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, UnknownVersion) {
  EXPECT_EQ(code(raw_npy("{}\n", "", 4), "version 4.0"), ErrorCode::kUnsupported);
  EXPECT_EQ(code(raw_npy("{}\n", "", 1, 1)), ErrorCode::kUnsupported);
  EXPECT_EQ(code(raw_npy("{}\n", "", 0)), ErrorCode::kUnsupported);
}

TEST_F(NpyMalformedTest, HeaderLengthBeyondTheFile) {
  std::string bytes = npy(kValidDict, "");
  testing::put_u16(bytes, 8, 0xFFF0);
  const Error error = error_of(bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().offset, 8u);
  std::string v2 = raw_npy(std::string(kValidDict) + "\n", "", 2);
  testing::put_u32(v2, 8, 0xFFFFFFF0);
  EXPECT_EQ(code(v2, "header length"), ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, HeaderIsNotADict) {
  EXPECT_EQ(code_of_dict("['descr', '<f4']", "not a dict"), ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("'descr'"), ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict(""), ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, MissingKey) {
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'fortran_order': False, }", "lacks the key 'shape'"), ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'shape': (2, 3), }", "lacks the key 'fortran_order'"), ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("{'fortran_order': False, 'shape': (2, 3), }", "lacks the key 'descr'"), ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, UnexpectedOrDuplicateKey) {
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1, }", "unexpected key 'extra'"),
            ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", "duplicate key"),
            ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("{descr: '<f4', 'fortran_order': False, 'shape': (2, 3), }", "string key"), ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, DescrIsNotATypeString) {
  for (const char* descr : {"5", "None", "'<'", "''", "'<x4'", "'<i3'", "'<f1'", "'<b2'", "'float32'"}) {
    SCOPED_TRACE(descr);
    EXPECT_EQ(code_of_dict(std::string("{'descr': ") + descr + ", 'fortran_order': False, 'shape': (2, 3), }", "descr"),
              ErrorCode::kCorrupt);
  }
}

TEST_F(NpyMalformedTest, NumpyTypesCkptLacks) {
  // Valid numpy types: void (ml_dtypes' bfloat16 and float8 as np.save
  // writes them), strings, objects, datetimes, long double, structured, subarray.
  for (const char* descr : {"'<V2'", "'|V1'", "'<U5'", "'|S3'", "'|O'", "'<M8[ns]'", "'<m8'", "'<f16'", "'<c32'",
                            "[('a', '<f4'), ('b', '<i4')]", "('<f4', (2,))"}) {
    SCOPED_TRACE(descr);
    EXPECT_EQ(code_of_dict(std::string("{'descr': ") + descr + ", 'fortran_order': False, 'shape': (2, 3), }"),
              ErrorCode::kUnsupported);
  }
}

TEST_F(NpyMalformedTest, VoidTypeMessageExplainsMlDtypes) {
  const Error error = error_of(npy("{'descr': '<V2', 'fortran_order': False, 'shape': (3,), }", "123456"));
  EXPECT_NE(error.message().find("bfloat16"), std::string::npos) << error.what();
}

TEST_F(NpyMalformedTest, ShapeIsNotATupleOfIntegers) {
  for (const char* shape : {"[2, 3]", "(3)", "6", "(2, 'x')", "(2.0, 3)", "(True, 6)", "(2 3)", "(2, 3", "(,)",
                            "(02, 3)", "(0x2, 3)", "(2, 3L)"}) {
    SCOPED_TRACE(shape);
    // Python 2 longs are only read in 1.0/2.0 files; "3L" here is fine, so
    // make that one a 3.0 file.
    const std::string dict = std::string("{'descr': '<f4', 'fortran_order': False, 'shape': ") + shape + ", }";
    if (std::string_view(shape) == "(2, 3L)") {
      EXPECT_EQ(code(raw_npy(dict + "\n", kSixFloats, 3)), ErrorCode::kCorrupt);
    } else {
      EXPECT_EQ(code_of_dict(dict), ErrorCode::kCorrupt);
    }
  }
}

TEST_F(NpyMalformedTest, NegativeDimension) {
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3), }", "negative"), ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, DimensionBeyondInt64) {
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775808,), }", "beyond 2^63"),
            ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, ShapeTimesSizeOverflows) {
  EXPECT_EQ(code_of_dict("{'descr': '<c16', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "overflows"),
            ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }", "overflows"),
            ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, TooManyDimensions) {
  std::string shape = "(";
  for (int i = 0; i < 65; ++i) shape += "1, ";
  shape += ")";
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }", "more than 64"),
            ErrorCode::kUnsupported);
}

TEST_F(NpyMalformedTest, DataShorterThanDeclared) {
  const Error error = error_of(npy(kValidDict, kSixFloats.substr(0, 23)));
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().offset, 128u);
}

TEST_F(NpyMalformedTest, TrailingBytes) {
  const Error error = error_of(npy(kValidDict, kSixFloats + "junk"));
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().offset, 128u + 24u);
}

TEST_F(NpyMalformedTest, SeveralArraysAppended) {
  const std::string one = npy(kValidDict, kSixFloats);
  EXPECT_EQ(code(one + one, "another array"), ErrorCode::kUnsupported);
}

TEST_F(NpyMalformedTest, FortranOrderIsNotABool) {
  for (const char* value : {"1", "'False'", "false", "None", "Truth"}) {
    SCOPED_TRACE(value);
    EXPECT_EQ(code_of_dict(std::string("{'descr': '<f4', 'fortran_order': ") + value + ", 'shape': (2, 3), }", "not a bool"),
              ErrorCode::kCorrupt);
  }
}

TEST_F(NpyMalformedTest, NonAsciiOrControlBytesOutsideStrings) {
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), \xC3\xA9}", "non-ASCII"), ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict(std::string("{'descr': '<f4',") + '\0' + " 'fortran_order': False, 'shape': (2, 3), }", "control character"),
            ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, UnterminatedDictOrString) {
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", "unterminated"), ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }"), ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }}", "after the header dict"), ErrorCode::kCorrupt);
  EXPECT_EQ(code_of_dict("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3), }", "escape"), ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, HeaderWithoutFinalNewline) {
  std::string text(kValidDict);
  text.append(128 - 10 - text.size(), ' ');
  EXPECT_EQ(code(raw_npy(text, kSixFloats), "newline"), ErrorCode::kCorrupt);
  EXPECT_EQ(code(raw_npy("", "")), ErrorCode::kCorrupt);
}

TEST_F(NpyMalformedTest, EveryTruncationAndByteFlipFailsCleanly) {
  const std::string valid = npy("{'descr': '>c8', 'fortran_order': True, 'shape': (2, 3), }", std::string(48, '\x07'));
  const auto path = dir_ / "fuzz.npy";
  const auto attempt = [&](std::string_view bytes) {
    testing::write_file(path, bytes);
    try {
      npy_format().read(path, {});
    } catch (const Error&) {
    }
  };
  for (size_t keep = 0; keep < valid.size(); ++keep) attempt(std::string_view(valid).substr(0, keep));
  for (size_t at = 0; at < 128; ++at) {
    for (char value : {'\0', '\xFF', '9', ' ', '(', ',', '\'', '-'}) {
      std::string bytes = valid;
      bytes[at] = value;
      attempt(bytes);
    }
  }
}

// ---------------------------------------------------------------- npz

class NpzMalformedTest : public ::testing::Test {
 protected:
  static std::string good_npy() { return npy(kValidDict, kSixFloats); }
  testing::TestZip valid(uint16_t method = 0) {
    return testing::build_test_zip({{.name = "w.npy", .data = good_npy(), .method = method},
                                    {.name = "b.npy", .data = good_npy(), .method = method}});
  }
  Error error_of(std::string_view bytes) {
    const auto path = dir_ / "bad.npz";
    testing::write_file(path, bytes);
    try {
      npz_format().read(path, {.verify = true});
    } catch (const Error& error) {
      EXPECT_EQ(error.context().path, path) << error.what();
      return error;
    }
    ADD_FAILURE() << "the file was accepted";
    return Error(ErrorCode::kIo, "accepted");
  }
  ErrorCode code(std::string_view bytes) { return error_of(bytes).code(); }

  testing::TempDir dir_;
};

TEST_F(NpzMalformedTest, TheValidBasesAreAccepted) {
  for (uint16_t method : {0, 8}) {
    const auto path = dir_ / "good.npz";
    testing::write_file(path, valid(method).bytes);
    EXPECT_EQ(npz_format().read(path, {.verify = true}).entries.size(), 2u);
  }
}

TEST_F(NpzMalformedTest, MemberIsNotAnNpy) {
  const Error error = error_of(testing::build_test_zip({{.name = "w.npy", .data = good_npy()},
                                                        {.name = "notes.txt", .data = "hello"}}).bytes);
  EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
  EXPECT_EQ(error.context().entry, "notes.txt");
  EXPECT_EQ(code(testing::build_test_zip({{.name = "dir/", .data = ""}}).bytes), ErrorCode::kUnsupported);
}

TEST_F(NpzMalformedTest, StoredMemberWithBadNpyNamesMemberAndFileOffset) {
  testing::TestZip zip = valid();
  zip.bytes[zip.data_offsets[1] + 18] = '[';  // the ':' after 'descr'
  const Error error = error_of(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(error.context().entry, "b.npy");
  ASSERT_TRUE(error.context().offset.has_value());
  EXPECT_GE(*error.context().offset, zip.data_offsets[1]);
}

TEST_F(NpzMalformedTest, DeflatedMemberWithBadNpyGivesTheOffsetInsideTheMember) {
  std::string bad = good_npy();
  bad[0] = 'X';
  const Error error = error_of(testing::build_test_zip({{.name = "w.npy", .data = bad, .method = 8}}).bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_FALSE(error.context().offset.has_value());
  EXPECT_NE(error.message().find("inflated entry"), std::string::npos) << error.what();
}

TEST_F(NpzMalformedTest, MemberDataShorterOrLongerThanItsHeader) {
  EXPECT_EQ(code(testing::build_test_zip({{.name = "w.npy", .data = npy(kValidDict, "short")}}).bytes),
            ErrorCode::kCorrupt);
  EXPECT_EQ(code(testing::build_test_zip({{.name = "w.npy", .data = good_npy() + "xx", .method = 8}}).bytes),
            ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, CrcMismatch) {
  testing::TestZip zip = valid();
  zip.bytes[zip.data_offsets[0] + 140] ^= 1;  // in the array data
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, DeflateStreamCorrupt) {
  testing::TestZip zip = valid(8);
  zip.bytes[zip.data_offsets[1]] = static_cast<char>(0x07);
  EXPECT_EQ(error_of(zip.bytes).context().entry, "b.npy");
}

TEST_F(NpzMalformedTest, DuplicateMembers) {
  EXPECT_EQ(code(testing::build_test_zip({{.name = "w.npy", .data = good_npy()},
                                          {.name = "w.npy", .data = good_npy()}}).bytes),
            ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, NoEndOfCentralDirectory) {
  const std::string bytes = valid().bytes;
  EXPECT_EQ(code(bytes.substr(0, bytes.size() - 22)), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, CommentLengthLies) {
  testing::TestZip zip = valid();
  testing::put_u16(zip.bytes, zip.end_offset + 20, 1);
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, CentralDirectoryOutsideTheFile) {
  testing::TestZip zip = valid();
  testing::put_u32(zip.bytes, zip.end_offset + 16, static_cast<uint32_t>(zip.bytes.size()));
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, EntryCountMismatch) {
  testing::TestZip zip = valid();
  testing::put_u16(zip.bytes, zip.end_offset + 8, 3);
  testing::put_u16(zip.bytes, zip.end_offset + 10, 3);
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, LocalHeaderSignatureWrong) {
  testing::TestZip zip = valid();
  zip.bytes[zip.local_offsets[0]] = 'Q';
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, LocalHeaderNameMismatch) {
  testing::TestZip zip = valid();
  zip.bytes[zip.local_offsets[1] + 30] = 'x';
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, MemberDataExtendsPastTheEnd) {
  testing::TestZip zip = valid();
  for (size_t at : {zip.local_offsets[1] + 18, zip.local_offsets[1] + 22, zip.central_offsets[1] + 20,
                    zip.central_offsets[1] + 24}) {
    testing::put_u32(zip.bytes, at, 0x10000);
  }
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, BadZip64Locator) {
  testing::TestZip zip = testing::build_test_zip({{.name = "w.npy", .data = good_npy()}}, {.zip64 = true});
  testing::put_u64(zip.bytes, zip.zip64_locator_offset + 8, zip.zip64_record_offset + 1);
  EXPECT_EQ(code(zip.bytes), ErrorCode::kCorrupt);
}

TEST_F(NpzMalformedTest, UnsupportedCompressionMethod) {
  EXPECT_EQ(code(testing::build_test_zip({{.name = "w.npy", .data = good_npy(), .method = 14}}).bytes),
            ErrorCode::kUnsupported);
}

TEST_F(NpzMalformedTest, EveryTruncationAndByteFlipFailsCleanly) {
  const std::string valid_bytes = testing::build_test_zip({{.name = "a.npy", .data = good_npy()},
                                                           {.name = "b.npy", .data = good_npy(), .method = 8}},
                                                          {.zip64 = true})
                                      .bytes;
  const auto path = dir_ / "fuzz.npz";
  const auto attempt = [&](std::string_view bytes) {
    testing::write_file(path, bytes);
    try {
      npz_format().read(path, {.verify = true});
    } catch (const Error&) {
    }
  };
  for (size_t keep = 0; keep < valid_bytes.size(); ++keep) attempt(std::string_view(valid_bytes).substr(0, keep));
  for (size_t at = 0; at < valid_bytes.size(); ++at) {
    for (unsigned char value : {0x00, 0xFF, 0x7F}) {
      std::string bytes = valid_bytes;
      bytes[at] = static_cast<char>(value);
      attempt(bytes);
    }
  }
}

}  // namespace
}  // namespace ckpt
