// safetensors in memory: PlannedFile writes the bytes write_file writes into
// a caller's buffer, and read_bytes reads a file held in memory as
// read_file reads it from disk (the drop-in Python API's serialize and
// deserialize stand on these).

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/safetensors/reader.h"
#include "formats/safetensors/writer.h"
#include "support/random_tensor.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using safetensors_detail::PlannedFile;
using safetensors_detail::read_bytes;
using testing::random_tensor;
using testing::TempDir;

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::byte> planned_bytes(const Tree& tree, const SaveOptions& options) {
  const PlannedFile plan(tree, options);
  std::vector<std::byte> out(plan.size());
  plan.write_to(out);
  return out;
}

Tree sample_tree() {
  Tree tree = Tree::map();
  tree.set("w", random_tensor(DType::kFloat32, {3, 4}, 1));
  tree.set("b", random_tensor(DType::kBFloat16, {4}, 2));
  tree.set("ids", random_tensor(DType::kInt64, {5}, 3));
  tree.set("empty", random_tensor(DType::kFloat16, {0, 2}, 4));
  tree.set("flag", random_tensor(DType::kBool, {}, 5));
  return tree;
}

class SafetensorsMemoryTest : public ::testing::TestWithParam<bool> {};  // extras on / off

TEST_P(SafetensorsMemoryTest, PlannedBytesEqualTheFileWriteFileWrites) {
  TempDir dir;
  Tree tree = sample_tree();
  if (GetParam()) {
    Tree nested = Tree::map();
    nested.set("step", int64_t{7});
    tree.set("state", nested);
  }
  SaveOptions options{.format = "safetensors", .extras = GetParam(), .metadata = {{"origin", "test"}}};
  save(dir.path() / "a.safetensors", tree, options);
  const std::string expected = file_bytes(dir.path() / "a.safetensors");
  const std::vector<std::byte> bytes = planned_bytes(tree, options);
  ASSERT_EQ(bytes.size(), expected.size());
  EXPECT_EQ(std::memcmp(bytes.data(), expected.data(), expected.size()), 0);
}

TEST_P(SafetensorsMemoryTest, ReadBytesGivesWhatReadingTheFileGives) {
  TempDir dir;
  const Tree tree = sample_tree();
  SaveOptions options{.format = "safetensors", .extras = GetParam()};
  save(dir.path() / "a.safetensors", tree, options);
  const Contents from_file = open(dir.path() / "a.safetensors", {.verify = true});
  const std::vector<std::byte> bytes = planned_bytes(tree, options);
  const Buffer lent = Buffer::lend(bytes, {});
  const Contents from_memory = read_bytes(lent, "<memory>", {.verify = true});
  ASSERT_EQ(from_memory.entries.size(), from_file.entries.size());
  for (size_t i = 0; i < from_file.entries.size(); ++i) {
    const EntryInfo& entry = from_file.entries[i];
    EXPECT_EQ(from_memory.entries[i].name, entry.name);
    EXPECT_EQ(from_memory.entries[i].offset, entry.offset);
    const Tensor& tensor = from_memory.tree.at(entry.name).tensor();
    EXPECT_TRUE(tensor.equals(tree.at(entry.name).tensor())) << entry.name;
    // A view of the caller's memory, not a copy.
    if (tensor.nbytes() > 0) {
      EXPECT_EQ(tensor.buffer().address(), bytes.data() + entry.offset) << entry.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Extras, SafetensorsMemoryTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "WithExtras" : "Plain"; });

TEST(SafetensorsMemory, WriteToRefusesABufferOfAnotherSize) {
  const Tree tree = sample_tree();
  const PlannedFile plan(tree, {.extras = false});
  std::vector<std::byte> small(plan.size() - 1);
  try {
    plan.write_to(small);
    FAIL() << "a short buffer was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(SafetensorsMemory, PlanningRefusesWhatWriteFileRefuses) {
  Tree tree = sample_tree();
  tree.set("name", std::string("not a tensor"));
  try {
    PlannedFile plan(tree, {.extras = false});
    FAIL() << "a string leaf was planned without extras";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
  }
}

TEST(SafetensorsMemory, TruncatedBytesAreCorruptAndNamedByTheLabel) {
  const std::vector<std::byte> bytes = planned_bytes(sample_tree(), {.extras = false});
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, bytes.size() - 1}) {
    const Buffer lent = Buffer::lend(std::span(bytes.data(), cut), {});
    try {
      read_bytes(lent, "payload.bin", {});
      FAIL() << "cut at " << cut << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << cut;
      EXPECT_NE(std::string(error.what()).find("payload.bin"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace ckpt
