// Documents (ckpt/document.h): the keys each report has, what they hold for
// real files, and their JSON text.

#include "ckpt/document.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/registry.h"
#include "support/random_tensor.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::random_tensor;
using testing::TempDir;

std::vector<std::string> keys_of(const Tree& map) {
  std::vector<std::string> keys;
  for (const TreeEntry& entry : map.entries()) keys.push_back(key_to_string(entry.key));
  return keys;
}

TEST(DocumentTest, ContentsListEachStoredTensorOnceTiedOnesIncluded) {
  TempDir dir;
  const Tensor shared = random_tensor(DType::kFloat32, {4, 3}, 1);
  Tree state = Tree::map();
  state.set("embed", shared);
  state.set("head", shared);  // tied: stored once, under the first name
  state.set("bias", random_tensor(DType::kFloat16, {3}, 2));
  state.set("step", int64_t{7});
  const auto path = dir / "tied.safetensors";
  save(path, state, {.metadata = {{"author", "me"}}, .fsync = false});

  const Contents contents = open(path);
  const Tree document = contents_document(path, contents);
  EXPECT_EQ(keys_of(document), (std::vector<std::string>{"path", "format", "format_version", "checksum", "tensors",
                                                         "values", "metadata", "total_nbytes"}));
  EXPECT_EQ(document.at("path").string(), path.string());
  EXPECT_EQ(document.at("format").string(), "safetensors");
  EXPECT_EQ(document.at("checksum").string(), "xxh3");
  const Tree& tensors = document.at("tensors");
  ASSERT_EQ(tensors.size(), 2u);  // embed and bias; head shares embed's bytes
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const EntryInfo& entry = contents.entries[i];
    const Tree& item = tensors[i];
    EXPECT_EQ(keys_of(item), (std::vector<std::string>{"name", "dtype", "shape", "nbytes", "offset", "checksum"}));
    EXPECT_EQ(item.at("name").string(), entry.name);
    EXPECT_EQ(item.at("dtype").string(), dtype_name(entry.dtype));
    ASSERT_EQ(item.at("shape").size(), entry.shape.size());
    for (size_t d = 0; d < entry.shape.size(); ++d) EXPECT_EQ(item.at("shape")[d].integer(), entry.shape[d]);
    EXPECT_EQ(static_cast<uint64_t>(item.at("nbytes").integer()), entry.nbytes);
    EXPECT_EQ(static_cast<uint64_t>(item.at("offset").integer()), entry.offset);
    EXPECT_EQ(item.at("checksum").string(), entry.checksum);
    total += entry.nbytes;
  }
  EXPECT_EQ(total, 4 * 3 * 4 + 3 * 2u);
  EXPECT_EQ(static_cast<uint64_t>(document.at("total_nbytes").integer()), total);
  EXPECT_EQ(keys_of(document.at("values")), std::vector<std::string>{"step"});
  EXPECT_EQ(document.at("values").at("step").integer(), 7);
  EXPECT_EQ(document.at("metadata").at("author").string(), "me");
}

TEST(DocumentTest, APlainFileHasNoChecksumKind) {
  TempDir dir;
  Tree state = Tree::map();
  state.set("w", random_tensor(DType::kInt8, {5}, 3));
  save(dir / "plain.safetensors", state, {.extras = false, .fsync = false});
  const Tree document = contents_document(dir / "plain.safetensors", open(dir / "plain.safetensors"));
  EXPECT_TRUE(document.at("checksum").is_none());
  EXPECT_TRUE(document.at("tensors")[0].at("checksum").is_none());
  EXPECT_EQ(document.at("format_version").integer(), 0);
}

TEST(DocumentTest, DiffListsEveryKindOfDifference) {
  Tree a = Tree::map(), b = Tree::map();
  a.set("w", random_tensor(DType::kFloat32, {2, 2}, 1));
  b.set("w", random_tensor(DType::kFloat32, {2, 3}, 1));
  a.set("epoch", int64_t{3});
  b.set("epoch", int64_t{4});
  a.set("old", 1.0);
  b.set("new", Tree());
  a.set("kind", int64_t{1});
  b.set("kind", "one");
  const Tree document = diff_document(diff(a, b), "a.pt", "b.pt", 0.5);
  EXPECT_EQ(keys_of(document),
            (std::vector<std::string>{"identical", "a", "b", "atol", "compared", "only_in_a", "only_in_b",
                                      "kind_mismatched", "dtype_mismatched", "shape_mismatched", "value_differences",
                                      "leaf_differences", "within_tolerance"}));
  EXPECT_FALSE(document.at("identical").boolean());
  EXPECT_EQ(document.at("a").string(), "a.pt");
  EXPECT_EQ(document.at("atol").real(), 0.5);
  EXPECT_EQ(document.at("compared").integer(), 3);
  EXPECT_EQ(document.at("only_in_a")[0].string(), "old");
  EXPECT_EQ(document.at("only_in_b")[0].string(), "new");
  const Tree& kind = document.at("kind_mismatched")[0];
  EXPECT_EQ(kind.at("name").string(), "kind");
  EXPECT_EQ(kind.at("a").string(), "int");
  EXPECT_EQ(kind.at("b").string(), "string");
  const Tree& shape = document.at("shape_mismatched")[0];
  EXPECT_EQ(shape.at("b")[1].integer(), 3);
  const Tree& leaf = document.at("leaf_differences")[0];
  EXPECT_EQ(leaf.at("name").string(), "epoch");
  EXPECT_EQ(leaf.at("a").integer(), 3);
  EXPECT_EQ(leaf.at("b").integer(), 4);
}

TEST(DocumentTest, FormatsFollowTheRegistry) {
  const Tree document = formats_document();
  const Tree& list = document.at("formats");
  ASSERT_EQ(list.size(), formats().size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Format& format = *formats()[i];
    const FormatCapabilities caps = format.capabilities();
    const Tree& item = list[i];
    EXPECT_EQ(item.at("id").string(), format.id());
    EXPECT_EQ(item.at("nested_tree").boolean(), caps.nested_tree);
    EXPECT_EQ(item.at("lists_and_int_keys").boolean(), caps.lists_and_int_keys);
    EXPECT_EQ(item.at("metadata").boolean(), caps.metadata);
    EXPECT_EQ(item.at("shards").boolean(), caps.shards);
    EXPECT_EQ(item.at("single_tensor").boolean(), caps.single_tensor);
    EXPECT_EQ(item.at("dtypes").size(), format.dtypes().size());
    EXPECT_EQ(item.at("extensions").size(), format.extensions().size());
  }
}

TEST(DocumentTest, JsonRendersEveryKindOfLeaf) {
  Tree document = Tree::map();
  document.set("none", Tree());
  document.set("yes", true);
  document.set("n", int64_t{-3});
  document.set("x", 0.25);
  document.set("nan", std::numeric_limits<double>::quiet_NaN());
  document.set("inf", -std::numeric_limits<double>::infinity());
  document.set("text", "a\"b\n名");
  document.set("raw", Bytes{std::string("\x01\xfe", 2)});
  document.set("t", Tensor::empty(DType::kBFloat16, {2, 0}));
  Tree& nested = document.set("nested", Tree::map());
  nested.set(int64_t{5}, Tree::list());
  EXPECT_EQ(to_json(document),
            "{\"none\":null,\"yes\":true,\"n\":-3,\"x\":0.25,\"nan\":\"nan\",\"inf\":\"-inf\","
            "\"text\":\"a\\\"b\\n名\",\"raw\":{\"bytes_base64\":\"Af4=\"},"
            "\"t\":{\"tensor\":{\"dtype\":\"bfloat16\",\"shape\":[2,0]}},\"nested\":{\"5\":[]}}");
}

TEST(DocumentTest, LeafTextShowsBytesInHexAndTensorsByDtypeAndShape) {
  EXPECT_EQ(leaf_text(Bytes{std::string("\x01\xfe", 2)}), "bytes[2] 01fe");
  EXPECT_EQ(leaf_text(Bytes{}), "bytes[0]");
  std::string sixteen;
  for (int i = 0; i < 16; ++i) sixteen += "0a";
  EXPECT_EQ(leaf_text(Bytes{std::string(17, '\x0a')}), "bytes[17] " + sixteen + "…");  // the first 16 shown
  EXPECT_EQ(leaf_text(Tensor::empty(DType::kFloat32, {2, 3})), "float32 [2, 3]");
  EXPECT_EQ(leaf_text(Tree("run")), "\"run\"");
  EXPECT_EQ(leaf_text(Tree()), "null");
}

}  // namespace
}  // namespace ckpt
