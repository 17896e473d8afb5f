// Malformed torch.save files, one defect at a time: zips (truncated, offsets
// outside the file, records missing or shorter than their storages), tensor
// views outside their storages, refused globals, shared references that
// expand exponentially, cycles, legacy files. Each must be a ckpt::Error of
// the expected code whose message names the check that fired and whose
// context names the file (and the record or tensor). Every file is built by
// hand (torch_test_builder.h), never by ckpt's writer. Pickle-level defects
// are in torch_pickle_test.cc.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/torch/format.h"
#include "formats/torch_test_builder.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::f32_bytes;
using testing::Pkl;
using testing::TensorSpec;
using testing::TestZip;
using testing::torch_zip;

// The valid base: {"w": float32 [4] = 1, 2, 3, 4} in storage "0".
std::string base_pickle(const TensorSpec& spec = {}) { return testing::state_dict_pickle({{"w", spec}}); }
const std::string kFourFloats = f32_bytes({1, 2, 3, 4});
TestZip base_zip(const TensorSpec& spec = {}) { return torch_zip(base_pickle(spec), {{"0", kFourFloats}}); }

std::string text_of(const Tensor& tensor) {
  return std::string(reinterpret_cast<const char*>(tensor.bytes().data()), tensor.nbytes());
}

// A zip whose data.pkl is `pickle` and whose one storage "0" holds four floats.
std::string zip_with_pickle(const std::string& pickle) { return torch_zip(pickle, {{"0", kFourFloats}}).bytes; }

class TorchMalformedTest : public ::testing::Test {
 protected:
  std::filesystem::path write(std::string_view bytes) {
    const auto path = dir_ / "bad.pt";
    testing::write_file(path, bytes);
    return path;
  }
  // Reads `bytes` as a torch file; the error must name the file.
  Error error_of(std::string_view bytes, const LoadOptions& options = {}) {
    const auto path = write(bytes);
    try {
      torch_format().read(path, options);
    } catch (const Error& error) {
      EXPECT_EQ(error.context().path, path) << error.what();
      EXPECT_NE(std::string(error.what()).find("bad.pt"), std::string::npos) << error.what();
      return error;
    }
    ADD_FAILURE() << "the file was accepted";
    return Error(ErrorCode::kIo, "accepted");
  }
  // The error must have `code`, a message containing `fragment` (the check
  // that fired, so that an earlier check cannot mask a missing one) and,
  // when given, the entry `entry`.
  Error expect(std::string_view bytes, ErrorCode code, std::string_view fragment, std::string_view entry = {}) {
    Error error = error_of(bytes);
    EXPECT_EQ(error.code(), code) << error.what();
    EXPECT_NE(error.message().find(fragment), std::string::npos) << "wanted '" << fragment << "': " << error.what();
    if (!entry.empty()) {
      EXPECT_EQ(error.context().entry, entry) << error.what();
    }
    return error;
  }
  Error corrupt(std::string_view bytes, std::string_view fragment, std::string_view entry = {}) {
    return expect(bytes, ErrorCode::kCorrupt, fragment, entry);
  }

  testing::TempDir dir_;
};

// ---- the valid bases ----

TEST_F(TorchMalformedTest, TheValidZipBaseIsAccepted) {
  const TestZip zip = base_zip();
  const Contents contents = torch_format().read(write(zip.bytes), {});
  const Tensor& w = contents.tree.at("w").tensor();
  EXPECT_EQ(w.dtype(), DType::kFloat32);
  EXPECT_EQ(w.shape(), (Shape{4}));
  EXPECT_EQ(text_of(w), kFourFloats);
  ASSERT_EQ(contents.entries.size(), 1u);
  EXPECT_EQ(contents.entries[0].offset, zip.data_offsets[2]);  // data.pkl, byteorder, data/0
}

TEST_F(TorchMalformedTest, TheValidLegacyBaseIsAccepted) {
  const std::string object = base_pickle({.key = "k0", .legacy = true});
  const std::string file = testing::legacy_file(object, {"k0"}, {{4, kFourFloats}});
  const Contents contents = torch_format().read(write(file), {});
  EXPECT_EQ(text_of(contents.tree.at("w").tensor()), kFourFloats);
  ASSERT_EQ(contents.entries.size(), 1u);
  EXPECT_EQ(contents.entries[0].offset, file.size() - 16);
}

// ---- the zip ----

TEST_F(TorchMalformedTest, TruncatedZipAtEveryLength) {
  const std::string whole = base_zip().bytes;
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    const Error error = error_of(whole.substr(0, cut));
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << "cut at " << cut << ": " << error.what();
  }
  // Past the first bytes, what is missing is the end record.
  EXPECT_NE(error_of(whole.substr(0, whole.size() - 1)).message().find("end of central directory"), std::string::npos);
}

TEST_F(TorchMalformedTest, CentralDirectoryOffsetPastTheEnd) {
  TestZip zip = base_zip();
  testing::put_u32(zip.bytes, zip.end_offset + 16, static_cast<uint32_t>(zip.bytes.size() + 100));
  corrupt(zip.bytes, "central directory");
  zip = base_zip();
  testing::put_u32(zip.bytes, zip.end_offset + 12, 0xFFFFFFF0);  // directory size
  corrupt(zip.bytes, "central directory");
}

TEST_F(TorchMalformedTest, LocalHeaderOffsetOutsideTheFile) {
  TestZip zip = base_zip();
  testing::put_u32(zip.bytes, zip.central_offsets[2] + 42, 0x7FFFFFF0);
  corrupt(zip.bytes, "local header offset", "archive/data/0");
}

TEST_F(TorchMalformedTest, RecordSizePastTheCentralDirectory) {
  TestZip zip = base_zip();
  testing::put_u32(zip.bytes, zip.central_offsets[2] + 20, 0x00100000);  // compressed
  testing::put_u32(zip.bytes, zip.central_offsets[2] + 24, 0x00100000);  // uncompressed
  const Error error = error_of(zip.bytes);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
  EXPECT_EQ(error.context().entry, "archive/data/0") << error.what();
}

TEST_F(TorchMalformedTest, ZipWithoutRecords) {
  corrupt(testing::build_test_zip({}).bytes, "no records");
}

TEST_F(TorchMalformedTest, FirstRecordOutsideAnArchiveFolder) {
  corrupt(testing::build_test_zip({{.name = "data.pkl", .data = base_pickle()}}).bytes, "archive's folder", "data.pkl");
}

TEST_F(TorchMalformedTest, DataPklMissing) {
  const std::string bytes = testing::build_test_zip({{.name = "archive/byteorder", .data = "little"},
                                                     {.name = "archive/data/0", .data = kFourFloats}})
                                .bytes;
  corrupt(bytes, "no data.pkl", "archive/data.pkl");
}

TEST_F(TorchMalformedTest, ByteorderRecordIsGarbage) {
  corrupt(torch_zip(base_pickle(), {{"0", kFourFloats}}, "middle").bytes, "byteorder is 'middle'", "archive/byteorder");
  // A long garbage record is not copied whole into the message.
  const Error error = corrupt(torch_zip(base_pickle(), {{"0", kFourFloats}}, std::string(100000, '\xff')).bytes,
                              "byteorder", "archive/byteorder");
  EXPECT_LT(error.message().size(), 200u);
}

TEST_F(TorchMalformedTest, DeflatedRecords) {
  const std::vector<testing::TestZipEntry> entries = {
      {.name = "archive/data.pkl", .data = base_pickle(), .method = 8},
      {.name = "archive/data/0", .data = kFourFloats, .method = 8}};
  TestZip zip = testing::build_test_zip(entries);
  EXPECT_EQ(text_of(torch_format().read(write(zip.bytes), {}).tree.at("w").tensor()), kFourFloats);
  // A damaged stream (or one that inflates to other bytes) is caught.
  zip.bytes[zip.data_offsets[0] + 5] ^= 0x55;
  const Error error = corrupt(zip.bytes, "", "archive/data.pkl");
  EXPECT_TRUE(error.message().find("deflate") != std::string::npos ||
              error.message().find("CRC-32") != std::string::npos)
      << error.what();
}

TEST_F(TorchMalformedTest, VerifyFindsAFlippedStorageByte) {
  TestZip zip = base_zip();
  zip.bytes[zip.data_offsets[2] + 1] ^= 1;
  EXPECT_NO_THROW(torch_format().read(write(zip.bytes), {}));  // lazily read: not checked
  const Error error = error_of(zip.bytes, {.verify = true});
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
  EXPECT_NE(error.message().find("CRC-32 mismatch"), std::string::npos) << error.what();
  EXPECT_EQ(error.context().entry, "archive/data/0") << error.what();
}

TEST_F(TorchMalformedTest, MetadataRecordIsNotADictOfStrings) {
  auto with_metadata = [](const std::string& metadata) {
    return testing::build_test_zip({{.name = "archive/data.pkl", .data = base_pickle()},
                                    {.name = "archive/data/0", .data = kFourFloats},
                                    {.name = "archive/.data/ckpt_metadata.pkl", .data = metadata}})
        .bytes;
  };
  const std::string entry = "archive/.data/ckpt_metadata.pkl";
  corrupt(with_metadata(Pkl(2).empty_dict().str("k").integer(1).setitem().stop()), "not a string", entry);
  corrupt(with_metadata(Pkl(2).empty_list().stop()), "metadata is not a dict", entry);
  corrupt(with_metadata(Pkl(2).empty_dict()), "without a STOP", entry);
  expect(with_metadata(Pkl(2).global("os", "system").str("true").tuple1().reduce().stop()), ErrorCode::kUnsupported,
         "'os.system'", entry);
}

// ---- storages and their records ----

TEST_F(TorchMalformedTest, StorageRecordMissing) {
  corrupt(torch_zip(base_pickle(), {}).bytes, "storage record is missing", "archive/data/0");
  corrupt(torch_zip(base_pickle({.key = "1"}), {{"0", kFourFloats}}).bytes, "storage record is missing",
          "archive/data/1");
}

TEST_F(TorchMalformedTest, RecordShorterThanItsStorage) {
  corrupt(torch_zip(base_pickle(), {{"0", kFourFloats.substr(0, 12)}}).bytes,
          "record holds 12 bytes but its storage declares 16", "archive/data/0");
  corrupt(base_zip({.numel = int64_t{1} << 40}).bytes, "record holds 16 bytes but its storage declares 4398046511104",
          "archive/data/0");
}

TEST_F(TorchMalformedTest, StorageSizeOverflows) {
  // 2^62 doubles are 2^65 bytes.
  corrupt(base_zip({.storage_class = "DoubleStorage", .numel = int64_t{1} << 62}).bytes, "impossible size");
  corrupt(base_zip({.numel = -1}).bytes, "negative storage size", "archive/data.pkl");
}

// ---- tensor views ----

TEST_F(TorchMalformedTest, TensorViewReachesPastItsStorage) {
  corrupt(base_zip({.offset = 1}).bytes, "reaches past its storage", "w");
  corrupt(base_zip({.shape = {2, 2}, .stride = {3, 1}}).bytes, "reaches past its storage", "w");
  corrupt(base_zip({.shape = {5}, .stride = {1}}).bytes, "reaches past its storage", "w");
  corrupt(base_zip({.offset = int64_t{1} << 62}).bytes, "reaches past its storage", "w");
  // A view past a storage that its record does hold is still refused: the
  // storage is what it declares (4 elements), not the whole record.
  corrupt(torch_zip(base_pickle({.offset = 2}), {{"0", kFourFloats + kFourFloats}}).bytes, "reaches past", "w");
}

TEST_F(TorchMalformedTest, TensorViewExtentOverflows) {
  corrupt(base_zip({.shape = {4}, .stride = {INT64_MAX}}).bytes, "extent overflows", "w");
}

TEST_F(TorchMalformedTest, HugeShapeOnAZeroStride) {
  // Elements (2^62)^2 overflow 64 bits: a corrupt file, not a caller's error.
  const Error error = error_of(base_zip({.shape = {int64_t{1} << 62, int64_t{1} << 62}, .stride = {0, 0}}).bytes);
  EXPECT_EQ(error.context().entry, "w") << error.what();
  EXPECT_NE(error.message().find("overflows 64 bits"), std::string::npos) << error.what();
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
}

TEST_F(TorchMalformedTest, NegativeSizeOrStride) {
  corrupt(base_zip({.shape = {-1}, .stride = {1}}).bytes, "negative tensor size or stride", "archive/data.pkl");
  corrupt(base_zip({.shape = {2}, .stride = {-1}}).bytes, "negative tensor size or stride", "archive/data.pkl");
  corrupt(base_zip({.offset = -1}).bytes, "negative storage offset", "archive/data.pkl");
}

TEST_F(TorchMalformedTest, SizeAndStrideLengthsDiffer) {
  corrupt(base_zip({.shape = {2, 2}, .stride = {1}}).bytes, "different lengths", "archive/data.pkl");
  corrupt(base_zip({.shape = {}, .stride = {1}}).bytes, "different lengths", "archive/data.pkl");
}

TEST_F(TorchMalformedTest, PersistentIdIsNotAStorage) {
  auto pid_pickle = [](const Pkl& pid) -> std::string {
    return Pkl(2).global("torch._utils", "_rebuild_tensor_v2").mark().raw(pid.bytes()).binpersid()
        .integer(0).int_tuple({4}).int_tuple({1}).boolean(false)
        .global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce().stop();
  };
  const std::string fragment = "persistent id is not a 5-tuple ('storage', ...)";
  corrupt(zip_with_pickle(pid_pickle(Pkl().mark().str("blob").global("torch", "FloatStorage").str("0").str("cpu")
                                         .integer(4).tuple())), fragment, "archive/data.pkl");
  corrupt(zip_with_pickle(pid_pickle(Pkl().mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu")
                                         .tuple())), fragment, "archive/data.pkl");
  corrupt(zip_with_pickle(pid_pickle(Pkl().str("0"))), fragment, "archive/data.pkl");
  corrupt(zip_with_pickle(pid_pickle(Pkl().mark().str("storage").global("torch", "FloatStorage").integer(0).str("cpu")
                                         .integer(4).tuple())), "storage key is not a string", "archive/data.pkl");
}

TEST_F(TorchMalformedTest, StorageClassIsNotAStorage) {
  corrupt(base_zip({.storage_class = "Size"}).bytes, "names no storage class", "archive/data.pkl");
  // A storage class outside the allowlist is refused when GLOBAL names it.
  expect(base_zip({.storage_class = "EvilStorage"}).bytes, ErrorCode::kUnsupported, "'torch.EvilStorage'",
         "archive/data.pkl");
}

TEST_F(TorchMalformedTest, StorageUsedWithTwoTypes) {
  const std::string pickle = testing::state_dict_pickle(
      {{"a", {}}, {"b", {.storage_class = "IntStorage"}}});
  corrupt(zip_with_pickle(pickle), "used with two types", "archive/data.pkl");
}

TEST_F(TorchMalformedTest, RebuildOfSomethingThatIsNotAStorage) {
  const std::string pickle = Pkl(2).global("torch._utils", "_rebuild_tensor_v2").mark().integer(7).integer(0)
                                 .int_tuple({4}).int_tuple({1}).boolean(false).none().tuple().reduce().stop();
  corrupt(zip_with_pickle(pickle), "first argument is not a storage", "archive/data.pkl");
}

TEST_F(TorchMalformedTest, BareStorageIsNotData) {
  Pkl pickle(2);
  pickle.empty_dict().str("s");
  testing::storage_pid(pickle, {});
  expect(zip_with_pickle(pickle.setitem().stop()), ErrorCode::kUnsupported, "bare storage", "s");
}

TEST_F(TorchMalformedTest, QuantizedTensorIsUnsupported) {
  const std::string pickle = Pkl(2).global("torch._utils", "_rebuild_qtensor").empty_tuple().reduce().stop();
  const Error error = expect(zip_with_pickle(pickle), ErrorCode::kUnsupported, "quantized tensors are not supported",
                             "archive/data.pkl");
  EXPECT_NE(error.message().find("torch._utils._rebuild_qtensor"), std::string::npos) << error.what();
  expect(base_zip({.storage_class = "QUInt8Storage"}).bytes, ErrorCode::kUnsupported, "quantized storages",
         "archive/data.pkl");
}

// ---- the pickle, through the file ----

TEST_F(TorchMalformedTest, PickleErrorsNameTheRecordAndTheFileOffset) {
  const TestZip zip = torch_zip(std::string("\x80\x02\xff.", 4), {});
  const Error error = corrupt(zip.bytes, "unknown pickle opcode 0xff", "archive/data.pkl");
  EXPECT_EQ(error.context().offset, zip.data_offsets[0] + 2) << error.what();
}

TEST_F(TorchMalformedTest, ForbiddenGlobalInDataPkl) {
  const std::string pickle = Pkl(2).global("mymodule", "MyModel").empty_tuple().reduce().stop();
  const Error error = expect(zip_with_pickle(pickle), ErrorCode::kUnsupported, "'mymodule.MyModel'",
                             "archive/data.pkl");
  EXPECT_EQ(error.context().offset, torch_zip(pickle, {{"0", kFourFloats}}).data_offsets[0] + 2) << error.what();
}

TEST_F(TorchMalformedTest, GlobalWithControlBytesIsQuoted) {
  // A NUL, an escape sequence and a byte that is no UTF-8 in the module name:
  // escaped in one printable line, not cut at the NUL.
  const std::string module("my\0mod\x1b[2J\xff", 11);
  const std::string pickle = Pkl(2).global(module, "Cls").empty_tuple().reduce().stop();
  const Error error = expect(zip_with_pickle(pickle), ErrorCode::kUnsupported, R"('my\x00mod\x1b[2J\xff.Cls')",
                             "archive/data.pkl");
  for (const char c : std::string(error.what())) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << error.what();
}

TEST_F(TorchMalformedTest, KeyWithALoneSurrogateIsRefused) {
  // Python pickles such a str (surrogatepass); no name may hold one.
  const std::string pickle = testing::state_dict_pickle({{"w\xed\xa0\x80", {}}});
  const Error error = corrupt(torch_zip(pickle, {{"0", kFourFloats}}).bytes, "is not valid UTF-8");
  EXPECT_NE(std::string(error.what()).find(R"('w\xed\xa0\x80')"), std::string::npos) << error.what();
}

TEST_F(TorchMalformedTest, SharedReferencesThatExpandExponentially) {
  // L0 = []; L(i) = [L(i-1), L(i-1)] through the memo, 64 levels: 2^64
  // values in a 500-byte pickle. Must fail fast, not hang or allocate.
  Pkl p(2);
  p.empty_dict().str("x").empty_list();
  for (int level = 0; level < 64; ++level) p.binput(0).pop().empty_list().mark().binget(0).binget(0).appends();
  corrupt(zip_with_pickle(p.setitem().stop()), "expand to more values than the file can hold");
  // The same with a tensor at the bottom: no tensor is made per reference.
  Pkl t(2);
  t.empty_dict().str("x");
  testing::tensor_value(t, {});
  for (int level = 0; level < 64; ++level) t.binput(0).pop().empty_list().mark().binget(0).binget(0).appends();
  corrupt(zip_with_pickle(t.setitem().stop()), "expand");
}

// A 60,000-character str, memoized, then 30,000 BINGETs of it: 120 KB of
// pickle that spells out 1.8 GB of text. The tree would share the str, but
// every reference is charged its length: refused, naming the file (checked
// by error_of) and the position reached, not 1.8 GB of copies.
std::string memo_bomb() {
  Pkl p(2);
  p.empty_list().mark().str(std::string(60000, 'x')).binput(1);
  for (int i = 0; i < 30000; ++i) p.binget(1);
  return p.appends().stop();
}

TEST_F(TorchMalformedTest, MemoizedStringReferencedTooOften) {
  const Error error = corrupt(zip_with_pickle(memo_bomb()), "expand to more values than the file can hold");
  EXPECT_FALSE(error.context().entry.empty()) << error.what();
  // The same as a legacy file's object.
  const Error legacy = corrupt(testing::legacy_file(memo_bomb(), {}, {}), "expand to more values than the file can hold");
  EXPECT_FALSE(legacy.context().entry.empty()) << legacy.what();
  // A memoized dict with a long key, referenced 30,000 times: its keys are
  // copied with it, and charged likewise.
  Pkl dict(2);
  dict.empty_list().mark().empty_dict().str(std::string(60000, 'k')).none().setitem().binput(1);
  for (int i = 0; i < 30000; ++i) dict.binget(1);
  corrupt(zip_with_pickle(dict.appends().stop()), "expand to more values than the file can hold");
}

TEST_F(TorchMalformedTest, ContainerThatContainsItself) {
  // a = []; a.append(a): must fail by the depth limit, not overflow the stack.
  const std::string list = Pkl(2).empty_list().binput(0).binget(0).append().stop();
  corrupt(zip_with_pickle(list), "nested deeper than 512 levels (or a cycle)");
  // d = {}; d["k"] = d
  const std::string dict = Pkl(2).empty_dict().binput(0).str("k").binget(0).setitem().stop();
  corrupt(zip_with_pickle(dict), "nested deeper than 512 levels (or a cycle)");
}

TEST_F(TorchMalformedTest, NestingDeeperThanTheLimit) {
  // 100,000 lists, each inside the previous: no recursion in the unpickler,
  // the depth limit in the tree builder.
  constexpr int kDepth = 100000;
  std::string body(kDepth, ']');
  body.append(kDepth - 1, 'a');
  corrupt(zip_with_pickle(Pkl(2).raw(body).stop()), "nested deeper than 512 levels");
}

// ---- legacy files ----

std::string legacy_object(const TensorSpec& spec = {.key = "k0", .legacy = true}) { return base_pickle(spec); }

TEST_F(TorchMalformedTest, LegacyWrongMagic) {
  std::string file = testing::legacy_file(legacy_object(), {"k0"}, {{4, kFourFloats}});
  file[13] ^= 1;  // no longer the legacy magic: not a zip either
  corrupt(file, "not a zip archive");
  // The 14 magic bytes, then a different number as the pickle's value.
  std::string other = testing::legacy_magic_pickle();
  other.pop_back();  // STOP
  other += Pkl().pop().long1({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}).stop().bytes();
  const Error error = corrupt(other, "wrong magic number");
  EXPECT_EQ(error.context().offset, 0u);
}

TEST_F(TorchMalformedTest, LegacyProtocolVersionIsNot1001) {
  expect(testing::legacy_file(legacy_object(), {"k0"}, {{4, kFourFloats}}, 1000), ErrorCode::kUnsupported, "1001");
}

TEST_F(TorchMalformedTest, LegacyStorageDataTruncated) {
  const std::string file = testing::legacy_file(legacy_object(), {"k0"}, {{4, kFourFloats}});
  for (size_t missing : {1, 4, 15}) {
    corrupt(file.substr(0, file.size() - missing), "runs past the end of the file");
  }
  corrupt(file.substr(0, file.size() - 16 - 3), "file ends before storage 'k0'");
  // Cut inside the object pickle: named as the object.
  const size_t object_at = testing::legacy_head().size();
  corrupt(file.substr(0, object_at + 20), "", "object");
}

TEST_F(TorchMalformedTest, LegacyStorageElementCountMismatch) {
  corrupt(testing::legacy_file(legacy_object(), {"k0"}, {{3, kFourFloats.substr(0, 12)}}),
          "holds 3 elements where 4 are declared");
  corrupt(testing::legacy_file(legacy_object(), {"k0"}, {{UINT64_MAX, kFourFloats}}), "elements where 4 are declared");
}

TEST_F(TorchMalformedTest, LegacyStorageKeysDisagreeWithThePickle) {
  corrupt(testing::legacy_file(legacy_object(), {"k0", "zz"}, {{4, kFourFloats}, {4, kFourFloats}}),
          "'zz' is listed but never used");
  corrupt(testing::legacy_file(legacy_object(), {}, {}), "storage 'k0' has no data", "w");
  corrupt(testing::legacy_head() + legacy_object() + Pkl(2).empty_dict().stop().bytes(),
          "storage key list is not a list");
}

TEST_F(TorchMalformedTest, LegacyStorageViewOutsideItsStorage) {
  Pkl p(2);
  p.empty_dict().str("w").global("torch._utils", "_rebuild_tensor_v2").mark();
  p.mark().str("storage").global("torch", "FloatStorage").str("k0").str("cpu").integer(4);
  p.str("k0").integer(3).integer(2).tuple3();  // view of elements [3, 5) of 4
  p.tuple().binpersid().integer(0).int_tuple({2}).int_tuple({1}).boolean(false).none().tuple().reduce().setitem().stop();
  corrupt(testing::legacy_file(p, {"k0"}, {{4, kFourFloats}}), "legacy storage view lies outside its storage",
          "object");
}

TEST_F(TorchMalformedTest, LegacyPersistentIdWithoutItsSixthField) {
  corrupt(testing::legacy_file(base_pickle({.key = "k0"}), {"k0"}, {{4, kFourFloats}}),
          "persistent id is not a 6-tuple", "object");
}

// ---- a malicious pickle's side effect does not happen ----

class TorchSideEffectTest : public TorchMalformedTest {
 protected:
  // Writes `pickle` as data.pkl of x.pt (and, when `legacy`, as the object
  // of a legacy file) and opens it through the front door: the error must
  // be kUnsupported naming `global`, and the directory must hold only x.pt.
  void expect_refused(const std::string& pickle, std::string_view global) {
    const auto path = dir_ / "x.pt";
    testing::write_file(path, zip_with_pickle(pickle));
    for (int round = 0; round < 2; ++round) {
      try {
        ckpt::open(path);
        ADD_FAILURE() << "the file was accepted";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
        EXPECT_NE(error.message().find("'" + std::string(global) + "'"), std::string::npos) << error.what();
        EXPECT_EQ(error.context().path, path) << error.what();
      }
      EXPECT_FALSE(std::filesystem::exists(pwned())) << "the pickle's command ran";
      EXPECT_EQ(dir_.list(), std::vector<std::string>{"x.pt"});
      testing::write_file(path, testing::legacy_file(pickle, {}, {}));  // round 2: a legacy file
    }
  }
  std::filesystem::path pwned() const { return dir_ / "PWNED"; }
  std::string touch() const { return "touch " + pwned().string(); }
};

TEST_F(TorchSideEffectTest, OsSystemIsNeverCalled) {
  // The textbook exploit: GLOBAL os system, REDUCE ("touch .../PWNED",).
  expect_refused(Pkl(2).global("os", "system").str(touch()).tuple1().reduce().stop(), "os.system");
  // Its sanity check: the same command does create the file when run.
  ASSERT_EQ(std::system(touch().c_str()), 0);
  EXPECT_TRUE(std::filesystem::exists(pwned()));
  std::filesystem::remove(pwned());
}

TEST_F(TorchSideEffectTest, EveryWayToNameACallable) {
  expect_refused(Pkl(4).stack_global("posix", "system").str(touch()).tuple1().reduce().stop(), "posix.system");
  // INST and OBJ call without REDUCE.
  expect_refused(Pkl(0).mark().str(touch()).raw("ios\nsystem\n").stop(), "os.system");
  expect_refused(Pkl(1).mark().global("subprocess", "check_call").mark().str("touch").str(pwned().string()).op('l')
                     .raw("o").stop(),
                 "subprocess.check_call");
  expect_refused(Pkl(2).global("builtins", "exec").str("open('" + pwned().string() + "', 'w')").tuple1().reduce()
                     .stop(),
                 "builtins.exec");
  expect_refused(Pkl(2).global("__builtin__", "getattr").stop(), "__builtin__.getattr");
  // Hidden inside an otherwise valid state dict, before a tensor.
  Pkl nested(2);
  nested.empty_dict().mark().str("evil").global("os", "system").str(touch()).tuple1().reduce().str("w");
  testing::tensor_value(nested, {});
  nested.setitems();
  expect_refused(nested.stop(), "os.system");
}

}  // namespace
}  // namespace ckpt
