// safetensors files with ckpt's extras (the tree, checksums, format version
// in __metadata__) and the files written by the real safetensors package.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "core/checksum.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors_test_helpers.h"
#include "support/safetensors_bytes.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using namespace safetensors_test;
using testing::TempDir;
using testing::header_of;

// ---- ckpt's extras ----

TEST(SafetensorsExtrasTest, MetadataShapeIsAsDocumented) {
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("w", tensor_of<float>(DType::kFloat32, {1}, {1.0f}));
  tree.set("step", int64_t{3});
  SaveOptions options = kWithExtras;
  options.checksum = ChecksumKind::kCrc32c;
  options.metadata = {{"framework", "pt"}};
  save(dir / "a.safetensors", tree, options);
  const std::string crc = detail::checksum_hex(ChecksumKind::kCrc32c, tree.at("w").tensor().bytes());
  const std::string ckpt_json = R"({"version":1,"tree":{"map":[["w",{"tensor":"w"}],["step",3]]},)"
                                R"("checksum":"crc32c","checksums":{"w":")" + crc + R"("}})";
  std::string ckpt_string;
  for (char c : ckpt_json) {
    if (c == '"') ckpt_string += '\\';
    ckpt_string += c;
  }
  EXPECT_EQ(header_of(read_bytes(dir / "a.safetensors")),
            R"({"__metadata__":{"framework":"pt","ckpt":")" + ckpt_string +
                R"("},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})");
  const Contents contents = open(dir / "a.safetensors", {.verify = true});
  EXPECT_EQ(contents.metadata, (Metadata{{"framework", "pt"}}));
  EXPECT_EQ(contents.checksum, ChecksumKind::kCrc32c);
  EXPECT_EQ(checksums_of(contents), (std::map<std::string, std::string>{{"w", crc}}));
  EXPECT_EQ(contents.format_version, 1);
}

TEST(SafetensorsExtrasTest, ChecksumsMatchTheDataForEveryKind) {
  TempDir dir;
  const Tree tree = nested_state();
  for (ChecksumKind kind : {ChecksumKind::kXxh3, ChecksumKind::kCrc32c, ChecksumKind::kNone}) {
    SaveOptions options = kWithExtras;
    options.checksum = kind;
    save(dir / "c.safetensors", tree, options);
    const Contents contents = open(dir / "c.safetensors", {.verify = true});
    EXPECT_EQ(contents.checksum, kind);
    if (kind == ChecksumKind::kNone) {
      EXPECT_TRUE(checksums_of(contents).empty());
      continue;
    }
    ASSERT_EQ(checksums_of(contents).size(), contents.entries.size());
    for (const Tree::Leaf& leaf : tree.tensor_leaves()) {
      EXPECT_EQ(checksums_of(contents).at(leaf.name), detail::checksum_hex(kind, leaf.value->tensor().bytes()))
          << leaf.name;
    }
  }
}

TEST(SafetensorsExtrasTest, KnownChecksumsAreStoredInsteadOfComputed) {
  TempDir dir;
  const Tree tree = nested_state();
  const std::vector<Tree::Leaf> leaves = tree.tensor_leaves();
  ASSERT_GE(leaves.size(), 2u);
  auto known = std::make_shared<std::map<std::string, std::string>>();
  for (const Tree::Leaf& leaf : leaves) {
    (*known)[leaf.name] = detail::checksum_hex(ChecksumKind::kXxh3, leaf.value->tensor().bytes());
  }
  SaveOptions options = kWithExtras;
  options.known_checksums = known;
  save(dir / "k.safetensors", tree, options);
  EXPECT_TRUE(verify(dir / "k.safetensors").tree == tree);
  // A known checksum is taken as given, not recomputed: a wrong one is
  // stored, and verification names its tensor. One of another width (not
  // of this kind) is ignored and computed.
  (*known)[leaves[0].name] = std::string(16, 'f');
  (*known)[leaves[1].name] = "abc";
  save(dir / "w.safetensors", tree, options);
  const Contents contents = open(dir / "w.safetensors");
  EXPECT_EQ(checksums_of(contents).at(leaves[0].name), std::string(16, 'f'));
  EXPECT_EQ(checksums_of(contents).at(leaves[1].name),
            detail::checksum_hex(ChecksumKind::kXxh3, leaves[1].value->tensor().bytes()));
  try {
    verify(dir / "w.safetensors");
    FAIL() << "a wrong known checksum was not stored";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().entry, leaves[0].name);
  }
}

TEST(SafetensorsExtrasTest, ParallelWritesOfLargeTensorsChecksumEveryChunk) {
  TempDir dir;
  Tree tree = Tree::map();
  for (int i = 0; i < 3; ++i) tree.set("big" + std::to_string(i), patterned(DType::kUInt8, {(9 << 20) + i}, i));
  SaveOptions options = kWithExtras;
  options.threads = 3;
  save(dir / "p.safetensors", tree, options);
  const Contents contents = verify(dir / "p.safetensors");
  EXPECT_TRUE(contents.tree == tree);
  EXPECT_EQ(checksums_of(contents).at("big2"), detail::checksum_hex(ChecksumKind::kXxh3, tree.at("big2").tensor().bytes()));
}

TEST(SafetensorsExtrasTest, Complex128IsStoredAsF64Pairs) {
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("z", tensor_of<double>(DType::kComplex128, {2}, {1.0, -2.0, 3.5, 0.25}));
  save(dir / "z.safetensors", tree, kWithExtras);
  const std::string header = header_of(read_bytes(dir / "z.safetensors"));
  EXPECT_NE(header.find(R"("z":{"dtype":"F64","shape":[2,2],"data_offsets":[0,32]})"), std::string::npos) << header;
  EXPECT_NE(header.find(R"(\"dtypes\":{\"z\":\"complex128\"})"), std::string::npos) << header;
  const Contents contents = open(dir / "z.safetensors");
  EXPECT_TRUE(contents.tree == tree);
  EXPECT_EQ(contents.entries[0].dtype, DType::kComplex128);
  EXPECT_EQ(contents.entries[0].shape, Shape{2});
}

TEST(SafetensorsExtrasTest, FileIsPlainSafetensorsToOtherReaders) {
  // Another reader sees the tensor leaves under their names and a string in
  // __metadata__; nothing else.
  TempDir dir;
  const Tree tree = nested_state();
  save(dir / "n.safetensors", tree, kWithExtras);
  const std::string header = header_of(read_bytes(dir / "n.safetensors"));
  simdjson::dom::parser parser;
  simdjson::dom::object object = parser.parse(header).get_object().value();
  size_t tensors = 0;
  for (auto field : object) {
    if (field.key == "__metadata__") {
      simdjson::dom::object metadata = field.value.get_object().value();
      ASSERT_EQ(metadata.size(), 1u);
      EXPECT_TRUE(metadata["ckpt"].is_string());
      continue;
    }
    ++tensors;
    const Tensor& tensor = tree.at(std::string(field.key)).tensor();
    EXPECT_EQ(std::string_view(field.value["dtype"].get_string().value()), dtype_info(tensor.dtype()).safetensors);
  }
  EXPECT_EQ(tensors, tree.tensor_leaves().size());
}

TEST(SafetensorsExtrasTest, TensorsAreNaturallyAlignedInTheFile) {
  TempDir dir;
  Tree tree = Tree::map();
  int seed = 0;
  for (const DTypeInfo& info : all_dtypes()) tree.set(std::string("x").append(info.name), patterned(info.dtype, {3}, ++seed));
  tree.set("odd", patterned(DType::kUInt8, {7}));
  save(dir / "al.safetensors", tree, kWithExtras);
  const Contents contents = open(dir / "al.safetensors");
  for (const EntryInfo& entry : contents.entries) {
    const size_t size = dtype_size(entry.dtype == DType::kComplex128 ? DType::kFloat64 : entry.dtype);
    EXPECT_EQ(entry.offset % size, 0u) << entry.name;
  }
  EXPECT_NO_THROW(contents.tree.at("xfloat64").tensor().values<double>());
}

// ---- files written by the real safetensors package ----

std::filesystem::path samples_dir() { return std::filesystem::path(CKPT_SOURCE_DIR) / ".." / "shared" / "interop-samples"; }

TEST(SafetensorsInteropTest, EverySampleLoadsAndValidates) {
  const auto root = samples_dir();
  if (!std::filesystem::exists(root / "safetensors-hf")) GTEST_SKIP() << "no interop samples at " << root;
  size_t files = 0;
  for (const char* folder : {"safetensors-hf", "safetensors-burn"}) {
    for (const auto& item : std::filesystem::directory_iterator(root / folder)) {
      if (item.path().extension() != ".safetensors") continue;
      ++files;
      EXPECT_EQ(&detect(item.path()), &safetensors_format()) << item.path();
      const Contents contents = safetensors_format().read(item.path(), {.verify = true});
      EXPECT_FALSE(contents.entries.empty()) << item.path();
      EXPECT_EQ(contents.tree.size(), contents.entries.size()) << item.path();
    }
  }
  EXPECT_EQ(files, 19u);
}

// Values below were read with the real package (.venv, safetensors 0.8.0:
// safe_open(..., "np"), offset_keys(), get_tensor()).
TEST(SafetensorsInteropTest, SpotValuesAgreeWithTheRealPackage) {
  const auto root = samples_dir();
  if (!std::filesystem::exists(root / "safetensors-hf")) GTEST_SKIP() << "no interop samples at " << root;
  auto hex_head = [](const Tensor& tensor, size_t count) {
    std::string hex;
    char digits[3];
    for (size_t i = 0; i < std::min(count, tensor.nbytes()); ++i) {
      std::snprintf(digits, sizeof digits, "%02x", static_cast<unsigned>(tensor.bytes()[i]));
      hex += digits;
    }
    return hex;
  };
  const Contents overall = open(root / "safetensors-hf" / "overall.safetensors");
  std::vector<std::string> order;
  for (const EntryInfo& entry : overall.entries) order.push_back(entry.name);
  EXPECT_EQ(order, (std::vector<std::string>{"B", "H", "I", "b", "d", "e", "f", "h", "i"}));
  EXPECT_EQ(overall.metadata, (Metadata{{"test", "a"}}));
  EXPECT_EQ(overall.tree.at("d").tensor().dtype(), DType::kFloat64);
  EXPECT_EQ(overall.tree.at("d").tensor().shape(), Shape{6});
  EXPECT_EQ(hex_head(overall.tree.at("d").tensor(), 8), "00000000000008c0");  // -3.0
  EXPECT_EQ(hex_head(overall.tree.at("I").tensor(), 8), "fdfffffffeffffff");  // 4294967293, 4294967294
  EXPECT_EQ(hex_head(overall.tree.at("e").tensor(), 8), "00c200c000bc0000");  // float16 -3, -2, -1, 0

  const Contents norm = open(root / "safetensors-burn" / "batch_norm2d.safetensors");
  EXPECT_EQ(norm.entries.front().name, "norm1.num_batches_tracked");
  EXPECT_EQ(norm.tree.at("norm1.num_batches_tracked").tensor().dtype(), DType::kInt64);
  EXPECT_EQ(norm.tree.at("norm1.num_batches_tracked").tensor().shape(), Shape{});
  EXPECT_EQ(hex_head(norm.tree.at("norm1.num_batches_tracked").tensor(), 8), "0100000000000000");
  EXPECT_EQ(hex_head(norm.tree.at("norm1.running_var").tensor(), 8), "6666663f6666663f");  // 0.9f

  const Contents boolean = open(root / "safetensors-burn" / "boolean.safetensors");
  EXPECT_EQ(boolean.tree.at("buffer").tensor().dtype(), DType::kBool);
  EXPECT_EQ(hex_head(boolean.tree.at("buffer").tensor(), 3), "010001");

  const Contents nested = open(root / "safetensors-burn" / "complex_nested.safetensors");
  EXPECT_EQ(nested.entries.size(), 23u);
  EXPECT_EQ(nested.tree.at("fc1.weight").tensor().shape(), (Shape{12, 120}));
  EXPECT_EQ(hex_head(nested.tree.at("fc1.weight").tensor(), 8), "dc561bbd3511a0bd");
}

}  // namespace
}  // namespace ckpt
