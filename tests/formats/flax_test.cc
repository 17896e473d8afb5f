// The flax format: Flax's exact bytes, the shared samples written by
// flax.training.checkpoints (read, and re-encoded byte for byte), views into
// the mapped file, chunked arrays, ties, and detection by content.

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/flax/format.h"
#include "formats/flax/layout.h"
#include "formats/flax/msgpack.h"
#include "formats/flax/reader.h"
#include "formats/flax/writer.h"
#include "support/files.h"
#include "support/string_keyed.h"
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

std::string from_hex(std::string_view hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return bytes;
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

// to_bytes({'b': [1, -33, 2**40, None, True, 1.5, 'x', b'y']}), printed by
// flax 0.12.8: the list is a map keyed "0".."7" (_list_state_dict).
TEST_F(FlaxTest, WritesLeavesWithTheSmallestEncodings) {
  Tree list = Tree::list();
  for (Tree leaf : {Tree(int64_t{1}), Tree(int64_t{-33}), Tree(int64_t{1} << 40), Tree(), Tree(true), Tree(1.5),
                    Tree("x"), Tree(Bytes{"y"})}) {
    list.push_back(leaf);
  }
  Tree tree = Tree::map();
  tree.set("b", list);
  EXPECT_EQ(save_bytes(tree),
            from_hex("81a16288a13001a131d0dfa132cf0000010000000000a133c0a134c3a135cb3ff8000000000000a136a178a137c40179"));
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

// Lists (and tuples) are maps keyed "0".."n-1", integer keys their decimal
// strings, empty lists empty maps: to_bytes({"opt": [{-4: np.arange(8,
// dtype=np.uint8).view(np.float32)}, "é"], "e": [], "t": ()}), printed by
// flax 0.12.8. What loads back is that state dict, as msgpack_restore
// gives it.
TEST_F(FlaxTest, ListsAndIntegerKeysAreWrittenAsFlaxsStateDict) {
  Tree per_param = Tree::map();
  per_param.set(int64_t{-4}, iota(DType::kFloat32, {2}));
  Tree list = Tree::list();
  list.push_back(per_param);
  list.push_back(std::string("é"));
  Tree tree = Tree::map();
  tree.set("opt", list);
  tree.set("e", Tree::list());
  tree.set("t", Tree::list());
  EXPECT_EQ(save_bytes(tree),
            from_hex("83a36f707482a13081a22d34c71501939102a7666c6f61743332c4080001020304050607a131a2c3a9a16580a17480"));
  save(dir_ / "t.msgpack", tree);
  EXPECT_EQ(detect(dir_ / "t.msgpack").id(), "flax");
  const Tree loaded = load(dir_ / "t.msgpack");
  EXPECT_TRUE(loaded == testing::string_keyed(tree));
  EXPECT_TRUE(loaded.at("opt").is_map());
  EXPECT_NE(loaded.at("opt.0").find(std::string("-4")), nullptr);
  // A root list is a map too, so the file is detected by content.
  save(dir_ / "root", list, {.format = "flax"});
  EXPECT_EQ(detect(dir_ / "root").id(), "flax");
}

// {1: a, "1": b}: flax's _dict_state_dict refuses keys that meet as strings.
TEST_F(FlaxTest, IntegerAndStringKeysThatMeetAsStringsAreRefused) {
  Tree tree = Tree::map();
  Tree& inner = tree.set("state", Tree::map());
  inner.set(int64_t{1}, iota(DType::kInt8, {1}));
  inner.set(std::string("1"), iota(DType::kInt8, {1}));
  try {
    save(dir_ / "k.msgpack", tree);
    ADD_FAILURE() << "saved";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_EQ(error.context().entry, "state.1") << error.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "k.msgpack"));
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
  // A list's items are chunked too: to_state_dict made the list a map,
  // which _chunk_array_leaves_in_place recurses into.
  Tree in_list = Tree::list();
  in_list.push_back(big);
  flax_detail::write_file(dir_ / "list", in_list, {}, 16);
  EXPECT_NE(testing::read_file(dir_ / "list").find("__msgpack"), std::string::npos);
  EXPECT_TRUE(flax_format().read(dir_ / "list", {}).tree.at("0").tensor().equals(big));
}

Tensor arange(DType dtype, Shape shape) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  const size_t element = dtype_size(dtype);
  for (uint64_t i = 0; i < tensor.numel(); ++i) {
    const uint64_t value = i;
    if (dtype == DType::kFloat64) {
      const double real = static_cast<double>(i);
      std::memcpy(tensor.mutable_bytes().data() + i * element, &real, element);
    } else {
      std::memcpy(tensor.mutable_bytes().data() + i * element, &value, element);  // little-endian
    }
  }
  return tensor;
}

// Files flax 0.12.8 wrote with flax.serialization.MAX_CHUNK_SIZE lowered:
// to_bytes(tree).hex(). ckpt writes the same bytes with the same chunk size
// and reads every array back whole (lists as the maps to_bytes made them).
TEST_F(FlaxTest, ChunkedArraysAreFlaxsBytesAtASmallChunkSize) {
  struct Case {
    const char* name;
    Tree tree;
    uint64_t max_chunk_size;
    const char* hex;
  };
  // {"w": np.arange(6, dtype=np.int16)}, MAX_CHUNK_SIZE 4: chunks of 2 elements.
  Tree int16s = Tree::map();
  int16s.set("w", arange(DType::kInt16, {6}));
  // {"z": np.array(1.5 + 2j)}, MAX_CHUNK_SIZE 8 below the 16-byte itemsize: one
  // element per chunk, and a 0-d array's shape is an empty map.
  Tree complex_scalar = Tree::map();
  const double parts[2] = {1.5, 2.0};
  complex_scalar.set("z", Tensor::from_bytes(DType::kComplex128, {}, std::as_bytes(std::span(parts))));
  // {"params": {"dense": {"kernel": arange(10, uint8).reshape(2, 5)}},
  //  "list": [arange(10, uint8), {"inner": arange(10, uint8)}], "small": arange(4, uint8)},
  // MAX_CHUNK_SIZE 4: the kernel and the arrays in the list (a map keyed
  // "0", "1" in the state dict) are chunked 4 + 4 + 2; 4 bytes are not more
  // than 4.
  Tree nested = Tree::map();
  nested.set("params", Tree::map()).set("dense", Tree::map()).set("kernel", arange(DType::kUInt8, {2, 5}));
  Tree list = Tree::list();
  list.push_back(arange(DType::kUInt8, {10}));
  Tree inner = Tree::map();
  inner.set("inner", arange(DType::kUInt8, {10}));
  list.push_back(inner);
  nested.set("list", list);
  nested.set("small", arange(DType::kUInt8, {4}));
  const std::vector<Case> cases = {
      {"int16", int16s, 4,
       "81a17783b95f5f6d73677061636b5f6368756e6b65645f61727261795f5fc3a5736861706581a13006a66368756e6b7383a130c70f"
       "01939102a5696e743136c40400000100a131c70f01939102a5696e743136c40402000300a132c70f01939102a5696e743136c40404"
       "000500"},
      // np.arange(3, dtype=np.float64) as the root, MAX_CHUNK_SIZE 8.
      {"root", Tree(arange(DType::kFloat64, {3})), 8,
       "83b95f5f6d73677061636b5f6368756e6b65645f61727261795f5fc3a5736861706581a13003a66368756e6b7383a130c7150193"
       "9101a7666c6f61743634c4080000000000000000a131c71501939101a7666c6f61743634c408000000000000f03fa132c7150193"
       "9101a7666c6f61743634c4080000000000000040"},
      {"complex", complex_scalar, 8,
       "81a17a83b95f5f6d73677061636b5f6368756e6b65645f61727261795f5fc3a5736861706580a66368756e6b7381a130c7200193"
       "9101aa636f6d706c6578313238c410000000000000f83f0000000000000040"},
      {"nested", nested, 4,
       "83a6706172616d7381a564656e736581a66b65726e656c83b95f5f6d73677061636b5f6368756e6b65645f61727261795f5fc3a5"
       "736861706582a13002a13105a66368756e6b7383a130c70f01939104a575696e7438c40400010203a131c70f01939104a575696e"
       "7438c40404050607a132c70d01939102a575696e7438c4020809a46c69737482a13083b95f5f6d73677061636b5f6368756e6b65"
       "645f61727261795f5fc3a5736861706581a1300aa66368756e6b7383a130c70f01939104a575696e7438c40400010203a131c70f"
       "01939104a575696e7438c40404050607a132c70d01939102a575696e7438c4020809a13181a5696e6e657283b95f5f6d73677061"
       "636b5f6368756e6b65645f61727261795f5fc3a5736861706581a1300aa66368756e6b7383a130c70f01939104a575696e7438c4"
       "0400010203a131c70f01939104a575696e7438c40404050607a132c70d01939102a575696e7438c4020809a5736d616c6cc70f01"
       "939104a575696e7438c40400010203"},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.name);
    const auto path = dir_ / test.name;
    flax_detail::write_file(path, test.tree, {}, test.max_chunk_size);
    const std::string flax_bytes = from_hex(test.hex);
    EXPECT_EQ(testing::read_file(path), flax_bytes);
    // Flax's file reads back as the tree, every chunked array one tensor.
    testing::write_file(dir_ / "flax", flax_bytes);
    const Contents contents = flax_format().read(dir_ / "flax", {});
    EXPECT_TRUE(contents.tree == testing::string_keyed(test.tree));
    EXPECT_EQ(contents.entries.size(), test.tree.tensor_leaves().size());
    // Re-encoded at flax's default chunk size, nothing this small is chunked.
    flax_detail::write_file(dir_ / "whole", contents.tree, {});
    EXPECT_EQ(testing::read_file(dir_ / "whole").find("__msgpack_chunked_array__"), std::string::npos);
    EXPECT_TRUE(load(dir_ / "whole", {.format = "flax"}) == testing::string_keyed(test.tree));
  }
}

// Byte i of the pattern (bool: 0/1), as flax_chunked_peer.py builds it too.
Tensor patterned(DType dtype, Shape shape) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  uint64_t i = 0;
  for (std::byte& b : tensor.mutable_bytes()) {
    b = static_cast<std::byte>(dtype == DType::kBool ? i % 2 : (i * 7 + 3) % 256);
    ++i;
  }
  return tensor;
}

// The peer: flax 0.12.8 from the project's .venv, with MAX_CHUNK_SIZE set
// as the file name says, serializes the same tree with to_bytes
// (byte-identical to ckpt's file?) and msgpack_restore()s ckpt's file (its
// state dict, every array equal?). Exit 77: no flax to run.
constexpr std::string_view kFlaxChunkedPeer = R"(
import pathlib, sys
try:
    import numpy as np
    import ml_dtypes
    import flax.serialization as fs
except ImportError:
    sys.exit(77)

def patterned(dtype, shape):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    pattern = [i % 2 for i in range(n)] if dtype == np.bool_ else [(i * 7 + 3) % 256 for i in range(n)]
    return np.frombuffer(bytes(pattern), dtype=dtype).reshape(shape)

def tree():
    return {"params": {"dense": {"kernel": patterned(ml_dtypes.bfloat16, (9, 11)),
                                 "bias": patterned(np.float32, (11,))},
                       "mask": patterned(np.bool_, (3, 50))},
            "opt": {"0": {"mu": patterned(np.float16, (2, 3, 13))}},
            "list": [patterned(np.int8, (100,)), {"inner": patterned(np.int8, (100,))}],
            "z": patterned(np.complex128, ()),
            "step": 7}

def flat(node, prefix=""):
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
    if items is None:
        return {prefix: node}
    out = {}
    for key, value in items:
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out

failures = []
for path in sorted(pathlib.Path(sys.argv[1]).glob("chunked-*")):
    fs.MAX_CHUNK_SIZE = int(path.name.split("-")[1])
    data = path.read_bytes()
    if data != fs.to_bytes(tree()):
        failures.append(f"{path.name}: flax writes other bytes")
    restored, expected = flat(fs.msgpack_restore(data)), flat(fs.to_state_dict(tree()))
    if sorted(restored) != sorted(expected):
        failures.append(f"{path.name}: leaves {sorted(restored)}")
        continue
    for name, value in expected.items():
        got = restored[name]
        if isinstance(value, np.ndarray):
            if not isinstance(got, np.ndarray) or got.dtype != value.dtype or got.shape != value.shape \
                    or got.tobytes() != value.tobytes():
                failures.append(f"{path.name}: {name} differs: {got!r}")
        elif got != value:
            failures.append(f"{path.name}: {name} is {got!r}")
print("\n".join(failures) if failures else "ok")
sys.exit(1 if failures else 0)
)";

TEST_F(FlaxTest, ChunkedFilesAreFlaxsBytesAndRestoreInFlax) {
  const std::filesystem::path python = std::filesystem::path(CKPT_SOURCE_DIR) / ".venv" / "bin" / "python";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << "no " << python;
  Tree tree = Tree::map();
  Tree& params = tree.set("params", Tree::map());
  Tree& dense = params.set("dense", Tree::map());
  dense.set("kernel", patterned(DType::kBFloat16, {9, 11}));
  dense.set("bias", patterned(DType::kFloat32, {11}));
  params.set("mask", patterned(DType::kBool, {3, 50}));
  tree.set("opt", Tree::map()).set("0", Tree::map()).set("mu", patterned(DType::kFloat16, {2, 3, 13}));
  Tree inner = Tree::map();
  inner.set("inner", patterned(DType::kInt8, {100}));
  Tree list = Tree::list();
  list.push_back(patterned(DType::kInt8, {100}));
  list.push_back(inner);
  tree.set("list", list);
  tree.set("z", patterned(DType::kComplex128, {}));
  tree.set("step", int64_t{7});
  // 64 bytes: some arrays chunked (those in the list too); 8: every array,
  // the complex scalar one element per chunk.
  const auto files = dir_ / "files";
  std::filesystem::create_directories(files);
  for (uint64_t size : {64, 8}) {
    const auto path = files / ("chunked-" + std::to_string(size));
    flax_detail::write_file(path, tree, {}, size);
    EXPECT_TRUE(flax_format().read(path, {}).tree == testing::string_keyed(tree));
  }
  testing::write_file(dir_ / "peer.py", kFlaxChunkedPeer);
  const std::string command = python.string() + " " + (dir_ / "peer.py").string() + " " + files.string() + " > " +
                              (dir_ / "peer.out").string() + " 2>&1";
  const int status = std::system(command.c_str());
  const std::string output = testing::read_file(dir_ / "peer.out");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "flax cannot be imported by " << python;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_EQ(output, "ok\n");
}

TEST_F(FlaxTest, ChunksOfAnySizeAreAccepted) {
  // _unchunk concatenates whatever chunks it finds: so does ckpt. Chunks of
  // 3 + 1 + 2 int16 elements (a size flax would not pick).
  std::string file;
  flax_detail::append_map_header(file, 1);
  flax_detail::append_str(file, "w");
  flax_detail::append_map_header(file, 3);
  flax_detail::append_str(file, "__msgpack_chunked_array__");
  flax_detail::append_bool(file, true);
  flax_detail::append_str(file, "shape");
  flax_detail::append_map_header(file, 2);
  flax_detail::append_str(file, "0");
  flax_detail::append_int(file, 2);
  flax_detail::append_str(file, "1");
  flax_detail::append_int(file, 3);
  flax_detail::append_str(file, "chunks");
  flax_detail::append_map_header(file, 3);
  int16_t next = 0;
  for (int64_t count : {3, 1, 2}) {
    flax_detail::append_str(file, std::to_string(next == 0 ? 0 : next == 3 ? 1 : 2));
    std::string payload;
    flax_detail::append_array_header(payload, 3);
    flax_detail::append_array_header(payload, 1);
    flax_detail::append_int(payload, count);
    flax_detail::append_str(payload, "int16");
    flax_detail::append_bin_header(payload, static_cast<uint64_t>(count) * 2);
    for (int64_t i = 0; i < count; ++i, ++next) payload.append(reinterpret_cast<const char*>(&next), 2);
    flax_detail::append_ext_header(file, flax_detail::kExtNdarray, payload.size());
    file += payload;
  }
  testing::write_file(dir_ / "odd", file);
  const Tree tree = load(dir_ / "odd", {.format = "flax"});
  EXPECT_TRUE(tree.at("w").tensor().equals(arange(DType::kInt16, {2, 3})));
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
