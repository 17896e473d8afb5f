#include "formats/safetensors/format.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "core/checksum.h"
#include "formats/safetensors/layout.h"
#include "formats/safetensors_test_helpers.h"
#include "io/atomic_file.h"
#include "support/safetensors_bytes.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using namespace safetensors_test;
using testing::TempDir;
using testing::header_of;
using testing::le64;

// ---- golden bytes from tensor.rs's unit tests ----

TEST(SafetensorsGoldenTest, ReferenceSerializationVector) {
  // tensor.rs test_serialization: "attn.0", F32, [1, 2, 3], values 0..5.
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("attn.0", tensor_of<float>(DType::kFloat32, {1, 2, 3}, {0, 1, 2, 3, 4, 5}));
  save(dir / "a.safetensors", tree, kPlain);
  const std::vector<uint8_t> expected = {
      64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100,
      116, 121, 112, 101, 34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34,
      58, 91, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97, 116, 97, 95, 111, 102, 102, 115,
      101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0, 0, 0, 0, 0, 128, 63,
      0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64};
  EXPECT_EQ(read_bytes(dir / "a.safetensors"), std::string(expected.begin(), expected.end()));
}

TEST(SafetensorsGoldenTest, ReferenceForcedAlignmentVector) {
  // tensor.rs test_serialization_forced_alignement: "attn0", F32, [1, 1, 2, 3]:
  // the header is padded with 7 spaces to N = 72.
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("attn0", tensor_of<float>(DType::kFloat32, {1, 1, 2, 3}, {0, 1, 2, 3, 4, 5}));
  save(dir / "a.safetensors", tree, kPlain);
  const std::string expected = le64(72) +
                               R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                               std::string(7, ' ') + f32_bytes({0, 1, 2, 3, 4, 5});
  EXPECT_EQ(read_bytes(dir / "a.safetensors"), expected);
}

TEST(SafetensorsGoldenTest, CkptFilesStartTheirDataBuffer64Aligned) {
  // With extras the header is padded with spaces until the data buffer starts
  // at a multiple of 64 in the file; without them, at the reference's 8.
  TempDir dir;
  for (size_t name_length = 1; name_length <= 80; ++name_length) {
    Tree tree = Tree::map();
    tree.set(std::string(name_length, 'w'), tensor_of<float>(DType::kFloat32, {3}, {1, 2, 3}));
    tree.set("b", tensor_of<float>(DType::kFloat32, {2}, {4, 5}));
    for (const bool extras : {true, false}) {
      const std::filesystem::path path = dir / (extras ? "ckpt.safetensors" : "plain.safetensors");
      save(path, tree, extras ? kWithExtras : kPlain);
      const std::string file = read_bytes(path);
      uint64_t length = 0;
      std::memcpy(&length, file.data(), 8);
      const size_t alignment = extras ? 64 : 8;
      SCOPED_TRACE(::testing::Message() << "name length " << name_length << (extras ? ", extras" : ", plain"));
      EXPECT_EQ((8 + length) % alignment, 0u);
      // Only spaces pad it, fewer than the alignment.
      const size_t json = header_of(file).size();
      EXPECT_LT(length - json, alignment);
      EXPECT_EQ(file.substr(8 + json, length - json), std::string(length - json, ' '));
      // The data buffer holds the tensors back to back from there, by name.
      EXPECT_EQ(file.substr(8 + length), f32_bytes({4, 5}) + f32_bytes({1, 2, 3}));
      const Tree back = open(path, {.lazy = false}).tree;
      EXPECT_TRUE(back.at("b").tensor().equals(tree.at("b").tensor()));
      EXPECT_TRUE(back.at(std::string(name_length, 'w')).tensor().equals(tree.at(std::string(name_length, 'w')).tensor()));
    }
  }
}

TEST(SafetensorsGoldenTest, ReferenceEmptyVectors) {
  // tensor.rs test_empty: no tensors, without and with {"framework": "pt"}.
  TempDir dir;
  save(dir / "empty.safetensors", Tree::map(), kPlain);
  EXPECT_EQ(read_bytes(dir / "empty.safetensors"), le64(8) + "{}      ");
  SaveOptions with_metadata = kPlain;
  with_metadata.metadata = {{"framework", "pt"}};
  save(dir / "meta.safetensors", Tree::map(), with_metadata);
  EXPECT_EQ(read_bytes(dir / "meta.safetensors"), le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(SafetensorsGoldenTest, OrdersByDtypeRankDescendingThenName) {
  // prepare(): Dtype's declaration order (BOOL < U8 < I8 < F8_E5M2 < F8_E4M3 <
  // I16 < U16 < F16 < BF16 < I32 < U32 < F32 < C64 < F64 < I64 < U64),
  // descending; ties by name, bytewise ("Z" < "a" < "é").
  TempDir dir;
  Tree tree = Tree::map();
  const DType order_in_tree[] = {DType::kBool,    DType::kUInt8,   DType::kInt8,     DType::kFloat8E5M2,
                                 DType::kFloat8E4M3FN, DType::kInt16, DType::kUInt16,  DType::kFloat16,
                                 DType::kBFloat16, DType::kInt32,  DType::kUInt32,   DType::kFloat32,
                                 DType::kComplex64, DType::kFloat64, DType::kInt64,   DType::kUInt64};
  for (DType dtype : order_in_tree) tree.set("t_" + std::string(dtype_info(dtype).safetensors), patterned(dtype, {1}));
  tree.set("\xc3\xa9", patterned(DType::kFloat32, {2}));
  tree.set("a", patterned(DType::kFloat32, {1}));
  tree.set("Z", patterned(DType::kFloat32, {1}));
  save(dir / "a.safetensors", tree, kPlain);
  auto entry = [](std::string_view name, std::string_view code, int count, uint64_t begin, uint64_t size) {
    return "\"" + std::string(name) + R"(":{"dtype":")" + std::string(code) + R"(","shape":[)" +
           std::to_string(count) + R"(],"data_offsets":[)" + std::to_string(begin) + "," +
           std::to_string(begin + size) + "]}";
  };
  std::string expected = "{";
  uint64_t at = 0;
  auto add = [&](std::string_view name, std::string_view code, int count, uint64_t size) {
    if (expected.size() > 1) expected += ",";
    expected += entry(name, code, count, at, size);
    at += size;
  };
  add("t_U64", "U64", 1, 8);
  add("t_I64", "I64", 1, 8);
  add("t_F64", "F64", 1, 8);
  add("t_C64", "C64", 1, 8);
  add("Z", "F32", 1, 4);
  add("a", "F32", 1, 4);
  add("t_F32", "F32", 1, 4);
  add("\xc3\xa9", "F32", 2, 8);
  add("t_U32", "U32", 1, 4);
  add("t_I32", "I32", 1, 4);
  add("t_BF16", "BF16", 1, 2);
  add("t_F16", "F16", 1, 2);
  add("t_U16", "U16", 1, 2);
  add("t_I16", "I16", 1, 2);
  add("t_F8_E4M3", "F8_E4M3", 1, 1);
  add("t_F8_E5M2", "F8_E5M2", 1, 1);
  add("t_I8", "I8", 1, 1);
  add("t_U8", "U8", 1, 1);
  add("t_BOOL", "BOOL", 1, 1);
  expected += "}";
  const std::string file = read_bytes(dir / "a.safetensors");
  EXPECT_EQ(header_of(file), expected);
  uint64_t length = 0;
  std::memcpy(&length, file.data(), 8);
  EXPECT_EQ(length % 8, 0u);
  EXPECT_EQ(file.size(), 8 + length + at);
  // The data of each tensor is its bytes, in that order.
  const std::string_view data = std::string_view(file).substr(8 + length);
  const Tensor& first = tree.at("t_U64").tensor();
  EXPECT_EQ(data.substr(0, 8), std::string_view(reinterpret_cast<const char*>(first.bytes().data()), 8));
  const Tensor& last = tree.at("t_BOOL").tensor();
  EXPECT_EQ(data.back(), static_cast<char>(last.bytes()[0]));
}

TEST(SafetensorsGoldenTest, EscapesNamesAndMetadataAsSerdeJson) {
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("q\"\\\n\x01/\xe2\x82\xac", patterned(DType::kUInt8, {0}));
  SaveOptions options = kPlain;
  options.metadata = {{"k\t", "v\x1f"}};
  save(dir / "a.safetensors", tree, options);
  EXPECT_EQ(header_of(read_bytes(dir / "a.safetensors")),
            R"({"__metadata__":{"k\t":"v\u001f"},"q\"\\\n\u0001/)"
            "\xe2\x82\xac"
            R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})");
}

// ---- reading the reference's test vectors ----

Contents open_bytes(const TempDir& dir, std::string_view bytes, const LoadOptions& options = {}) {
  const auto path = dir / "in.safetensors";
  write_bytes(path, bytes);
  return safetensors_format().read(path, options);
}

TEST(SafetensorsReadTest, ReferenceDeserializationVector) {
  TempDir dir;
  const Contents contents = open_bytes(
      dir, le64(60) + R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})" + std::string(16, '\0'));
  ASSERT_EQ(contents.entries.size(), 1u);
  EXPECT_EQ(contents.entries[0].name, "test");
  EXPECT_EQ(contents.entries[0].dtype, DType::kInt32);
  EXPECT_EQ(contents.entries[0].shape, (Shape{2, 2}));
  EXPECT_EQ(contents.entries[0].offset, 68u);
  EXPECT_EQ(contents.entries[0].nbytes, 16u);
  EXPECT_TRUE(contents.tree.at("test").tensor().equals(Tensor::zeros(DType::kInt32, {2, 2})));
  EXPECT_EQ(contents.format, "safetensors");
  EXPECT_EQ(contents.format_version, 0);
  EXPECT_EQ(contents.checksum, ChecksumKind::kNone);
}

TEST(SafetensorsReadTest, ReferenceEmptyShapeAndZeroSizeVectors) {
  TempDir dir;
  // test_empty_shapes_allowed: shape [] is one element.
  Contents scalar =
      open_bytes(dir, le64(56) + R"({"test":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})" + std::string(4, '\0'));
  EXPECT_EQ(scalar.tree.at("test").tensor().shape(), Shape{});
  EXPECT_EQ(scalar.tree.at("test").tensor().nbytes(), 4u);
  // test_zero_sized_tensor: shape [2, 0], offsets [0, 0], no data.
  Contents empty = open_bytes(dir, le64(60) + R"({"test":{"dtype":"I32","shape":[2,0],"data_offsets":[0, 0]}})");
  EXPECT_EQ(empty.tree.at("test").tensor().shape(), (Shape{2, 0}));
  EXPECT_EQ(empty.tree.at("test").tensor().nbytes(), 0u);
}

TEST(SafetensorsReadTest, ReferenceWhitespacePaddedHeaders) {
  TempDir dir;
  // test_whitespace_padded_header and test_whitespace_leading_padded_header.
  EXPECT_EQ(open_bytes(dir, le64(6) + "{}\r \t\n").tree.size(), 0u);
  EXPECT_EQ(open_bytes(dir, le64(6) + "\t\n{}\r ").tree.size(), 0u);
  const std::string leading = le64(6) + "\t\n{}\r ";
  EXPECT_TRUE(safetensors_format().detect(std::as_bytes(std::span(leading)), leading.size()));
}

TEST(SafetensorsReadTest, TensorsViewTheMappedFileInFileOrder) {
  TempDir dir;
  // Header order differs from offset order; the tree follows the offsets.
  const std::string header =
      R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]},"__metadata__":{"x":"y"},"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"z":{"dtype":"F16","shape":[0],"data_offsets":[5,5],"extra":[1,{"ignored":true}]}})";
  const Contents contents = open_bytes(dir, le64(header.size()) + header + "ABCDE");
  ASSERT_EQ(contents.tree.size(), 3u);
  EXPECT_EQ(contents.tree.entries()[0].key, Key(std::string("a")));
  EXPECT_EQ(contents.tree.entries()[1].key, Key(std::string("b")));
  EXPECT_EQ(contents.tree.entries()[2].key, Key(std::string("z")));
  EXPECT_EQ(contents.metadata, (Metadata{{"x", "y"}}));
  const Tensor& b = contents.tree.at("b").tensor();
  EXPECT_EQ(b.buffer().kind(), StorageKind::kMapped);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.bytes().data()), 2), "DE");
  EXPECT_EQ(contents.entries[1].offset, 8 + header.size() + 3);
}

TEST(SafetensorsReadTest, RefusesDtypesCkptLacksAsUnsupported) {
  TempDir dir;
  // The 6-bit microscaling types have no ckpt dtype (F4, F8_E8M0 and the
  // fnuz float8s have: new_dtypes_test.cc).
  for (const char* code : {"F6_E2M3", "F6_E3M2"}) {
    const std::string shape = "[4]";
    const std::string end = "3";
    const std::string header = std::string(R"({"w":{"dtype":")") + code + R"(","shape":)" + shape +
                               R"(,"data_offsets":[0,)" + end + "]}}";
    try {
      open_bytes(dir, le64(header.size()) + header + std::string(std::stoul(end), '\x01'));
      ADD_FAILURE() << code << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << code << ": " << error.what();
      EXPECT_EQ(error.context().entry, "w");
    }
  }
}

TEST(SafetensorsFormatTest, DetectsTheHeaderShape) {
  auto detect = [](std::string_view bytes, std::optional<uint64_t> size = std::nullopt) {
    return safetensors_format().detect(std::as_bytes(std::span(bytes)), size.value_or(bytes.size()));
  };
  EXPECT_TRUE(detect(le64(8) + "{}      "));
  EXPECT_TRUE(detect(le64(4) + "  {}"));
  EXPECT_FALSE(detect(le64(8) + "[]      "));
  EXPECT_FALSE(detect(le64(9) + "{}      "));                  // N past the end
  EXPECT_FALSE(detect(le64(100'000'001) + "{}", 200'000'000));  // over the cap
  EXPECT_FALSE(detect("\x93NUMPY\x01\x00v\x00{'descr'"));
  EXPECT_FALSE(detect("PK\x03\x04"));
  EXPECT_FALSE(detect(""));
  EXPECT_FALSE(detect(le64(0)));
  // Only the head is given for large files; the size decides the bound.
  EXPECT_TRUE(detect(le64(5000) + "{", 5008));
}

TEST(SafetensorsFormatTest, DescribesItself) {
  const Format& format = safetensors_format();
  EXPECT_EQ(format.id(), "safetensors");
  EXPECT_EQ(format.extensions(), std::vector<std::string_view>{".safetensors"});
  const FormatCapabilities caps = format.capabilities();
  EXPECT_TRUE(caps.read && caps.write && caps.nested_tree && caps.checksums);
  EXPECT_FALSE(caps.single_tensor);
  EXPECT_EQ(format.dtypes().size(), all_dtypes().size());
}

// ---- round trips ----

Tree saved_and_loaded(const TempDir& dir, const Tree& tree, const SaveOptions& options,
                      const std::string& name = "rt.safetensors") {
  save(dir / name, tree, options);
  return load(dir / name);
}

TEST(SafetensorsRoundTripTest, EveryDtypeBitExact) {
  TempDir dir;
  for (const SaveOptions& options : {kPlain, kWithExtras}) {
    Tree tree = Tree::map();
    for (const DTypeInfo& info : all_dtypes()) {
      if (info.dtype == DType::kComplex128 && !options.extras) continue;
      tree.set(std::string(info.name), patterned(info.dtype, {2, 3}, static_cast<int>(info.dtype)));
    }
    const Tree back = saved_and_loaded(dir, tree, options);
    ASSERT_EQ(back.size(), tree.size());
    for (const TreeEntry& entry : tree.entries()) {
      const std::string name = key_to_string(entry.key);
      EXPECT_TRUE(back.at(name).tensor().equals(entry.value.tensor())) << name << " extras=" << options.extras;
    }
    if (options.extras) {
      EXPECT_TRUE(back == tree);
    }
  }
}

TEST(SafetensorsRoundTripTest, ScalarEmptyAndZeroSizeTensors) {
  TempDir dir;
  for (const SaveOptions& options : {kPlain, kWithExtras}) {
    Tree tree = Tree::map();
    for (const DTypeInfo& info : all_dtypes()) {
      if (info.dtype == DType::kComplex128 && !options.extras) continue;
      const std::string name(info.name);
      // float4_e2m1fn_x2 needs a last dimension (new_dtypes_test.cc).
      if (info.dtype != DType::kFloat4E2M1FNx2) tree.set(name + ".scalar", patterned(info.dtype, {}));
      tree.set(name + ".empty", patterned(info.dtype, {0}));
      tree.set(name + ".zero_dim", patterned(info.dtype, {3, 0, 2}));
    }
    const Tree back = saved_and_loaded(dir, tree, options);
    for (const TreeEntry& entry : tree.entries()) {
      const std::string name = key_to_string(entry.key);
      const Tensor& tensor = back.at(name).tensor();
      EXPECT_TRUE(tensor.equals(entry.value.tensor())) << name;
      EXPECT_EQ(tensor.shape(), entry.value.tensor().shape()) << name;
    }
  }
}

TEST(SafetensorsRoundTripTest, UnicodeAndDottedNamesStayFlat) {
  TempDir dir;
  Tree tree = Tree::map();
  const char* names[] = {"encoder.layers.0.weight", "日本語.重み", "a..b", ".lead", "trail.", "", "emoji 🙂", "__meta"};
  int seed = 0;
  for (const char* name : names) tree.set(std::string(name), patterned(DType::kFloat32, {2}, ++seed));
  for (const SaveOptions& options : {kPlain, kWithExtras}) {
    const Tree back = saved_and_loaded(dir, tree, options);
    ASSERT_EQ(back.size(), tree.size());
    for (const char* name : names) {
      const Tree* leaf = back.find(std::string(name));
      ASSERT_NE(leaf, nullptr) << name;
      EXPECT_TRUE(leaf->tensor().equals(tree.find(std::string(name))->tensor())) << name;
    }
    if (options.extras) {
      EXPECT_TRUE(back == tree);
    }
  }
}


TEST(SafetensorsRoundTripTest, NestedTreeWithEveryLeafKindAndIntegerKeys) {
  TempDir dir;
  const Tree tree = nested_state();
  save(dir / "n.safetensors", tree, kWithExtras);
  const Contents contents = open(dir / "n.safetensors");
  EXPECT_TRUE(contents.tree == tree);
  EXPECT_EQ(contents.format_version, 1);
  EXPECT_TRUE(contents.metadata.empty());
  EXPECT_EQ(contents.tree.at("optimizer.state").entries()[0].key, Key(int64_t{0}));
  EXPECT_TRUE(contents.tree.at("model.layers").is_list());
  // The file holds the tensor leaves under their unique dotted names.
  std::vector<std::string> stored;
  for (const EntryInfo& entry : contents.entries) stored.push_back(entry.name);
  std::vector<std::string> expected;
  for (const Tree::Leaf& leaf : tree.tensor_leaves()) expected.push_back(leaf.name);
  std::sort(stored.begin(), stored.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(stored, expected);
}

TEST(SafetensorsRoundTripTest, CollidingNamesKeepBothLeaves) {
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("a.b", patterned(DType::kFloat32, {1}, 1));
  tree.set("a", Tree::map()).set("b", patterned(DType::kFloat32, {1}, 2));
  const Tree back = saved_and_loaded(dir, tree, kWithExtras);
  EXPECT_TRUE(back == tree);
  EXPECT_TRUE(back.find("a.b")->tensor().equals(tree.find("a.b")->tensor()));
  EXPECT_TRUE(back.find("a")->find("b")->tensor().equals(patterned(DType::kFloat32, {1}, 2)));
  try {
    save(dir / "plain.safetensors", tree, kPlain);
    FAIL() << "collision accepted without extras";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
  }
}

TEST(SafetensorsRoundTripTest, TenThousandTensors) {
  TempDir dir;
  Tree tree = Tree::map();
  for (int i = 0; i < 10'000; ++i) {
    tree.set("layers." + std::to_string(i) + ".weight", patterned(i % 3 ? DType::kFloat32 : DType::kFloat16, {4}, i));
  }
  for (const SaveOptions& options : {kPlain, kWithExtras}) {
    save(dir / "big.safetensors", tree, options);
    const Contents contents = open(dir / "big.safetensors", {.verify = true});
    ASSERT_EQ(contents.entries.size(), 10'000u);
    if (options.extras) {
      EXPECT_TRUE(contents.tree == tree);
      EXPECT_EQ(checksums_of(contents).size(), 10'000u);
    } else {
      // Plain files come back in file order: F32 by name, then F16 by name.
      EXPECT_EQ(contents.entries.front().name, "layers.1.weight");
      EXPECT_EQ(contents.entries.back().name, "layers.9999.weight");
      for (const TreeEntry& entry : tree.entries()) {
        const std::string name = key_to_string(entry.key);
        ASSERT_TRUE(contents.tree.at(name).tensor().equals(entry.value.tensor())) << name;
      }
    }
  }
}

TEST(SafetensorsRoundTripTest, TiedTensorsAreCopiedForEachLeafInPlainFiles) {
  // safetensors' torch API refuses shared memory; a plain file has no place
  // for aliases, so ckpt writes each leaf (with extras: safetensors_alias_test).
  TempDir dir;
  const Tensor shared = patterned(DType::kFloat32, {4});
  Tree tree = Tree::map();
  tree.set("embed.weight", shared);
  tree.set("lm_head.weight", shared);
  save(dir / "tied.safetensors", tree, kPlain);
  const Contents loaded = open(dir / "tied.safetensors");
  ASSERT_EQ(loaded.entries.size(), 2u);
  EXPECT_EQ(loaded.entries[1].offset - loaded.entries[0].offset, 16u);
  EXPECT_TRUE(loaded.tree == tree);
  EXPECT_FALSE(loaded.tree.at("embed.weight").tensor().same_memory(loaded.tree.at("lm_head.weight").tensor()));
}

TEST(SafetensorsWriteTest, RefusesWhatThePlainFormatCannotHold) {
  TempDir dir;
  auto code_of = [&](const Tree& tree, const SaveOptions& options) {
    try {
      save(dir / "x.safetensors", tree, options);
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("x.safetensors"), std::string::npos) << error.what();
      return error.code();
    }
    return ErrorCode::kMismatch;  // "no error"
  };
  auto map_with = [](Key key, Tree value) {
    Tree tree = Tree::map();
    tree.set(std::move(key), std::move(value));
    return tree;
  };
  const Tensor t = patterned(DType::kFloat32, {1});
  EXPECT_EQ(code_of(map_with("n", int64_t{1}), kPlain), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(map_with("n", Tree()), kPlain), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(map_with(int64_t{0}, t), kPlain), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(map_with("l", Tree::list()), kPlain), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(map_with("m", Tree::map()), kPlain), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(Tree::list(), kPlain), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(map_with("z", Tensor::zeros(DType::kComplex128, {1})), kPlain), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(map_with(std::string("bad\xff"), t), kPlain), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(map_with(std::string("bad\xff"), t), kWithExtras), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(map_with("__metadata__", t), kWithExtras), ErrorCode::kUnsupported);
  SaveOptions reserved = kWithExtras;
  reserved.metadata = {{"ckpt", "{}"}};
  EXPECT_EQ(code_of(map_with("w", t), reserved), ErrorCode::kInvalidArgument);
  SaveOptions bad_metadata = kPlain;
  bad_metadata.metadata = {{"k", "\xc0"}};
  EXPECT_EQ(code_of(map_with("w", t), bad_metadata), ErrorCode::kUnsupported);
  // Nested maps of string keys are fine: they become dotted names.
  EXPECT_EQ(code_of(map_with("m", map_with("w", t)), kPlain), ErrorCode::kMismatch);
  EXPECT_EQ(load(dir / "x.safetensors").entries()[0].key, Key(std::string("m.w")));
  EXPECT_EQ(dir.list(), std::vector<std::string>{"x.safetensors"});  // no temporaries left
}

TEST(SafetensorsWriteTest, FailedWriteKeepsThePreviousFile) {
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("w", patterned(DType::kFloat32, {1024}));
  save(dir / "keep.safetensors", tree, kWithExtras);
  const std::string before = read_bytes(dir / "keep.safetensors");
  Tree other = Tree::map();
  other.set("v", patterned(DType::kFloat32, {4096}, 9));
  detail::inject_write_fault_after(100);
  try {
    save(dir / "keep.safetensors", other, kWithExtras);
    ADD_FAILURE() << "the injected fault did not fire";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kIo);
  }
  detail::inject_write_fault_after(-1);
  EXPECT_EQ(read_bytes(dir / "keep.safetensors"), before);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"keep.safetensors"});
}

TEST(SafetensorsWriteTest, SavingOverTheFileBeingViewed) {
  TempDir dir;
  const Tree tree = nested_state();
  save(dir / "s.safetensors", tree, kWithExtras);
  const Tree mapped = load(dir / "s.safetensors");
  save(dir / "s.safetensors", mapped, kWithExtras);
  EXPECT_TRUE(load(dir / "s.safetensors") == tree);
  EXPECT_TRUE(mapped == tree);
}

}  // namespace
}  // namespace ckpt
