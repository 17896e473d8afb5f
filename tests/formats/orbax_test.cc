// The orbax format: OCDBT databases (interior nodes, prefix-compressed
// keys), zarr chunk assembly, fill values, Python values, step directories,
// and the shared sample written by Orbax. Defects: orbax_malformed_test.cc.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/orbax/format.h"
#include "formats/orbax_test_builder.h"
#include "io/deferred_release.h"
#include "support/files.h"
#include "support/peak_memory.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace ocdbt = testing::ocdbt;
using testing::write_file;

const std::filesystem::path kSample = std::filesystem::path(CKPT_SOURCE_DIR) / ".." / "shared" / "interop-samples" /
                                      "orbax-step-1";

std::string raw_zarray(std::string_view dtype, std::string_view shape, std::string_view chunks,
                       std::string_view fill = "null", std::string_view separator = ".") {
  return std::string(R"j({"chunks":)j") + std::string(chunks) + R"j(,"compressor":null,"dimension_separator":")j" +
         std::string(separator) + R"j(","dtype":")j" + std::string(dtype) + R"j(","fill_value":)j" + std::string(fill) +
         R"j(,"filters":null,"order":"C","shape":)j" + std::string(shape) + R"j(,"zarr_format":2})j";
}

// A _METADATA entry for dict keys `keys` (sequence positions when numeric
// and `sequence` is set).
std::string entry(const std::vector<std::string>& keys, std::string_view value_type, bool sequence = false) {
  std::string tuple = "(";
  std::string key_metadata;
  for (size_t i = 0; i < keys.size(); ++i) {
    tuple += (i ? ", '" : "'") + keys[i] + "'";
    const bool is_index = sequence && std::isdigit(static_cast<unsigned char>(keys[i][0]));
    key_metadata += std::string(i ? ", " : "") + R"j({"key": ")j" + keys[i] + R"j(", "key_type": )j" +
                    (is_index ? "1" : "2") + "}";
  }
  tuple += keys.size() == 1 ? ",)" : ")";
  return "\"" + tuple + R"j(": {"key_metadata": [)j" + key_metadata + R"j(], "value_metadata": {"value_type": ")j" +
         std::string(value_type) + R"j(", "skip_deserialize": false}})j";
}

std::string metadata(const std::vector<std::string>& entries) {
  std::string out = R"j({"tree_metadata": {)j";
  for (size_t i = 0; i < entries.size(); ++i) out += (i ? ", " : "") + entries[i];
  return out + "}}";
}

std::string floats(std::initializer_list<float> values) {
  return {reinterpret_cast<const char*>(values.begin()), values.size() * sizeof(float)};
}

class OrbaxTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(OrbaxTest, SharedSampleWrittenByOrbaxReads) {
  if (!std::filesystem::is_directory(kSample)) GTEST_SKIP() << "no shared sample at " << kSample;
  EXPECT_EQ(detect(kSample).id(), "orbax");
  EXPECT_EQ(detect(kSample / "default").id(), "orbax");
  const Contents contents = open(kSample);
  EXPECT_EQ(contents.format, "orbax");
  EXPECT_EQ(contents.entries.size(), 134u);
  const Tensor& step = contents.tree.at("step").tensor();
  EXPECT_EQ(step.dtype(), DType::kInt32);
  EXPECT_TRUE(step.shape().empty());
  EXPECT_EQ(contents.tree.at("params.decoder.cross_attention.key_proj.kernel").tensor().shape(), (Shape{64, 64}));
  EXPECT_TRUE(contents.metadata.at("item_handlers.default").ends_with("StandardCheckpointHandler"));
  // The item folder alone gives the same tree.
  EXPECT_TRUE(load(kSample / "default") == contents.tree);
}

TEST_F(OrbaxTest, UncompressedSingleChunkIsAViewOfTheDataFile) {
  ocdbt::ItemBuilder item;
  item.compress_nodes = false;
  item.write(dir_ / "item");
  const Contents contents = open(dir_ / "item");
  const Tensor& w = contents.tree.at("w").tensor();
  EXPECT_EQ(w.buffer().kind(), StorageKind::kMapped);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(w.bytes().data()), w.nbytes()), item.chunk);
  // A load into memory copies it out.
  EXPECT_EQ(load(dir_ / "item", {.lazy = false}).at("w").tensor().buffer().kind(), StorageKind::kHeap);
}

TEST_F(OrbaxTest, InteriorNodesAndPrefixCompressedKeys) {
  const auto dir = dir_ / "item";
  std::filesystem::create_directories(dir / "d");
  write_file(dir / "_METADATA", metadata({entry({"a"}, "np.ndarray"), entry({"b"}, "np.ndarray")}));
  const std::string chunk_a = floats({1, 2}), chunk_b = floats({3, 4, 5});
  write_file(dir / "d" / "data", chunk_a + chunk_b);
  // Two leaves whose keys are relative to their subtree's prefix "a/" / "b/".
  const std::string leaf_a = ocdbt::envelope(ocdbt::kBtreeMagic, ocdbt::leaf_body({"d/data"}, {
      {".zarray", raw_zarray("<f4", "[2]", "[2]")}, {"0", chunk_a, 0, 0}}), true);
  const std::string leaf_b = ocdbt::envelope(ocdbt::kBtreeMagic, ocdbt::leaf_body({"d/data"}, {
      {".zarray", raw_zarray("<f4", "[3]", "[3]")}, {"0", chunk_b, 0, chunk_a.size()}}));
  write_file(dir / "d" / "leaves", leaf_a + leaf_b);
  const std::string root = ocdbt::envelope(ocdbt::kBtreeMagic, ocdbt::interior_body(1, {"d/leaves"}, {
      {"a/.zarray", 2, 0, 0, leaf_a.size()}, {"b/.zarray", 2, 0, leaf_a.size(), leaf_b.size()}}), true);
  write_file(dir / "d" / "root", root);
  write_file(dir / "manifest.ocdbt",
             ocdbt::envelope(ocdbt::kManifestMagic, ocdbt::manifest_body("d/root", 0, root.size(), 1), true));
  const Tree tree = load(dir);
  EXPECT_EQ(tree.at("a").tensor().values<float>()[1], 2.0f);
  EXPECT_EQ(tree.at("b").tensor().values<float>()[2], 5.0f);
}

TEST_F(OrbaxTest, AMissingChunkWithANullFillValueReadsAsZeros) {
  // ckpt's own writer emits "fill_value": null; a chunk file lost afterwards
  // reads as zeros (the zarr default), in verify and load alike. It used to
  // spin forever: the null fill was an empty tensor repeated over the chunk.
  const auto dir = dir_ / "item";
  std::filesystem::create_directories(dir / "x");
  write_file(dir / "_METADATA", metadata({entry({"x"}, "np.ndarray")}));
  write_file(dir / "x" / ".zarray", raw_zarray("<f4", "[4]", "[2]"));
  write_file(dir / "x" / "0", floats({1.5f, 2.5f}));  // chunk 1 is missing
  const Contents verified = verify(dir);
  const Tree tree = load(dir);
  const auto values = tree.at("x").tensor().values<float>();
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], 2.5f);
  EXPECT_EQ(values[2], 0.0f);
  EXPECT_EQ(values[3], 0.0f);
  EXPECT_EQ(verified.entries.size(), 1u);
}

TEST_F(OrbaxTest, AnArrayOfOnlyFillValueIsOneElementViewedWithStrideZero) {
  // [9e8] float32 (3.6 GB) in chunks of 100000, none written: verify and a
  // lazy open need no memory for it; it used to be filled in full.
  const auto dir = dir_ / "item";
  std::filesystem::create_directories(dir / "x");
  write_file(dir / "_METADATA", metadata({entry({"x"}, "np.ndarray")}));
  write_file(dir / "x" / ".zarray", raw_zarray("<f4", "[900000000]", "[100000]", "1.5"));
  const uint64_t before = testing::reset_peak_rss();
  const Contents verified = verify(dir);
  const Contents opened = open(dir);
  const Tensor& x = opened.tree.at("x").tensor();
  EXPECT_EQ(x.nbytes(), uint64_t{900000000} * 4);
  EXPECT_EQ(verified.entries.at(0).nbytes, x.nbytes());
  const std::optional<StridedView> view = x.strided_view();
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->storage.size(), 4u);
  EXPECT_EQ(view->strides, (std::vector<int64_t>{0}));
  float element = 0;
  std::memcpy(&element, view->storage.data(), 4);
  EXPECT_EQ(element, 1.5f);
  EXPECT_LT(testing::peak_rss_bytes() - before, 200 * testing::kMiB);

  // A small one gathers into the fill value, zeros for null.
  const auto small = dir_ / "small";
  std::filesystem::create_directories(small / "z");
  write_file(small / "_METADATA", metadata({entry({"z"}, "np.ndarray")}));
  write_file(small / "z" / ".zarray", raw_zarray("<i2", "[2,3]", "[1,2]"));
  const Tensor z = load(small).at("z").tensor();
  ASSERT_TRUE(z.strided_view().has_value());
  const Tensor gathered = z.copy();
  EXPECT_EQ(gathered.shape(), (Shape{2, 3}));
  for (int16_t value : gathered.values<int16_t>()) EXPECT_EQ(value, 0);
  const Tensor in_memory = load(small, {.lazy = false}).at("z").tensor();
  EXPECT_FALSE(in_memory.strided_view().has_value());
  EXPECT_TRUE(in_memory.equals(gathered));
}

TEST_F(OrbaxTest, MissingChunksOfAPartlyWrittenArrayCostNoMemory) {
  // [9e8] float32 with only chunk 0 written (a 400 KB directory): verify and
  // a lazy open allocate nothing for it; asked for its bytes, the missing
  // chunks are untouched zero pages. All of it used to cost 3.6 GB.
  const auto dir = dir_ / "item";
  std::filesystem::create_directories(dir / "x");
  write_file(dir / "_METADATA", metadata({entry({"x"}, "np.ndarray")}));
  write_file(dir / "x" / ".zarray", raw_zarray("<f4", "[900000000]", "[100000]"));
  std::vector<float> chunk(100000);
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<float>(i) + 0.5f;
  write_file(dir / "x" / "0", {reinterpret_cast<const char*>(chunk.data()), chunk.size() * 4});
  const uint64_t before = testing::reset_peak_rss();
  verify(dir);
  const Contents opened = open(dir);
  const Tensor& x = opened.tree.at("x").tensor();
  EXPECT_TRUE(x.buffer().deferred());
  EXPECT_FALSE(x.strided_view().has_value());  // not all fill: not a view
  EXPECT_LT(testing::peak_rss_bytes() - before, 200 * testing::kMiB);
  const auto values = x.values<float>();
  ASSERT_EQ(values.size(), 900000000u);
  EXPECT_EQ(values[0], 0.5f);
  EXPECT_EQ(values[99999], 99999.5f);
  EXPECT_EQ(values[100000], 0.0f);
  EXPECT_EQ(values[450000000], 0.0f);
  EXPECT_EQ(values[899999999], 0.0f);
  EXPECT_LT(testing::peak_rss_bytes() - before, 200 * testing::kMiB);
}

TEST_F(OrbaxTest, EdgeChunksAreClippedAndMissingChunksReadAsTheFillValue) {
  // Per-array layout: "x" is int16 [3, 5] in chunks of [2, 2] with "/" as the
  // separator; chunk 1/2 was never written and reads as fill_value 7.
  const auto dir = dir_ / "item";
  std::filesystem::create_directories(dir / "x");
  write_file(dir / "_METADATA", metadata({entry({"x"}, "np.ndarray")}));
  write_file(dir / "x" / ".zarray", raw_zarray("<i2", "[3,5]", "[2,2]", "7", "/"));
  for (int row = 0; row < 2; ++row) {
    for (int column = 0; column < 3; ++column) {
      if (row == 1 && column == 2) continue;
      std::string chunk;
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) {
          const int16_t value = static_cast<int16_t>((row * 2 + i) * 10 + column * 2 + j);  // padding included
          chunk.append(reinterpret_cast<const char*>(&value), 2);
        }
      }
      std::filesystem::create_directories(dir / "x" / std::to_string(row));
      write_file(dir / "x" / std::to_string(row) / std::to_string(column), chunk);
    }
  }
  const Tensor x = load(dir).at("x").tensor();
  ASSERT_EQ(x.shape(), (Shape{3, 5}));
  const auto values = x.values<int16_t>();
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      const int expected = (i == 2 && j == 4) ? 7 : i * 10 + j;
      EXPECT_EQ(values[i * 5 + j], expected) << i << "," << j;
    }
  }
}

TEST_F(OrbaxTest, PythonValuesAndEmptyContainers) {
  const auto dir = dir_ / "item";
  std::filesystem::create_directories(dir);
  std::vector<std::string> entries = {entry({"flag"}, "scalar"), entry({"lr"}, "scalar"), entry({"name"}, "string"),
                                      entry({"nothing"}, "None"), entry({"empty"}, "Dict"), entry({"none_list"}, "List")};
  for (int i = 0; i < 12; ++i) entries.push_back(entry({"steps", std::to_string(i)}, "scalar", true));
  std::sort(entries.begin(), entries.end());  // "('steps', '10')" before "('steps', '2')", as Orbax writes
  write_file(dir / "_METADATA", metadata(entries));
  write_file(dir / "_strings.json", R"j({"name": "run \"7\""})j");
  const auto scalar = [&](const std::string& name, std::string_view dtype, std::string bytes) {
    std::filesystem::create_directories(dir / name);
    write_file(dir / name / ".zarray", raw_zarray(dtype, "[]", "[]"));
    write_file(dir / name / "0", bytes);
  };
  scalar("flag", "|b1", std::string(1, '\1'));
  const double lr = 0.25;
  scalar("lr", "<f8", std::string(reinterpret_cast<const char*>(&lr), 8));
  for (int64_t i = 0; i < 12; ++i) scalar("steps." + std::to_string(i), "<i8", std::string(reinterpret_cast<const char*>(&i), 8));
  const Tree tree = load(dir);
  EXPECT_EQ(tree.at("flag").boolean(), true);
  EXPECT_EQ(tree.at("lr").real(), 0.25);
  EXPECT_EQ(tree.at("name").string(), "run \"7\"");
  EXPECT_TRUE(tree.at("nothing").is_none());
  EXPECT_TRUE(tree.at("empty").is_map());
  EXPECT_TRUE(tree.at("none_list").is_list());
  const Tree& steps = tree.at("steps");
  ASSERT_TRUE(steps.is_list());
  ASSERT_EQ(steps.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(steps[i].integer(), static_cast<int64_t>(i));
}

TEST_F(OrbaxTest, StepDirectoryHoldsOneTreePerItem) {
  const auto step = dir_ / "run" / "3";
  ocdbt::ItemBuilder().write(step / "state");
  ocdbt::ItemBuilder extra;
  extra.chunk = floats({9, 9, 9, 9, 9, 9});
  extra.write(step / "extra");
  write_file(step / "_CHECKPOINT_METADATA",
             R"j({"item_handlers": {"extra": "H", "state": "H"}, "metrics": {"loss": 0.5}, )j"
             R"j("init_timestamp_nsecs": 1, "custom_metadata": {}})j");
  EXPECT_EQ(detect(step).id(), "orbax");
  const Contents contents = open(step);
  ASSERT_EQ(contents.tree.size(), 2u);
  EXPECT_EQ(contents.tree.at("state.w").tensor().values<float>()[1], 1.0f);
  EXPECT_EQ(contents.tree.at("extra.w").tensor().values<float>()[1], 9.0f);
  EXPECT_EQ(contents.metadata.at("item_handlers.state"), "H");
  EXPECT_EQ(contents.metadata.at("metrics.loss"), "0.5");
  EXPECT_EQ(contents.metadata.at("init_timestamp_nsecs"), "1");
}

TEST_F(OrbaxTest, TheDefaultItemIsTheTreeItself) {
  const auto step = dir_ / "1";
  ocdbt::ItemBuilder().write(step / "default");
  write_file(step / "_CHECKPOINT_METADATA", R"j({"item_handlers": {"default": "H"}})j");
  EXPECT_EQ(load(step).at("w").tensor().shape(), (Shape{2, 3}));
}

TEST_F(OrbaxTest, WrittenTreesReadBackWithEveryValueOrbaxHolds) {
  Tree params = Tree::map();
  params.set("kernel", Tensor::from_values<float>(DType::kFloat32, {2, 2}, std::vector<float>{1, 2, 3, 4}));
  params.set("scale", Tensor::zeros(DType::kBFloat16, {}));
  Tree layers = Tree::list();
  for (int i = 0; i < 11; ++i) layers.push_back(Tensor::from_values<int32_t>(DType::kInt32, {1}, std::vector<int32_t>{i}));
  Tree state = Tree::map();
  state.set("params", params);
  state.set("layers", layers);
  state.set("step", int64_t{-3});
  state.set("lr", 0.5);
  state.set("done", true);
  state.set("name", std::string("run \"7\"\n"));
  state.set("nothing", Tree());
  state.set("empty_map", Tree::map());
  state.set("empty_list", Tree::list());
  state.set("zero_size", Tensor::zeros(DType::kFloat16, {3, 0}));
  const auto path = dir_ / "out";
  save(path, state, {.format = "orbax"});
  EXPECT_TRUE(std::filesystem::is_regular_file(path / "_METADATA"));
  EXPECT_TRUE(std::filesystem::is_regular_file(path / "params.kernel" / "0.0"));
  EXPECT_TRUE(std::filesystem::is_regular_file(path / "params.scale" / "0"));
  EXPECT_TRUE(load(path) == state);
  EXPECT_EQ(dir_.list(), std::vector<std::string>{"out"}) << "no temporary left behind";
}

TEST_F(OrbaxTest, SavingOverACheckpointReplacesItWhole) {
  const auto path = dir_ / "out";
  Tree first = Tree::map();
  first.set("a", Tensor::zeros(DType::kFloat32, {2}));
  first.set("b", Tensor::zeros(DType::kFloat32, {2}));
  save(path, first, {.format = "orbax"});
  Tree second = Tree::map();
  second.set("c", Tensor::zeros(DType::kInt8, {4}));
  save(path, second, {.format = "orbax"});
  EXPECT_TRUE(load(path) == second);
  EXPECT_FALSE(std::filesystem::exists(path / "a")) << "an old array survived";
  detail::drain_deferred_releases();  // the old directory is removed off the saving thread
  EXPECT_EQ(dir_.list(), std::vector<std::string>{"out"});
}

TEST_F(OrbaxTest, WriterRefusesWhatOrbaxCannotHold) {
  const auto refuses = [&](const Tree& tree, ErrorCode code, std::string_view fragment, bool extras = true) {
    try {
      save(dir_ / "bad", tree, {.format = "orbax", .extras = extras});
      ADD_FAILURE() << "saved";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), code) << error.what();
      EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir_ / "bad"));
  };
  // Without ckpt's record: what Orbax itself cannot hold.
  Tree bytes = Tree::map();
  bytes.set("blob", Bytes{"\x01"});
  refuses(bytes, ErrorCode::kUnsupported, "raw bytes", false);
  Tree integer_key = Tree::map();
  integer_key.set(int64_t{0}, Tensor::zeros(DType::kFloat32, {1}));
  refuses(integer_key, ErrorCode::kUnsupported, "integer key 0", false);
  // With it too: keys that become one Orbax key.
  Tree both_zeros = Tree::map();
  both_zeros.set(int64_t{0}, Tensor::zeros(DType::kFloat32, {1}));
  both_zeros.set("0", Tensor::zeros(DType::kFloat32, {1}));
  refuses(both_zeros, ErrorCode::kUnsupported, "one key to Orbax");
  Tree colliding = Tree::map();
  Tree inner = Tree::map();
  inner.set("b", Tensor::zeros(DType::kFloat32, {1}));
  colliding.set("a.b", Tensor::zeros(DType::kFloat32, {1}));
  colliding.set("a", inner);
  refuses(colliding, ErrorCode::kUnsupported, "share the Orbax parameter name 'a.b'");
  Tree reserved = Tree::map();
  reserved.set("_METADATA", Tensor::zeros(DType::kFloat32, {1}));
  refuses(reserved, ErrorCode::kUnsupported, "reserves");
  refuses(Tree(Tensor::zeros(DType::kFloat32, {1})), ErrorCode::kUnsupported, "root");
  std::filesystem::create_directories(dir_ / "bad" / "precious");
  try {
    save(dir_ / "bad", Tree::map(), {.format = "orbax"});
    ADD_FAILURE() << "replaced a directory that is not a checkpoint";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
  }
  EXPECT_TRUE(std::filesystem::is_directory(dir_ / "bad" / "precious"));
}

TEST_F(OrbaxTest, NestedTreesRoundTripThroughCkptsRecord) {
  Tree slot = Tree::map();
  slot.set("exp_avg", Tensor::from_values<float>(DType::kFloat32, {2}, std::vector<float>{1.5f, -2}));
  slot.set("step", int64_t{7});
  Tree per_param = Tree::map();
  per_param.set(int64_t{3}, slot);
  Tree groups = Tree::list();
  Tree group = Tree::map();
  group.set("lr", -0.0);
  group.set("params", Tree::list());
  groups.push_back(group);
  Tree state = Tree::map();
  state.set("state", per_param);
  state.set("param_groups", groups);
  state.set("blob", Bytes{std::string("\x00\xff", 2)});
  const auto path = dir_ / "out";
  save(path, state, {.format = "orbax"});
  const Contents contents = open(path);
  EXPECT_TRUE(contents.tree == state);
  EXPECT_EQ(contents.format_version, 1);
  EXPECT_NE(contents.tree.at("state").find(int64_t{3}), nullptr) << "integer key kept";
  EXPECT_EQ(contents.tree.at("blob").kind(), Tree::Kind::kBytes);
  // What Orbax sees (the same checkpoint without the record): the integer key
  // as its text, bytes as None, the rest as it was.
  write_file(path / "_CHECKPOINT_METADATA", R"j({"item_handlers": "H", "custom_metadata": {}})j");
  const Contents plain = open(path);
  EXPECT_EQ(plain.format_version, 0);
  ASSERT_NE(plain.tree.at("state").find(std::string("3")), nullptr);
  EXPECT_EQ(plain.tree.at("state").find(int64_t{3}), nullptr);
  EXPECT_TRUE(plain.tree.at("state.3.exp_avg").tensor().equals(slot.at("exp_avg").tensor()));
  EXPECT_EQ(plain.tree.at("state.3.step").integer(), 7);
  EXPECT_TRUE(plain.tree.at("blob").is_none());
  EXPECT_TRUE(std::signbit(plain.tree.at("param_groups.0.lr").real()));
  // Without extras the record is not written, and the tree is refused.
  try {
    save(dir_ / "plain", state, {.format = "orbax", .extras = false});
    ADD_FAILURE() << "saved integer keys without the record";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
  }
}

// A zstd chunk compressed with a content checksum: damage to the checksum
// passes every structural check and fails only when decoded.
std::string zstd_with_checksum(std::string_view bytes) {
  ZSTD_CCtx* context = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1);
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  out.resize(ZSTD_compress2(context, out.data(), out.size(), bytes.data(), bytes.size()));
  ZSTD_freeCCtx(context);
  return out;
}

TEST_F(OrbaxTest, ZstdChunksAreDecodedWhenFirstUsed) {
  ocdbt::ItemBuilder item;
  const std::string raw = item.chunk;
  item.chunk = zstd_with_checksum(raw);
  item.zarray.replace(item.zarray.find("\"compressor\":null"), 17, R"j("compressor":{"id":"zstd","level":1})j");
  item.write(dir_ / "item");
  const Tree lazy = load(dir_ / "item");
  const Tensor& w = lazy.at("w").tensor();
  EXPECT_TRUE(w.buffer().deferred()) << "decoded on open";
  std::string into(raw.size(), '\0');
  w.read_into(std::as_writable_bytes(std::span(into)));
  EXPECT_EQ(into, raw);
  EXPECT_TRUE(w.buffer().deferred()) << "read_into decodes into the caller's memory";
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(w.bytes().data()), w.nbytes()), raw);
  const Tensor eager = load(dir_ / "item", {.lazy = false}).at("w").tensor();
  EXPECT_EQ(eager.buffer().kind(), StorageKind::kHeap);
  EXPECT_TRUE(eager.equals(w));

  // Damaged data: the lazy open succeeds, the first use fails, as does an
  // open that reads everything.
  item.chunk.back() = static_cast<char>(item.chunk.back() ^ 0x5a);
  std::filesystem::remove_all(dir_ / "bad");
  item.write(dir_ / "bad");
  const Tree damaged = load(dir_ / "bad");
  const auto expect_corrupt = [](const std::function<void()>& body) {
    try {
      body();
      ADD_FAILURE() << "damaged zstd data decoded";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
      EXPECT_NE(error.message().find("zstd chunk does not decode"), std::string::npos) << error.what();
      EXPECT_EQ(error.context().entry, "w/0.0") << error.what();
    }
  };
  expect_corrupt([&] { damaged.at("w").tensor().read_into(std::as_writable_bytes(std::span(into))); });
  expect_corrupt([&] { (void)damaged.at("w").tensor().bytes(); });
  expect_corrupt([&] { load(dir_ / "bad", {.lazy = false}); });
  expect_corrupt([&] { load(dir_ / "bad", {.verify = true}); });
  // A chunk whose frame states another size is refused on open.
  item.chunk = zstd_with_checksum(raw.substr(4));
  std::filesystem::remove_all(dir_ / "short");
  item.write(dir_ / "short");
  try {
    load(dir_ / "short");
    ADD_FAILURE() << "a chunk of the wrong size was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
    EXPECT_NE(error.message().find("decodes to 20 bytes, expected 24"), std::string::npos) << error.what();
  }
}

TEST_F(OrbaxTest, ChunksAlongTheFirstDimensionDecodeInPlace) {
  // int32 [5, 3] in zstd chunks of [2, 3]: chunks 0 and 1 fill rows 0-3, chunk
  // 2 holds row 4 and a row of padding; with fill_value 9 and chunk 1 absent.
  const auto dir = dir_ / "item";
  std::filesystem::create_directories(dir / "x");
  write_file(dir / "_METADATA", metadata({entry({"x"}, "np.ndarray")}));
  std::string zarray = raw_zarray("<i4", "[5,3]", "[2,3]", "9");
  zarray.replace(zarray.find("\"compressor\":null"), 17, R"j("compressor":{"id":"zstd","level":1})j");
  write_file(dir / "x" / ".zarray", zarray);
  for (int chunk : {0, 2}) {
    std::vector<int32_t> values;
    for (int i = 0; i < 6; ++i) values.push_back(chunk * 6 + i);
    write_file(dir / "x" / (std::to_string(chunk) + ".0"),
               ocdbt::zstd({reinterpret_cast<const char*>(values.data()), values.size() * 4}));
  }
  std::vector<int32_t> expected;
  for (int i = 0; i < 15; ++i) expected.push_back(i >= 6 && i < 12 ? 9 : i);
  const Tensor lazy = load(dir).at("x").tensor();
  std::vector<int32_t> into(15);
  lazy.read_into(std::as_writable_bytes(std::span(into)));
  EXPECT_EQ(into, expected);
  const Tensor eager = load(dir, {.lazy = false}).at("x").tensor();
  const auto values = eager.values<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(values.begin(), values.end()), expected);
}

TEST_F(OrbaxTest, DetectPathClaimsOnlyOrbaxDirectories) {
  EXPECT_FALSE(orbax_format().detect_path(dir_ / "missing"));
  EXPECT_FALSE(orbax_format().detect_path(dir_.path()));
  write_file(dir_ / "file", "x");
  EXPECT_FALSE(orbax_format().detect_path(dir_ / "file"));
  try {
    orbax_format().read(dir_.path(), {});
    ADD_FAILURE() << "an empty directory was read";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
  }
}

}  // namespace
}  // namespace ckpt
