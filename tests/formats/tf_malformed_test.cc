// Malformed TensorFlow bundles, one defect at a time (like llama.cpp's
// test-gguf.cpp), each expecting its error code, a message naming the check
// that fired, and the file (the .index or the shard) and entry it concerns.

#include <gtest/gtest.h>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/tf/format.h"
#include "formats/tf/shard_trailer.h"
#include "formats/tf_test_builder.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace tfb = testing::tf;
using tf_detail::IndexRecord;

const std::string kKey = "layer/kernel";
const std::string kSixFloats(24, '\x01');

// A valid bundle: one float32 [2, 3] tensor, plus what a case changes.
struct Bundle {
  std::string header = tfb::header();
  tfb::EntrySpec entry{.dtype = 1, .shape = {2, 3}, .size = 24, .crc = tfb::masked_crc_of(kSixFloats)};
  std::string data = kSixFloats;
  std::vector<IndexRecord> extra;  // more records, sorted after kKey
  bool with_header = true;
  int shards = 1;
};

class TfMalformedTest : public ::testing::Test {
 protected:
  std::filesystem::path prefix() const { return dir_ / "model.ckpt-1"; }

  void write(const Bundle& bundle) {
    std::vector<IndexRecord> records;
    if (bundle.with_header) records.emplace_back("", bundle.header);
    records.emplace_back(kKey, tfb::entry(bundle.entry));
    for (const IndexRecord& record : bundle.extra) records.push_back(record);
    std::vector<std::string> shards(static_cast<size_t>(bundle.shards), std::string());
    shards[0] = bundle.data;
    tfb::write_bundle(prefix(), records, shards);
  }

  // Reads the bundle and returns the error; the error must name `file` (a
  // file name in dir_) and, when given, `entry`, and its message must hold
  // `fragment` (so that an earlier check cannot mask a missing one).
  Error error_of(std::string_view fragment, std::string_view file, std::string_view entry, bool verify = false) {
    try {
      tf_format().read(prefix(), {.verify = verify});
    } catch (const Error& error) {
      EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
      EXPECT_EQ(error.context().path.filename().string(), file) << error.what();
      if (!entry.empty()) {
        EXPECT_EQ(error.context().entry, entry) << error.what();
      }
      return error;
    }
    ADD_FAILURE() << "the bundle was accepted";
    return Error(ErrorCode::kIo, "accepted");
  }
  ErrorCode code(const Bundle& bundle, std::string_view fragment, std::string_view file = "model.ckpt-1.index",
                 std::string_view entry = kKey, bool verify = false) {
    write(bundle);
    return error_of(fragment, file, entry, verify).code();
  }

  // Rewrites the .index file with `edit` applied to its bytes.
  template <class Edit>
  ErrorCode index_edited(Edit edit, std::string_view fragment) {
    write(Bundle{});
    const auto path = tf_detail::index_path(prefix());
    std::string bytes = testing::read_file(path);
    edit(bytes);
    testing::write_file(path, bytes);
    return error_of(fragment, "model.ckpt-1.index", "").code();
  }

  testing::TempDir dir_;
};

TEST_F(TfMalformedTest, TheValidBaseIsAccepted) {
  write(Bundle{});
  const Contents contents = tf_format().read(prefix(), {.verify = true});
  EXPECT_EQ(contents.tree.at("layer.kernel").tensor().shape(), (Shape{2, 3}));
}

TEST_F(TfMalformedTest, BadTableMagic) {
  EXPECT_EQ(index_edited([](std::string& bytes) { bytes.back() ^= 1; }, "magic"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, IndexShorterThanTheFooter) {
  EXPECT_EQ(index_edited([](std::string& bytes) { bytes.resize(20); }, "footer"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, TruncatedIndexKeepingTheFooter) {
  // Drop the first bytes: the block handles then point past the data.
  EXPECT_EQ(index_edited([](std::string& bytes) { bytes.erase(0, 10); }, "runs past"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, BlockCrcMismatch) {
  // Byte 5 lies inside the first data block (the header's value).
  EXPECT_EQ(index_edited([](std::string& bytes) { bytes[5] ^= 0x40; }, "checksum"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, MissingHeader) {
  Bundle bundle;
  bundle.with_header = false;
  EXPECT_EQ(code(bundle, "header entry", "model.ckpt-1.index", kKey), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, HeaderIsNotAProto) {
  Bundle bundle;
  bundle.header = "\xff\xff\xff";
  EXPECT_EQ(code(bundle, "BundleHeaderProto", "model.ckpt-1.index", ""), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, ZeroShards) {
  Bundle bundle;
  bundle.header = tfb::header({.num_shards = 0});
  EXPECT_EQ(code(bundle, "num_shards", "model.ckpt-1.index", ""), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, BadEndianness) {
  Bundle bundle;
  bundle.header = tfb::header({.endianness = 7});
  EXPECT_EQ(code(bundle, "endianness", "model.ckpt-1.index", ""), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, BigEndianIsUnsupported) {
  Bundle bundle;
  bundle.header = tfb::header({.endianness = 1});
  EXPECT_EQ(code(bundle, "big-endian", "model.ckpt-1.index", ""), ErrorCode::kUnsupported);
}

TEST_F(TfMalformedTest, NewerVersion) {
  Bundle bundle;
  bundle.header = tfb::header({.producer = 2, .min_consumer = 2});
  EXPECT_EQ(code(bundle, "version", "model.ckpt-1.index", ""), ErrorCode::kUnsupported);
}

TEST_F(TfMalformedTest, EntryIsNotAProto) {
  Bundle bundle;
  write(bundle);
  tfb::write_bundle(prefix(), {{"", tfb::header()}, {kKey, "\x0a\xff"}}, {kSixFloats});
  EXPECT_EQ(error_of("BundleEntryProto", "model.ckpt-1.index", kKey).code(), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, InvalidDType) {
  Bundle bundle;
  bundle.entry.dtype = 0;
  EXPECT_EQ(code(bundle, "not a valid"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, NegativeDType) {
  // -1 is the "no TF code" mark of ckpt's dtype table, never a DataType.
  Bundle bundle;
  bundle.entry.dtype = -1;
  EXPECT_EQ(code(bundle, "not a valid"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, DTypeCkptLacks) {
  Bundle bundle;
  bundle.entry.dtype = 20;  // DT_RESOURCE
  EXPECT_EQ(code(bundle, "not supported"), ErrorCode::kUnsupported);
}

TEST_F(TfMalformedTest, UnknownRank) {
  Bundle bundle;
  bundle.entry.unknown_rank = true;
  EXPECT_EQ(code(bundle, "unknown rank"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, NegativeDimension) {
  Bundle bundle;
  bundle.entry.shape = {2, -3};
  EXPECT_EQ(code(bundle, "negative"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, ShapeOverflow) {
  Bundle bundle;
  bundle.entry.shape = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_EQ(code(bundle, "overflows"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, SizeDisagreesWithShape) {
  Bundle bundle;
  bundle.entry.size = 20;
  EXPECT_EQ(code(bundle, "differs"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, ShardIdOutsideNumShards) {
  Bundle bundle;
  bundle.entry.shard = 1;
  EXPECT_EQ(code(bundle, "outside"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, ShardMissing) {
  write(Bundle{});
  std::filesystem::remove(tf_detail::shard_path(prefix(), 0, 1));
  EXPECT_EQ(error_of("missing", "model.ckpt-1.data-00000-of-00001", kKey).code(), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, NumShardsDisagreesWithTheFiles) {
  // The header says two shards; the files on disk are "-of-00001".
  Bundle bundle;
  bundle.header = tfb::header({.num_shards = 2});
  EXPECT_EQ(code(bundle, "missing", "model.ckpt-1.data-00000-of-00002"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, EntryPastTheShard) {
  Bundle bundle;
  bundle.entry.offset = 8;
  EXPECT_EQ(code(bundle, "past the shard", "model.ckpt-1.data-00000-of-00001"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, EntryPastItsShardOfSeveral) {
  // Shard 1 of 2 is empty: an entry there names that file, not shard 0.
  Bundle bundle;
  bundle.header = tfb::header({.num_shards = 2});
  bundle.shards = 2;
  bundle.entry.shard = 1;
  EXPECT_EQ(code(bundle, "past the shard", "model.ckpt-1.data-00001-of-00002"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, OneShardOfSeveralMissing) {
  Bundle bundle;
  bundle.header = tfb::header({.num_shards = 3});
  bundle.shards = 3;
  bundle.entry.shard = 2;
  write(bundle);
  std::filesystem::remove(tf_detail::shard_path(prefix(), 2, 3));
  EXPECT_EQ(error_of("missing", "model.ckpt-1.data-00002-of-00003", kKey).code(), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, NegativeOffset) {
  Bundle bundle;
  bundle.entry.offset = -8;
  EXPECT_EQ(code(bundle, "negative offset"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, DataCrcMismatchUnderVerify) {
  Bundle bundle;
  bundle.data[3] ^= 0x10;
  write(bundle);
  EXPECT_NO_THROW(tf_format().read(prefix(), {}));  // cheap checks only
  EXPECT_EQ(error_of("CRC-32C mismatch", "model.ckpt-1.data-00000-of-00001", kKey, true).code(),
            ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, SlicedEntryWithoutItsSlices) {
  Bundle bundle;
  // slices { extent { start: 0 length: 2 } extent { } }: no slice entries stored.
  bundle.entry.extra = tfb::field_bytes(7, tfb::field_bytes(1, tfb::field_varint(2, 2)) + tfb::field_bytes(1, ""));
  EXPECT_EQ(code(bundle, "slices listed"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, SliceOutsideTheShape) {
  Bundle bundle;
  // slices { extent { start: 1 length: 2 } extent { } } of a [2, 3] tensor.
  bundle.entry.extra = tfb::field_bytes(
      7, tfb::field_bytes(1, tfb::field_varint(1, 1) + tfb::field_varint(2, 2)) + tfb::field_bytes(1, ""));
  EXPECT_EQ(code(bundle, "outside the tensor's shape"), ErrorCode::kCorrupt);
}

// String tensors: a 2-element DT_STRING entry whose stored bytes are `data`.
Bundle string_bundle(std::string data, int64_t size_delta = 0) {
  Bundle bundle;
  bundle.entry = {.dtype = 7, .shape = {2}, .size = static_cast<int64_t>(data.size()) + size_delta,
                  .crc = tfb::masked_crc_of(data)};
  bundle.data = std::move(data);
  return bundle;
}

TEST_F(TfMalformedTest, StringLengthsFailTheirCrc) {
  std::string data = tfb::string_tensor({"ab", "cde"});
  data[2] ^= 1;  // the first byte of the lengths' CRC
  EXPECT_EQ(code(string_bundle(data), "CRC-32C", "model.ckpt-1.data-00000-of-00001"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, StringLengthsExceedTheBytes) {
  std::string data = tfb::string_tensor({"ab", "cde"});
  data[1] = 0x7f;  // the second length: 127 bytes
  EXPECT_EQ(code(string_bundle(data), "longer than", "model.ckpt-1.data-00000-of-00001"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, StringBytesDoNotAddUp) {
  std::string data = tfb::string_tensor({"ab", "cde"}) + "xyz";
  EXPECT_EQ(code(string_bundle(data), "add up", "model.ckpt-1.data-00000-of-00001"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, StringVarintNeverEnds) {
  std::string data(16, '\xff');
  EXPECT_EQ(code(string_bundle(data), "varint", "model.ckpt-1.data-00000-of-00001"), ErrorCode::kCorrupt);
}

// Every single-byte change and every truncation of the .index, and every
// byte change of the shard: an Error or a valid read, never a crash or
// another exception (LevelDB's reader trusts block handles; ckpt checks them).
TEST_F(TfMalformedTest, EveryByteOfTheIndexAndShardIsChecked) {
  Bundle bundle;
  const std::string strings = tfb::string_tensor({"ab", "cde"});
  bundle.data = kSixFloats + strings;
  bundle.extra.emplace_back("names", tfb::entry({.dtype = 7, .shape = {2}, .offset = 24,
                                                 .size = static_cast<int64_t>(strings.size())}));
  write(bundle);
  const auto index_path = tf_detail::index_path(prefix());
  const auto shard_path = tf_detail::shard_path(prefix(), 0, 1);
  const std::string index = testing::read_file(index_path);
  const std::string data = testing::read_file(shard_path);
  size_t rejected = 0;
  auto attempt = [&](const std::string& index_bytes, const std::string& data_bytes) {
    testing::write_file(index_path, index_bytes);
    testing::write_file(shard_path, data_bytes);
    try {
      tf_format().read(prefix(), {.verify = true});
    } catch (const Error&) {
      ++rejected;
    }
  };
  for (size_t i = 0; i < index.size(); ++i) {
    for (int pattern : {0x01, 0x80, 0xff}) {
      std::string changed = index;
      changed[i] = static_cast<char>(changed[i] ^ pattern);
      attempt(changed, data);
    }
    attempt(index.substr(0, i), data);
  }
  for (size_t i = 0; i < data.size(); ++i) {
    std::string changed = data;
    changed[i] = static_cast<char>(changed[i] ^ 0x20);
    attempt(index, changed);
  }
  EXPECT_GT(rejected, index.size() * 3) << "most changes are caught";
}

TEST_F(TfMalformedTest, IndexHandlePastTheFile) {
  // The footer's index handle claims 2^62 bytes: refused before LevelDB reads.
  write(Bundle{});
  const auto path = tf_detail::index_path(prefix());
  std::string bytes = testing::read_file(path);
  const size_t footer = bytes.size() - tf_detail::kTableFooterSize;
  std::string handles = tfb::varint(0) + tfb::varint(0) + tfb::varint(0) + tfb::varint(uint64_t{1} << 62);
  handles.resize(40, '\0');
  bytes.replace(footer, 40, handles);
  testing::write_file(path, bytes);
  EXPECT_EQ(error_of("runs past", "model.ckpt-1.index", "").code(), ErrorCode::kCorrupt);
}

// ---- integers past their declared int32 (read as int64, never truncated) ----

TEST_F(TfMalformedTest, NumShardsPast32Bits) {
  // 2^32 + 1 truncated to int32 is 1: a bundle that looks whole.
  Bundle bundle;
  bundle.header = tfb::header({.num_shards = (int64_t{1} << 32) + 1});
  EXPECT_EQ(code(bundle, "num_shards 4294967297 does not fit", "model.ckpt-1.index", ""), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, EndiannessPast32Bits) {
  Bundle bundle;
  bundle.header = tfb::header({.endianness = int64_t{1} << 32});  // truncated: 0, LITTLE
  EXPECT_EQ(code(bundle, "endianness 4294967296 does not fit", "model.ckpt-1.index", ""), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, VersionProducerPast32Bits) {
  Bundle bundle;
  bundle.header = tfb::header({.producer = (int64_t{1} << 32) + 1});  // truncated: 1
  EXPECT_EQ(code(bundle, "version.producer 4294967297 does not fit", "model.ckpt-1.index", ""), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, DTypePast32Bits) {
  Bundle bundle;
  bundle.entry.dtype = (int64_t{1} << 32) + 1;  // truncated: 1, DT_FLOAT
  EXPECT_EQ(code(bundle, "dtype code 4294967297"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, ShardIdPast32Bits) {
  Bundle bundle;
  bundle.entry.shard = int64_t{1} << 32;  // truncated: 0
  EXPECT_EQ(code(bundle, "shard_id 4294967296 is outside"), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, SliceLengthBelowMinusOne) {
  // -1 is "the whole dimension"; -2 is nothing.
  Bundle bundle;
  bundle.entry.extra = tfb::field_bytes(
      7, tfb::field_bytes(1, tfb::field_varint(2, static_cast<uint64_t>(int64_t{-2}))) + tfb::field_bytes(1, ""));
  EXPECT_EQ(code(bundle, "length -2 is negative"), ErrorCode::kCorrupt);
}

// ---- text that is not UTF-8 ----

TEST_F(TfMalformedTest, KeyIsNotUtf8) {
  Bundle bundle;
  bundle.extra.emplace_back("layer/\xff\xfe", tfb::entry({.dtype = 1, .shape = {0}}));
  write(bundle);
  const Error error = error_of("is not valid UTF-8", "model.ckpt-1.index", "");
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_NE(std::string(error.what()).find(R"('layer/\xff\xfe')"), std::string::npos) << error.what();
}

// protobuf checks the UTF-8 of `string` fields and logs a line on stderr
// when one fails; ckpt reads them as bytes and reports the error itself.
TEST_F(TfMalformedTest, DimensionNameIsNotUtf8AndNothingIsLogged) {
  Bundle bundle;
  bundle.entry.extra.clear();
  write(bundle);
  // dtype, shape { dim { size 6 name "\xff" } }, size, crc.
  const std::string shape = tfb::field_bytes(2, tfb::field_varint(1, 6) + tfb::field_bytes(2, "\xff"));
  const std::string entry = tfb::field_varint(1, 1) + tfb::field_bytes(2, shape) + tfb::field_varint(5, 24) +
                            tfb::field_fixed32(6, tfb::masked_crc_of(kSixFloats));
  tfb::write_bundle(prefix(), {{"", tfb::header()}, {kKey, entry}}, {kSixFloats});
  ::testing::internal::CaptureStderr();
  const Error error = error_of("name is not valid UTF-8", "model.ckpt-1.index", kKey);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
}

TEST_F(TfMalformedTest, CkptTreeIsNotUtf8AndNothingIsLogged) {
  Bundle bundle;
  bundle.header = tfb::header() + tfb::field_bytes(4747, "{\"\xff\": 1}");
  write(bundle);
  ::testing::internal::CaptureStderr();
  const Error error = error_of("UTF-8", "model.ckpt-1.index", "");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
}

// ---- torn overwrites: the .index of one save beside the data of another ----

class TfTornTest : public ::testing::Test {
 protected:
  std::filesystem::path prefix() const { return dir_ / "model.ckpt"; }
  std::string index_file() const { return tf_detail::index_path(prefix()).filename().string(); }

  // Weights and a step counter (an int: with extras only; a tensor else).
  static Tree state(float value, int64_t step, int64_t length = 6, bool extras = true) {
    const std::vector<float> values(static_cast<size_t>(length), value);
    const Tensor weights = Tensor::from_values<float>(DType::kFloat32, {length}, values);
    Tree tree = Tree::map();
    tree.set("weights", weights);
    if (extras) {
      tree.set("step", step);
    } else {
      tree.set("step", Tensor::from_values<int64_t>(DType::kInt64, {}, std::vector<int64_t>{step}));
    }
    return tree;
  }

  // Saves `a`, keeps its .index, saves `b` at the same prefix, and puts the
  // kept .index back: what a kill between the renames of b's data and its
  // .index leaves.
  void splice(const Tree& a, const Tree& b, SaveOptions options_a = {.format = "tf"},
              SaveOptions options_b = {.format = "tf"}) {
    save(prefix(), a, options_a);
    const std::string index = testing::read_file(tf_detail::index_path(prefix()));
    save(prefix(), b, options_b);
    testing::write_file(tf_detail::index_path(prefix()), index);
  }

  // Opening (a plain load, no verify) fails with kCorrupt naming the shard as
  // its file and the .index in its message.
  void expect_torn(std::string_view fragment, int shard = 0, int num_shards = 1) {
    try {
      load(prefix());
      ADD_FAILURE() << "the torn pair was loaded";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
      EXPECT_EQ(error.context().path.filename(), tf_detail::shard_path(prefix(), shard, num_shards).filename())
          << error.what();
      EXPECT_NE(error.message().find(index_file()), std::string::npos) << error.what();
      EXPECT_NE(error.message().find("different saves"), std::string::npos) << error.what();
      EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
    }
  }

  testing::TempDir dir_;
};

TEST_F(TfTornTest, SameShapesOtherValues) {
  // The sizes agree; only the trailer's digest tells the saves apart.
  splice(state(1.0f, 100), state(2.0f, 200));
  expect_torn("trailer digest");
}

TEST_F(TfTornTest, OtherSizes) {
  splice(state(1.0f, 100), state(2.0f, 200, 12));
  expect_torn("bytes where");
}

TEST_F(TfTornTest, NewDataWithoutExtras) {
  // The old .index records a trailer; the new data (no extras) has none.
  splice(state(1.0f, 100, 6, false), state(2.0f, 200, 6, false), {.format = "tf"}, {.format = "tf", .extras = false});
  expect_torn("bytes where");
}

TEST_F(TfTornTest, OldIndexWithoutExtras) {
  // An .index without ckpt's record (as TensorFlow's) beside data ending with
  // ckpt's trailer after every entry's bytes.
  splice(state(1.0f, 100, 6, false), state(2.0f, 200, 6, false), {.format = "tf", .extras = false}, {.format = "tf"});
  expect_torn("records none");
}

TEST_F(TfTornTest, OneShardOfSeveralReplaced) {
  // Killed after the first of two shards was renamed.
  const SaveOptions sharded{.format = "tf", .max_shard_bytes = 8};
  Tree a = Tree::map(), b = Tree::map();
  const std::vector<float> ones(2, 1.0f);
  a.set("x", Tensor::zeros(DType::kFloat32, {2}));
  a.set("y", Tensor::zeros(DType::kFloat32, {2}));
  b.set("x", Tensor::from_values<float>(DType::kFloat32, {2}, ones));
  b.set("y", Tensor::from_values<float>(DType::kFloat32, {2}, ones));
  save(prefix(), a, sharded);
  const std::string shard1 = testing::read_file(tf_detail::shard_path(prefix(), 1, 2));
  const std::string index = testing::read_file(tf_detail::index_path(prefix()));
  save(prefix(), b, sharded);
  testing::write_file(tf_detail::shard_path(prefix(), 1, 2), shard1);
  testing::write_file(tf_detail::index_path(prefix()), index);
  expect_torn("trailer digest", 0, 2);
}

TEST_F(TfTornTest, TheSameBytesTwiceAreNoMix) {
  // Two saves of equal tensors (the step lives in the .index) hold equal
  // data: the old .index beside the new data is the old save, whole.
  splice(state(1.0f, 100), state(1.0f, 200));
  const Tree loaded = load(prefix());
  EXPECT_TRUE(loaded == state(1.0f, 100));
}

TEST_F(TfTornTest, AWholeSaveStillLoads) {
  save(prefix(), state(1.0f, 100), {.format = "tf"});
  save(prefix(), state(2.0f, 200), {.format = "tf"});
  EXPECT_TRUE(load(prefix()) == state(2.0f, 200));
  EXPECT_TRUE(verify(prefix()).tree == state(2.0f, 200));
}

TEST_F(TfMalformedTest, NoBundleAtAll) {
  try {
    tf_format().read(dir_ / "absent", {});
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound) << error.what();
  }
}

}  // namespace
}  // namespace ckpt
