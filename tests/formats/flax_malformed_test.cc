// Malformed Flax msgpack files, one defect at a time (like llama.cpp's
// test-gguf.cpp), each expecting its error code and a message that names the
// file and the entry (the dotted tree path).

#include <gtest/gtest.h>

#include "ckpt/error.h"
#include "formats/flax/format.h"
#include "formats/flax/msgpack.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using namespace flax_detail;

// An ext 1 payload: (shape, dtype name, data), as _ndarray_to_bytes packs it.
std::string ndarray_payload(const std::vector<int64_t>& shape, std::string_view dtype, std::string_view data) {
  std::string out;
  append_array_header(out, 3);
  append_array_header(out, shape.size());
  for (int64_t dimension : shape) append_int(out, dimension);
  append_str(out, dtype);
  append_bin_header(out, data.size());
  out += data;
  return out;
}

std::string ext(int8_t type, std::string_view payload) {
  std::string out;
  append_ext_header(out, type, payload.size());
  out += payload;
  return out;
}

// {"params": {"dense": {"kernel": <value>}}}: the defect sits at params.dense.kernel.
std::string nested(std::string_view value) {
  std::string out;
  append_map_header(out, 1);
  append_str(out, "params");
  append_map_header(out, 1);
  append_str(out, "dense");
  append_map_header(out, 1);
  append_str(out, "kernel");
  out += value;
  return out;
}

const std::string kSixBytes(6, '\x01');
const std::string kValidArray = ext(1, ndarray_payload({2, 3}, "int8", kSixBytes));

class FlaxMalformedTest : public ::testing::Test {
 protected:
  Error error_of(std::string_view bytes) {
    const auto path = dir_ / "checkpoint_7";
    testing::write_file(path, bytes);
    try {
      flax_format().read(path, {});
    } catch (const Error& error) {
      EXPECT_EQ(error.context().path, path) << error.what();
      EXPECT_NE(std::string(error.what()).find("checkpoint_7"), std::string::npos) << error.what();
      return error;
    }
    ADD_FAILURE() << "the file was accepted";
    return Error(ErrorCode::kIo, "accepted");
  }
  // The code; the message must contain `fragment` (the check that fired) and
  // the entry must be `entry`.
  ErrorCode code(std::string_view bytes, std::string_view fragment, std::string_view entry = "params.dense.kernel") {
    const Error error = error_of(bytes);
    EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
    EXPECT_EQ(error.context().entry, entry) << error.what();
    return error.code();
  }
  testing::TempDir dir_;
};

TEST_F(FlaxMalformedTest, TheValidBaseIsAccepted) {
  testing::write_file(dir_ / "good", nested(kValidArray));
  const Tree tree = flax_format().read(dir_ / "good", {}).tree;
  EXPECT_EQ(tree.at("params.dense.kernel").tensor().shape(), (Shape{2, 3}));
}

TEST_F(FlaxMalformedTest, TruncatedAtEveryLength) {
  const std::string whole = nested(kValidArray);
  for (size_t keep = 0; keep < whole.size(); ++keep) {
    SCOPED_TRACE(keep);
    const Error error = error_of(whole.substr(0, keep));
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
  }
}

TEST_F(FlaxMalformedTest, TrailingBytes) {
  EXPECT_EQ(code(nested(kValidArray) + "\xc0", "unexpected bytes after the msgpack object", ""), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, NeverUsedTypeByte) {
  EXPECT_EQ(code(nested("\xc1"), "0xc1"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, ExtPayloadIsNotATuple) {
  std::string payload;
  append_str(payload, "float32");
  EXPECT_EQ(code(nested(ext(1, payload)), "expected an array of 3"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, ExtPayloadTupleOfTwo) {
  std::string payload;
  append_array_header(payload, 2);
  append_array_header(payload, 0);
  append_str(payload, "int8");
  EXPECT_EQ(code(nested(ext(1, payload)), "array of 2"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, ArrayBytesShorterThanTheShape) {
  EXPECT_EQ(code(nested(ext(1, ndarray_payload({2, 3}, "int8", "12345"))), "need 6"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, DTypeAndBytesDisagree) {
  EXPECT_EQ(code(nested(ext(1, ndarray_payload({2, 3}, "float32", kSixBytes))), "need 24"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, UnknownDTypeName) {
  EXPECT_EQ(code(nested(ext(1, ndarray_payload({6}, "float128", kSixBytes))), "dtype 'float128'"),
            ErrorCode::kUnsupported);
}

TEST_F(FlaxMalformedTest, DTypeNameWithControlBytesIsQuoted) {
  // A bin dtype name holding a NUL, an escape sequence and a byte that is no
  // UTF-8: one printable line, the bytes escaped, nothing cut at the NUL.
  std::string payload;
  append_array_header(payload, 3);
  append_array_header(payload, 1);
  append_int(payload, 6);
  const std::string name("f\0\x1b[2J\xff", 7);
  append_bin_header(payload, name.size());
  payload += name;
  append_bin_header(payload, kSixBytes.size());
  payload += kSixBytes;
  const Error error = error_of(nested(ext(1, payload)));
  EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
  EXPECT_NE(error.message().find(R"(dtype 'f\x00\x1b[2J\xff')"), std::string::npos) << error.what();
  for (const char c : std::string(error.what())) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << error.what();
}

TEST_F(FlaxMalformedTest, OverflowingShape) {
  EXPECT_EQ(code(nested(ext(1, ndarray_payload({int64_t{1} << 62, 8}, "int8", kSixBytes))), "overflows"),
            ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, NegativeDimension) {
  EXPECT_EQ(code(nested(ext(1, ndarray_payload({-6}, "int8", kSixBytes))), "below 0"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, TooManyDimensions) {
  EXPECT_EQ(code(nested(ext(1, ndarray_payload(std::vector<int64_t>(65, 1), "int8", "x"))), "65 dimensions"),
            ErrorCode::kUnsupported);
}

TEST_F(FlaxMalformedTest, ShapeIsAMap) {
  std::string payload;
  append_array_header(payload, 3);
  append_map_header(payload, 0);
  append_str(payload, "int8");
  append_bin_header(payload, 1);
  payload += "x";
  EXPECT_EQ(code(nested(ext(1, payload)), "shape is a map"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, DTypeNameIsAnInteger) {
  std::string payload;
  append_array_header(payload, 3);
  append_array_header(payload, 0);
  append_int(payload, 7);
  append_bin_header(payload, 1);
  payload += "x";
  EXPECT_EQ(code(nested(ext(1, payload)), "dtype name is a int"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, BytesAfterTheArrayInsideThePayload) {
  EXPECT_EQ(code(nested(ext(1, ndarray_payload({6}, "int8", kSixBytes) + "\xc0")), "unexpected bytes after the array"),
            ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, UnknownExtType) {
  EXPECT_EQ(code(nested(ext(7, "abc")), "ext type 7"), ErrorCode::kUnsupported);
}

TEST_F(FlaxMalformedTest, ComplexPayloadIsNotAPair) {
  std::string payload;
  append_array_header(payload, 1);
  append_float64(payload, 1.0);
  EXPECT_EQ(code(nested(ext(2, payload)), "array of 2"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, NestingDepthBomb) {
  const std::string bomb = std::string(100000, '\x91') + "\xc0";
  EXPECT_EQ(error_of(nested(bomb)).code(), ErrorCode::kUnsupported);
  EXPECT_NE(std::string(error_of(nested(bomb)).message()).find("nested deeper"), std::string::npos);
}

TEST_F(FlaxMalformedTest, HugeDeclaredMapCount) {
  EXPECT_EQ(code(nested("\xdf\xff\xff\xff\xff\xc0"), "declares 4294967295 pairs"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, HugeDeclaredBinLength) {
  EXPECT_EQ(code(nested("\xc6\xff\xff\xff\xf0xyz"), "extends past the end"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, HugeDeclaredExtLength) {
  EXPECT_EQ(code(nested("\xc9\x7f\xff\xff\xff\x01xyz"), "extends past the end"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, FloatMapKey) {
  std::string value;
  append_map_header(value, 1);
  append_float64(value, 1.5);
  value += kValidArray;
  EXPECT_EQ(code(nested(value), "map key is a msgpack float"), ErrorCode::kUnsupported);
}

TEST_F(FlaxMalformedTest, NilMapKey) {
  std::string value;
  append_map_header(value, 1);
  append_nil(value);
  value += kValidArray;
  EXPECT_EQ(code(nested(value), "map key is a msgpack nil"), ErrorCode::kUnsupported);
}

TEST_F(FlaxMalformedTest, InvalidUtf8Key) {
  std::string value;
  append_map_header(value, 1);
  append_str(value, "\xff\xfe");
  value += kValidArray;
  EXPECT_EQ(code(nested(value), "UTF-8"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, DuplicateKey) {
  std::string value;
  append_map_header(value, 2);
  append_str(value, "w");
  value += kValidArray;
  append_str(value, "w");
  value += kValidArray;
  EXPECT_EQ(code(nested(value), "duplicate map key 'w'"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, IntegerBeyondInt64) {
  std::string value;
  append_uint(value, ~uint64_t{0});
  EXPECT_EQ(code(nested(value), "exceeds 2^63 - 1"), ErrorCode::kUnsupported);
}

// {"__msgpack_chunked_array__": True, "shape": {"0": 6}, "chunks": {"0": ...}}
std::string chunked(int64_t dimension, bool with_shape = true) {
  std::string out;
  append_map_header(out, with_shape ? 3 : 2);
  append_str(out, "__msgpack_chunked_array__");
  append_bool(out, true);
  if (with_shape) {
    append_str(out, "shape");
    append_map_header(out, 1);
    append_str(out, "0");
    append_int(out, dimension);
  }
  append_str(out, "chunks");
  append_map_header(out, 2);
  append_str(out, "0");
  out += ext(1, ndarray_payload({4}, "int8", "abcd"));
  append_str(out, "1");
  out += ext(1, ndarray_payload({2}, "int8", "ef"));
  return out;
}

TEST_F(FlaxMalformedTest, ChunkedArrayIsAccepted) {
  testing::write_file(dir_ / "good", nested(chunked(6)));
  const Tensor tensor = flax_format().read(dir_ / "good", {}).tree.at("params.dense.kernel").tensor();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(tensor.bytes().data()), 6), "abcdef");
}

TEST_F(FlaxMalformedTest, ChunkedArrayOfTheWrongTotal) {
  EXPECT_EQ(code(nested(chunked(7)), "chunks hold 6 bytes, the shape needs 7"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, ChunkedArrayWithoutShape) {
  EXPECT_EQ(code(nested(chunked(6, false)), "expected exactly the keys"), ErrorCode::kCorrupt);
}

TEST_F(FlaxMalformedTest, AliasToAMissingLeaf) {
  std::string payload;
  append_str(payload, "params.nothing");
  const Error error = error_of(nested(ext(99, payload)));
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_NE(error.message().find("params.nothing"), std::string::npos) << error.what();
  EXPECT_EQ(error.context().entry, "params.dense.kernel");
}

TEST_F(FlaxMalformedTest, HugeDeclaredArrayCountInABigFile) {
  // 2^26 items fit the bytes left (one each), so the count passes; the items
  // do not parse, and nothing of 2^26 entries is allocated first.
  std::string value("\xdd\x04\x00\x00\x00", 5);
  value += std::string(size_t{1} << 26, '\xc1');
  EXPECT_EQ(code(nested(value), "0xc1", "params.dense.kernel.0"), ErrorCode::kCorrupt);
}

// Every byte of a small file holding each kind of value, changed to a few
// values: the reader accepts the file or throws ckpt::Error, never anything
// else (run under the sanitizers by `make test-asan`).
TEST_F(FlaxMalformedTest, MutatedFilesGiveErrorsNotCrashes) {
  std::string file;
  append_map_header(file, 4);
  append_str(file, "a");
  file += kValidArray;
  append_str(file, "list");
  append_array_header(file, 3);
  append_int(file, -300);
  append_float64(file, 0.5);
  append_str(file, "text");
  append_str(file, "big");
  file += chunked(6);
  append_int(file, 7);
  append_bin_header(file, 2);
  file += "xy";
  const auto path = dir_ / "mutated";
  size_t errors = 0;
  for (size_t at = 0; at < file.size(); ++at) {
    for (int delta : {1, 0x80, 0x41}) {
      std::string bytes = file;
      bytes[at] = static_cast<char>(bytes[at] + delta);
      testing::write_file(path, bytes);
      try {
        flax_format().read(path, {});
      } catch (const Error& error) {
        ++errors;
        EXPECT_TRUE(error.code() == ErrorCode::kCorrupt || error.code() == ErrorCode::kUnsupported) << error.what();
      }
    }
  }
  EXPECT_GT(errors, file.size());
}

}  // namespace
}  // namespace ckpt
