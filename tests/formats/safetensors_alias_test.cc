// Tied tensors in safetensors files with ckpt's extras: stored once under the
// first name in tree order, every other name an alias in the extras'
// "aliases" record, read back as Tensors over one Buffer (same_memory).
// Malformed alias records: safetensors_malformed_test.cc. Plain files (each
// leaf its own copy): safetensors_test.cc.

#include <gtest/gtest.h>
#include <simdjson.h>

#include <array>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "core/checksum.h"
#include "formats/safetensors/layout.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::read_file;
using testing::TempDir;

const SaveOptions kWithExtras{.fsync = false};

// A tensor of `dtype` and `shape` whose bytes are a pattern derived from `seed`.
Tensor patterned(DType dtype, Shape shape, int seed = 1) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  auto bytes = tensor.mutable_bytes();
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(static_cast<uint8_t>(i * 31 + seed * 7 + 3));
  return tensor;
}

// What a plain safetensors reader sees: the header JSON (without padding),
// the tensor names in the header, and ckpt's extras document.
struct Header {
  std::string text;
  std::vector<std::string> tensors;
  std::string ckpt;
};

Header header_of(const std::filesystem::path& path) {
  const std::string file = read_file(path);
  uint64_t length = 0;
  std::memcpy(&length, file.data(), 8);
  Header header{file.substr(8, length), {}, {}};
  while (!header.text.empty() && header.text.back() == ' ') header.text.pop_back();
  simdjson::dom::parser parser;
  simdjson::dom::object fields;
  if (parser.parse(header.text).get_object().get(fields)) {
    ADD_FAILURE() << "header is not a JSON object: " << header.text;
    return header;
  }
  for (auto field : fields) {
    std::string_view ckpt;
    if (field.key != "__metadata__") {
      header.tensors.emplace_back(field.key);
    } else if (field.value["ckpt"].get_string().get(ckpt)) {
      ADD_FAILURE() << "no ckpt extras: " << header.text;
    } else {
      header.ckpt = std::string(ckpt);
    }
  }
  return header;
}

// "aliases" of ckpt's extras document, in document order.
std::vector<std::pair<std::string, std::string>> aliases_of(const Header& header) {
  simdjson::dom::parser parser;
  std::vector<std::pair<std::string, std::string>> aliases;
  simdjson::dom::object aliases_object;
  if (parser.parse(header.ckpt)["aliases"].get_object().get(aliases_object)) return aliases;
  for (auto field : aliases_object) {
    std::string_view stored;
    EXPECT_FALSE(field.value.get_string().get(stored)) << header.ckpt;
    aliases.emplace_back(field.key, stored);
  }
  return aliases;
}

bool tied(const Tree& tree, std::string_view a, std::string_view b) {
  return tree.at(a).tensor().same_memory(tree.at(b).tensor());
}

TEST(SafetensorsAliasTest, HeaderIsAsDocumented) {
  // The example of docs/formats/safetensors.md ("Tied tensors").
  TempDir dir;
  const Tensor shared = Tensor::from_values<uint8_t>(DType::kUInt8, {2}, std::vector<uint8_t>{1, 2});
  Tree tree = Tree::map();
  tree.set("a", shared);
  tree.set("b", shared);
  save(dir / "t.safetensors", tree, {.checksum = ChecksumKind::kNone, .fsync = false});
  EXPECT_EQ(header_of(dir / "t.safetensors").text,
            R"({"__metadata__":{"ckpt":"{\"version\":2,\"tree\":{\"map\":[[\"a\",{\"tensor\":\"a\"}],)"
            R"([\"b\",{\"tensor\":\"b\"}]]},\"aliases\":{\"b\":\"a\"}}"},)"
            R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})");
  EXPECT_EQ(read_file(dir / "t.safetensors").substr(read_file(dir / "t.safetensors").size() - 2), "\x01\x02");
}

TEST(SafetensorsAliasTest, TiedPairIsStoredOnceUnderTheFirstName) {
  TempDir dir;
  const Tensor embed = patterned(DType::kFloat32, {64, 16});
  Tree tree = Tree::map();
  tree.set("embed.weight", embed);
  tree.set("bias", patterned(DType::kFloat32, {16}, 2));
  tree.set("lm_head.weight", embed);
  const auto path = dir / "tied.safetensors";
  save(path, tree, kWithExtras);

  const Header header = header_of(path);
  EXPECT_EQ(header.tensors, (std::vector<std::string>{"bias", "embed.weight"}));
  EXPECT_EQ(aliases_of(header), (std::vector<std::pair<std::string, std::string>>{{"lm_head.weight", "embed.weight"}}));
  EXPECT_NE(header.ckpt.find(R"(["lm_head.weight",{"tensor":"lm_head.weight"}])"), std::string::npos) << header.ckpt;
  uint64_t header_length = 0;
  std::memcpy(&header_length, read_file(path).data(), 8);
  EXPECT_EQ(std::filesystem::file_size(path), 8 + header_length + embed.nbytes() + tree.at("bias").tensor().nbytes());

  const Contents contents = open(path);
  EXPECT_EQ(contents.format_version, 2);
  ASSERT_EQ(contents.entries.size(), 2u);  // stored tensors only, file order
  EXPECT_EQ(contents.entries[0].name, "bias");
  EXPECT_EQ(contents.entries[1].name, "embed.weight");
  EXPECT_FALSE(contents.entries[1].checksum.empty());
  EXPECT_EQ(contents.entries[1].checksum, detail::checksum_hex(ChecksumKind::kXxh3, embed.bytes()));
  EXPECT_TRUE(contents.tree == tree);
  EXPECT_TRUE(tied(contents.tree, "embed.weight", "lm_head.weight"));
  EXPECT_FALSE(tied(contents.tree, "embed.weight", "bias"));
  // Ties survive verify and a load into heap memory.
  EXPECT_TRUE(tied(verify(path).tree, "embed.weight", "lm_head.weight"));
  const Tree heap = load(path, {.lazy = false});
  EXPECT_EQ(heap.at("lm_head.weight").tensor().buffer().kind(), StorageKind::kHeap);
  EXPECT_TRUE(tied(heap, "embed.weight", "lm_head.weight"));
}

TEST(SafetensorsAliasTest, TheFirstNameInTreeOrderIsStoredWhateverItsName) {
  TempDir dir;
  const Tensor shared = patterned(DType::kBFloat16, {3, 5});
  Tree decoder = Tree::map();
  decoder.set("z_head", shared);
  Tree tree = Tree::map();
  tree.set("decoder", decoder);
  tree.set("a_embed", shared);
  tree.set("b_embed", shared);
  save(dir / "o.safetensors", tree, kWithExtras);
  const Header header = header_of(dir / "o.safetensors");
  EXPECT_EQ(header.tensors, std::vector<std::string>{"decoder.z_head"});
  // Every alias names the stored tensor: no chains.
  EXPECT_EQ(aliases_of(header), (std::vector<std::pair<std::string, std::string>>{
                                    {"a_embed", "decoder.z_head"}, {"b_embed", "decoder.z_head"}}));
  const Tree loaded = load(dir / "o.safetensors");
  EXPECT_TRUE(loaded == tree);
  EXPECT_TRUE(tied(loaded, "decoder.z_head", "a_embed"));
  EXPECT_TRUE(tied(loaded, "decoder.z_head", "b_embed"));
}

TEST(SafetensorsAliasTest, ACopiedTreeLeafIsDeduplicated) {
  // Copying a Tree copies its Tensors, which share their Buffer.
  TempDir dir;
  Tree model = Tree::map();
  model.set("w", patterned(DType::kFloat16, {32}));
  Tree tree = Tree::map();
  tree.set("model", model);
  tree.set("ema", model);  // the same tensor again, through a copy of the subtree
  ASSERT_TRUE(tied(tree, "model.w", "ema.w"));
  save(dir / "c.safetensors", tree, kWithExtras);
  EXPECT_EQ(header_of(dir / "c.safetensors").tensors, std::vector<std::string>{"model.w"});
  const Tree loaded = load(dir / "c.safetensors");
  EXPECT_TRUE(loaded == tree);
  EXPECT_TRUE(tied(loaded, "model.w", "ema.w"));
}

TEST(SafetensorsAliasTest, SeparatelyLentBuffersOverOneMemoryAreDeduplicated) {
  // As the Python bindings lend a torch state dict with tied parameters:
  // two Buffers, each with its own release, over the same memory.
  TempDir dir;
  std::array<float, 6> memory{1, 2, 3, 4, 5, 6};
  int released = 0;
  {
    const auto bytes = std::as_bytes(std::span(memory));
    Tree tree = Tree::map();
    tree.set("embed.weight", Tensor(DType::kFloat32, {2, 3}, Buffer::lend(bytes, [&] { ++released; })));
    tree.set("lm_head.weight", Tensor(DType::kFloat32, {2, 3}, Buffer::lend(bytes, [&] { ++released; })));
    ASSERT_NE(tree.at("embed.weight").tensor().buffer().storage(), tree.at("lm_head.weight").tensor().buffer().storage());
    save(dir / "l.safetensors", tree, kWithExtras);
    EXPECT_EQ(header_of(dir / "l.safetensors").tensors, std::vector<std::string>{"embed.weight"});
    const Tree loaded = load(dir / "l.safetensors");
    EXPECT_TRUE(loaded == tree);
    EXPECT_TRUE(tied(loaded, "embed.weight", "lm_head.weight"));
  }
  EXPECT_EQ(released, 2);
}

TEST(SafetensorsAliasTest, ViewsThatAreNotTheSameTensorAreCopies) {
  // Same bytes but another shape or dtype, or a partial overlap: stored as
  // separate tensors (safetensors forbids overlaps; aliases keep dtype and
  // shape).
  TempDir dir;
  const Tensor whole = patterned(DType::kFloat32, {4, 4});
  Tree tree = Tree::map();
  tree.set("whole", whole);
  tree.set("flat", Tensor(DType::kFloat32, {16}, whole.buffer()));
  tree.set("ints", Tensor(DType::kInt32, {4, 4}, whole.buffer()));
  tree.set("row", Tensor(DType::kFloat32, {4}, whole.buffer().slice(16, 16)));
  tree.set("again", whole);
  save(dir / "v.safetensors", tree, kWithExtras);
  const Header header = header_of(dir / "v.safetensors");
  EXPECT_EQ(header.tensors.size(), 4u);
  EXPECT_EQ(aliases_of(header), (std::vector<std::pair<std::string, std::string>>{{"again", "whole"}}));
  const Tree loaded = load(dir / "v.safetensors");
  EXPECT_TRUE(loaded == tree);
  EXPECT_TRUE(tied(loaded, "whole", "again"));
  EXPECT_FALSE(tied(loaded, "whole", "flat"));
}

TEST(SafetensorsAliasTest, TensorsOfNoBytesAreNeverAliased) {
  TempDir dir;
  const Tensor empty = Tensor::empty(DType::kFloat32, {0, 3});
  Tree tree = Tree::map();
  tree.set("a", empty);
  tree.set("b", empty);
  save(dir / "e.safetensors", tree, kWithExtras);
  const Header header = header_of(dir / "e.safetensors");
  EXPECT_EQ(header.tensors.size(), 2u);
  EXPECT_TRUE(aliases_of(header).empty());
  EXPECT_TRUE(load(dir / "e.safetensors") == tree);
}

TEST(SafetensorsAliasTest, Complex128AliasesTheStoredF64Pairs) {
  TempDir dir;
  const Tensor z = Tensor::from_values<double>(DType::kComplex128, {2}, std::vector<double>{1, -2, 3.5, 0.25});
  Tree tree = Tree::map();
  tree.set("z", z);
  tree.set("z_tied", z);
  save(dir / "z.safetensors", tree, kWithExtras);
  const Header header = header_of(dir / "z.safetensors");
  EXPECT_NE(header.ckpt.find(R"("dtypes":{"z":"complex128"},"aliases":{"z_tied":"z"})"), std::string::npos)
      << header.ckpt;
  const Tree loaded = load(dir / "z.safetensors");
  EXPECT_TRUE(loaded == tree);
  EXPECT_EQ(loaded.at("z_tied").tensor().dtype(), DType::kComplex128);
  EXPECT_TRUE(tied(loaded, "z", "z_tied"));
}

TEST(SafetensorsAliasTest, FilesWithoutTiesStayVersion1) {
  // Readable by every ckpt, including those that predate aliases.
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("a", patterned(DType::kFloat32, {2}, 1));
  tree.set("b", patterned(DType::kFloat32, {2}, 1));  // equal bytes, other memory
  save(dir / "n.safetensors", tree, kWithExtras);
  const Header header = header_of(dir / "n.safetensors");
  EXPECT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.ckpt.find("aliases"), std::string::npos);
  EXPECT_EQ(open(dir / "n.safetensors").format_version, 1);
}

TEST(SafetensorsAliasTest, ResavingALoadedFileKeepsTheTies) {
  TempDir dir;
  const Tensor shared = patterned(DType::kInt64, {8});
  Tree tree = Tree::map();
  tree.set("x", shared);
  tree.set("y", shared);
  tree.set("step", int64_t{7});
  save(dir / "a.safetensors", tree, kWithExtras);
  std::filesystem::create_directories(dir / "again");
  save(dir / "again" / "a.safetensors", load(dir / "a.safetensors"), kWithExtras);
  EXPECT_EQ(read_file(dir / "a.safetensors"), read_file(dir / "again" / "a.safetensors"));
}

}  // namespace
}  // namespace ckpt
