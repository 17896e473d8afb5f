// The flax format: Flax's exact bytes, the shared samples written by
// flax.training.checkpoints (read, and re-encoded byte for byte), views into
// the mapped file, chunked arrays, ties, and detection by content.

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/flax/flax_format.h"
#include "formats/flax/layout.h"
#include "formats/flax/msgpack.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using flax_detail::detect_head;

const std::filesystem::path kSamples = std::filesystem::path(CKPT_SOURCE_DIR).parent_path() / "shared" / "interop-samples";

std::span<const std::byte> as_bytes(const std::string& text) { return std::as_bytes(std::span(text)); }

// A string literal's bytes, embedded NULs included.
template <size_t N>
std::string literal(const char (&text)[N]) {
  return std::string(text, N - 1);
}

Tensor iota(DType dtype, Shape shape) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  uint8_t value = 0;
  for (std::byte& b : tensor.mutable_bytes()) b = static_cast<std::byte>(value++);
  return tensor;
}

class FlaxTest : public ::testing::Test {
 protected:
  std::string save_bytes(const Tree& tree, SaveOptions options = {}) {
    options.format = "flax";
    save(dir_ / "out", tree, options);
    return testing::read_file(dir_ / "out");
  }
  testing::TempDir dir_;
};

// msgpack_serialize({'a': np.arange(6, dtype=np.int8)}), printed by flax 0.12.8.
TEST_F(FlaxTest, WritesFlaxsExactBytes) {
  Tree tree = Tree::map();
  tree.set("a", iota(DType::kInt8, {6}));
  EXPECT_EQ(save_bytes(tree), literal("\x81\xa1" "a\xd8\x01\x93\x91\x06\xa4int8\xc4\x06\x00\x01\x02\x03\x04\x05"));
}

// msgpack_serialize({'b': [1, -33, 2**40, None, True, 1.5, 'x', b'y']}).
TEST_F(FlaxTest, WritesLeavesWithTheSmallestEncodings) {
  Tree list = Tree::list();
  for (Tree leaf : {Tree(int64_t{1}), Tree(int64_t{-33}), Tree(int64_t{1} << 40), Tree(), Tree(true), Tree(1.5),
                    Tree("x"), Tree(Bytes{"y"})}) {
    list.push_back(leaf);
  }
  Tree tree = Tree::map();
  tree.set("b", list);
  const std::string expected = literal("\x81\xa1\x62\x98\x01\xd0\xdf\xcf\x00\x00\x01\x00\x00\x00\x00\x00\xc0\xc3\xcb?"
                                       "\xf8\x00\x00\x00\x00\x00\x00\xa1x\xc4\x01y");
  EXPECT_EQ(save_bytes(tree), expected);
}

TEST(FlaxEncoding, IntegerBoundariesAsMsgpackPythonPacksThem) {
  const auto encoded = [](int64_t value) {
    std::string out;
    flax_detail::append_int(out, value);
    return out;
  };
  EXPECT_EQ(encoded(127), "\x7f");
  EXPECT_EQ(encoded(128), "\xcc\x80");
  EXPECT_EQ(encoded(256), std::string("\xcd\x01\x00", 3));
  EXPECT_EQ(encoded(65536), std::string("\xce\x00\x01\x00\x00", 5));
  EXPECT_EQ(encoded(-32), "\xe0");
  EXPECT_EQ(encoded(-33), "\xd0\xdf");
  EXPECT_EQ(encoded(-129), "\xd1\xff\x7f");
  EXPECT_EQ(encoded(INT64_MIN), std::string("\xd3\x80\x00\x00\x00\x00\x00\x00\x00", 9));
}

TEST_F(FlaxTest, ExtHeadersUseFixextForExactSizes) {
  std::string out;
  flax_detail::append_ext_header(out, 1, 16);
  flax_detail::append_ext_header(out, 1, 0);
  flax_detail::append_ext_header(out, 1, 300);
  EXPECT_EQ(out, std::string("\xd8\x01\xc7\x00\x01\xc8\x01\x2c\x01", 9));
}

class FlaxSampleTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FlaxSampleTest, ReadsTheSampleAndReencodesItByteForByte) {
  const auto path = kSamples / GetParam() / "checkpoint_0";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  EXPECT_EQ(detect(path).id(), "flax");
  const Contents contents = flax_format().read(path, {});
  const Tree& tree = contents.tree;
  EXPECT_EQ(contents.entries.size(), 114u);
  const Tensor& step = tree.at("step").tensor();
  EXPECT_EQ(step.dtype(), DType::kInt32);
  EXPECT_EQ(step.shape(), Shape{});
  const Tensor& kernel = tree.at("params.Transformer.encoderblock_0.MlpBlock_0.Dense_0.kernel").tensor();
  EXPECT_EQ(kernel.dtype(), DType::kFloat32);
  EXPECT_EQ(kernel.shape(), (Shape{42, 64}));
  EXPECT_EQ(kernel.buffer().kind(), StorageKind::kMapped) << "tensors view the mapped file";
  testing::TempDir dir;
  save(dir / "again", tree, {.format = "flax"});
  EXPECT_EQ(testing::read_file(dir / "again"), testing::read_file(path));
}

INSTANTIATE_TEST_SUITE_P(Samples, FlaxSampleTest, ::testing::Values("flax-map", "flax-depth"));

TEST_F(FlaxTest, ListsAndIntegerKeysRoundTrip) {
  Tree per_param = Tree::map();
  per_param.set(int64_t{-4}, iota(DType::kFloat32, {2}));
  Tree list = Tree::list();
  list.push_back(per_param);
  list.push_back(std::string("é"));
  Tree tree = Tree::map();
  tree.set("opt", list);
  save(dir_ / "t.msgpack", tree);
  EXPECT_EQ(detect(dir_ / "t.msgpack").id(), "flax");
  EXPECT_TRUE(load(dir_ / "t.msgpack") == tree);
}

TEST_F(FlaxTest, LargeArraysAreChunkedAsFlaxChunksThem) {
  const Tensor big = iota(DType::kInt16, {5, 7});  // 70 bytes: chunks of 8 elements at a 16-byte limit
  Tree tree = Tree::map();
  tree.set("w", big);
  const auto path = dir_ / "chunked";
  flax_detail::write_file(path, tree, {}, 16);
  const std::string bytes = testing::read_file(path);
  EXPECT_NE(bytes.find("__msgpack_chunked_array__"), std::string::npos);
  const Contents contents = flax_format().read(path, {});
  ASSERT_EQ(contents.entries.size(), 1u);
  EXPECT_EQ(contents.entries[0].nbytes, 70u);
  EXPECT_TRUE(contents.tree.at("w").tensor().buffer().deferred()) << "chunks are gathered only when used";
  EXPECT_TRUE(contents.tree.at("w").tensor().equals(big));
  // Re-encoding with the same limit gives the same bytes.
  flax_detail::write_file(dir_ / "again", contents.tree, {}, 16);
  EXPECT_EQ(testing::read_file(dir_ / "again"), bytes);
  // A list's items are not chunked (msgpack_restore only unchunks map values).
  Tree in_list = Tree::list();
  in_list.push_back(big);
  flax_detail::write_file(dir_ / "list", in_list, {}, 16);
  EXPECT_EQ(testing::read_file(dir_ / "list").find("__msgpack"), std::string::npos);
}

TEST_F(FlaxTest, TiedTensorsAreAliasesWithExtrasAndCopiesWithout) {
  const Tensor shared = iota(DType::kFloat32, {8});
  Tree tree = Tree::map();
  tree.set("embed", shared);
  tree.set("head", shared);
  const std::string with = save_bytes(tree);
  const Tree loaded = load(dir_ / "out");
  EXPECT_TRUE(loaded.at("embed").tensor().same_memory(loaded.at("head").tensor()));
  const std::string without = save_bytes(tree, {.extras = false});
  EXPECT_LT(with.size(), without.size());
  const Tree plain = load(dir_ / "out");
  EXPECT_FALSE(plain.at("embed").tensor().same_memory(plain.at("head").tensor()));
  EXPECT_TRUE(plain == tree);
}

TEST_F(FlaxTest, ComplexScalarsReadAsZeroDimensionalComplex128) {
  // msgpack_serialize({'z': 1.5+2j}): ext 2 with the pair (1.5, 2.0).
  const std::string bytes =
      literal("\x81\xa1z\xc7\x13\x02\x92\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\xcb\x40\x00\x00\x00\x00\x00\x00\x00");
  testing::write_file(dir_ / "z", bytes);
  const Tensor z = flax_format().read(dir_ / "z", {}).tree.at("z").tensor();
  EXPECT_EQ(z.dtype(), DType::kComplex128);
  double parts[2];
  std::memcpy(parts, z.bytes().data(), sizeof(parts));
  EXPECT_EQ(parts[0], 1.5);
  EXPECT_EQ(parts[1], 2.0);
}

TEST_F(FlaxTest, NumpyScalarsReadAsZeroDimensionalTensors) {
  // msgpack_serialize({'s': np.float32(2)}): ext 3.
  const std::string bytes = literal("\x81\xa1s\xd8\x03\x93\x90\xa7" "float32\xc4\x04\x00\x00\x00\x40");
  testing::write_file(dir_ / "s", bytes);
  const Tensor s = flax_format().read(dir_ / "s", {}).tree.at("s").tensor();
  EXPECT_EQ(s.dtype(), DType::kFloat32);
  EXPECT_EQ(s.shape(), Shape{});
}

TEST(FlaxDetect, ClaimsFlaxHeadsOnly) {
  const std::string sample = literal("\x81\xa1" "a\xd8\x01\x93\x91\x06\xa4int8\xc4\x06\x00\x01\x02\x03\x04\x05");
  EXPECT_TRUE(detect_head(as_bytes(sample), sample.size()));
  // A head cut inside an array: the rest of the file is not read.
  testing::TempDir dir;
  Tree big = Tree::map();
  big.set("w", iota(DType::kFloat32, {3000}));
  big.set("after", iota(DType::kFloat32, {4}));
  save(dir / "big", big, {.format = "flax"});
  const std::string file = testing::read_file(dir / "big");
  EXPECT_TRUE(detect_head(as_bytes(file).first(4096), file.size()));
  EXPECT_TRUE(detect_head(as_bytes(file).first(20), file.size()));
  // The whole file, but followed by more bytes / cut short.
  EXPECT_FALSE(detect_head(as_bytes(sample + "x"), sample.size() + 1));
  EXPECT_FALSE(detect_head(as_bytes(sample).first(20), 20));
  // Pickle (legacy torch), npy, zip, safetensors, a msgpack array, an unknown dtype.
  EXPECT_FALSE(detect_head(as_bytes(std::string("\x80\x02\x8a\x0a", 4)), 4000));
  EXPECT_FALSE(detect_head(as_bytes(std::string("\x93NUMPY\x01\x00", 8)), 4000));
  EXPECT_FALSE(detect_head(as_bytes(std::string("PK\x03\x04", 4)), 4000));
  EXPECT_FALSE(detect_head(as_bytes(std::string("\x88\x00\x00\x00\x00\x00\x00\x00{\"a\":{}}", 16)), 16));
  EXPECT_FALSE(detect_head(as_bytes(std::string("\x91\x01", 2)), 2));
  std::string bad_dtype = sample;
  bad_dtype.replace(9, 4, "intX");
  EXPECT_FALSE(detect_head(as_bytes(bad_dtype), bad_dtype.size()));
  // Random bytes that start like a map.
  std::mt19937 random(5);
  int claimed = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string noise(4096, '\0');
    for (char& c : noise) c = static_cast<char>(random());
    noise[0] = static_cast<char>(0x80 | (trial % 16));
    claimed += detect_head(as_bytes(noise), 1 << 30) ? 1 : 0;
  }
  EXPECT_LE(claimed, 2) << "random files claimed";
}

TEST_F(FlaxTest, EntriesPointAtTheArrayBytes) {
  Tree tree = Tree::map();
  tree.set("a", iota(DType::kInt8, {6}));
  save_bytes(tree);
  const Contents contents = flax_format().read(dir_ / "out", {});
  ASSERT_EQ(contents.entries.size(), 1u);
  EXPECT_EQ(contents.entries[0].name, "a");
  EXPECT_EQ(contents.entries[0].offset, 15u);
  EXPECT_EQ(contents.entries[0].nbytes, 6u);
}

}  // namespace
}  // namespace ckpt
