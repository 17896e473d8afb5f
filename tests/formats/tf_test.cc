// TensorFlow tensor bundles: round trips, names, paths, the state file,
// several shards, and the shared samples written by TensorFlow.

#include <gtest/gtest.h>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/tf/index_table.h"
#include "formats/tf/tf_format.h"
#include "formats/tf_test_builder.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
namespace tfb = testing::tf;

const fs::path kSamples = fs::path(CKPT_SOURCE_DIR) / ".." / "shared" / "interop-samples";

Tensor floats(Shape shape, float start) {
  Tensor tensor = Tensor::empty(DType::kFloat32, std::move(shape));
  auto* values = reinterpret_cast<float*>(tensor.mutable_bytes().data());
  for (uint64_t i = 0; i < tensor.numel(); ++i) values[i] = start + static_cast<float>(i);
  return tensor;
}

// The keys of the bundle at `prefix`, in index order (the header excluded).
std::vector<std::string> keys_of(const fs::path& prefix) {
  auto index = detail::MappedFile::open(tf_detail::index_path(prefix));
  std::vector<std::string> keys;
  for (const auto& [key, value] : tf_detail::read_index_table(index->bytes(), index->path())) {
    if (!key.empty()) keys.push_back(key);
  }
  return keys;
}

class TfTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(TfTest, WritesPrefixIndexAndOneShard) {
  Tree tree = Tree::map();
  tree.set("w", floats({2, 3}, 1));
  save(dir_ / "model.ckpt-7", tree, {.format = "tf"});
  EXPECT_EQ(dir_.list(), (std::vector<std::string>{"model.ckpt-7.data-00000-of-00001", "model.ckpt-7.index"}));
  // The prefix, the .index file and a path with ".index" all name it.
  EXPECT_TRUE(load(dir_ / "model.ckpt-7") == tree);
  EXPECT_TRUE(load(dir_ / "model.ckpt-7.index") == tree);
  EXPECT_EQ(detect(dir_ / "model.ckpt-7").id(), "tf");
  EXPECT_EQ(detect(dir_ / "model.ckpt-7.index").id(), "tf");
  save(dir_ / "other.index", tree, {.format = "tf"});
  EXPECT_TRUE(fs::exists(dir_ / "other.data-00000-of-00001"));
}

TEST_F(TfTest, AFailedSaveKeepsThePreviousBundle) {
  Tree old_state = Tree::map();
  old_state.set("w", floats({100}, 1));
  save(dir_ / "state", old_state, {.format = "tf"});
  const auto before = dir_.list();
  const std::string index = testing::read_file(dir_ / "state.index");
  Tree new_state = Tree::map();
  new_state.set("w", floats({1 << 18}, 2));
  for (int64_t fail_after : {0, 100, 1 << 19}) {
    detail::inject_write_fault_after(fail_after);
    EXPECT_THROW(save(dir_ / "state", new_state, {.format = "tf"}), Error);
    detail::inject_write_fault_after(-1);
    EXPECT_EQ(dir_.list(), before) << "a temporary was left behind";
    EXPECT_EQ(testing::read_file(dir_ / "state.index"), index);
    EXPECT_TRUE(load(dir_ / "state", {.verify = true}) == old_state);
  }
}

TEST_F(TfTest, TensorsViewTheMappedShard) {
  Tree tree = Tree::map();
  tree.set("w", floats({64}, 0));
  save(dir_ / "z", tree, {.format = "tf"});
  const Tree loaded = load(dir_ / "z");
  EXPECT_EQ(loaded.at("w").tensor().buffer().kind(), StorageKind::kMapped);
}

TEST_F(TfTest, StringsBytesAndStringListsRoundTrip) {
  Tree tree = Tree::map();
  tree.set("blob", Bytes{std::string("\x00\xff\x01", 3)});
  Tree names = Tree::list();
  for (const char* name : {"a", "", "ccc"}) names.push_back(Bytes{name});
  tree.set("names", names);
  Tree grid = Tree::list();
  for (int row = 0; row < 2; ++row) {
    Tree cells = Tree::list();
    for (int col = 0; col < 3; ++col) cells.push_back(Bytes{std::to_string(row * 3 + col)});
    grid.push_back(cells);
  }
  tree.set("grid", grid);
  save(dir_ / "s", tree, {.format = "tf"});
  EXPECT_TRUE(load(dir_ / "s") == tree);
  EXPECT_NO_THROW(verify(dir_ / "s"));
  // A string leaf is stored as DT_STRING and reads back as Bytes.
  Tree text = Tree::map();
  text.set("note", std::string("hello"));
  save(dir_ / "t", text, {.format = "tf", .extras = false});
  EXPECT_EQ(load(dir_ / "t").at("note").bytes().data, "hello");
  // With extras (the default) ckpt's skeleton keeps it a string.
  save(dir_ / "u", text, {.format = "tf"});
  EXPECT_EQ(load(dir_ / "u").at("note").string(), "hello");
}

TEST_F(TfTest, WithoutExtrasWhatABundleCannotHoldIsRefusedByName) {
  for (Tree leaf : {Tree(int64_t{3}), Tree(1.5), Tree(true), Tree()}) {
    Tree inner = Tree::map();
    inner.set("step", leaf);
    Tree tree = Tree::map();
    tree.set("train", inner);
    try {
      save(dir_ / "bad", tree, {.format = "tf", .extras = false});
      ADD_FAILURE() << "saved a " << tree_kind_name(leaf.kind());
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
      EXPECT_EQ(error.context().entry, "train.step") << error.what();
    }
  }
  Tree ragged = Tree::list();
  ragged.push_back(Bytes{"a"});
  Tree inner = Tree::list();
  inner.push_back(Bytes{"b"});
  ragged.push_back(inner);
  Tree tree = Tree::map();
  tree.set("r", ragged);
  EXPECT_THROW(save(dir_ / "bad", tree, {.format = "tf", .extras = false}), Error);
  EXPECT_NO_THROW(save(dir_ / "good", tree, {.format = "tf"})) << "extras keep any tree";
  EXPECT_TRUE(load(dir_ / "good") == tree);
  EXPECT_FALSE(fs::exists(dir_ / "bad.index"));
}

TEST_F(TfTest, ObjectBasedNamesAreReadableAndExact) {
  Tree kernel = Tree::map();
  kernel.set("VARIABLE_VALUE", floats({2, 2}, 0));
  Tree slots = Tree::map();
  Tree m = Tree::map();
  m.set("VARIABLE_VALUE", floats({2, 2}, 10));
  Tree optimizer = Tree::map();
  optimizer.set("m", m);
  slots.set("optimizer", optimizer);
  kernel.set(".OPTIMIZER_SLOT", slots);
  Tree layer = Tree::map();
  layer.set("kernel", kernel);
  Tree tree = Tree::map();
  tree.set("dense", layer);
  tree.set("_CHECKPOINTABLE_OBJECT_GRAPH", Bytes{"graph bytes"});
  save(dir_ / "obj", tree, {.format = "tf"});
  EXPECT_EQ(keys_of(dir_ / "obj"), (std::vector<std::string>{
                                       "_CHECKPOINTABLE_OBJECT_GRAPH",
                                       "dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                                       "dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
                                   }));
  const Contents contents = open(dir_ / "obj");
  EXPECT_TRUE(contents.tree == tree);
  EXPECT_EQ(contents.entries.front().name, "dense.kernel.VARIABLE_VALUE");
  EXPECT_EQ(contents.entries.back().name, "dense.kernel..OPTIMIZER_SLOT.optimizer.m.VARIABLE_VALUE");
}

TEST_F(TfTest, V1NamesSplitAtSlashesUnlessALeafIsAlsoAFolder) {
  const std::string data(8, '\0');
  const tfb::EntrySpec scalar{.dtype = 1, .shape = {}, .size = 4, .crc = tfb::masked_crc_of(std::string(4, '\0'))};
  tfb::write_bundle(dir_ / "v1", {{"", tfb::header()}, {"dense/bias", tfb::entry(scalar)},
                                  {"dense/kernel", tfb::entry(scalar)}},
                    {data});
  const Tree split = load(dir_ / "v1");
  EXPECT_NE(split.find_path("dense.kernel"), nullptr);
  EXPECT_NE(split.at("dense").find("bias"), nullptr);
  // tf.compat.v1 slots: "dense/kernel" is a leaf and a folder: flat keys.
  tfb::EntrySpec second = scalar;
  second.offset = 4;
  tfb::write_bundle(dir_ / "adam", {{"", tfb::header()}, {"dense/kernel", tfb::entry(scalar)},
                                    {"dense/kernel/Adam", tfb::entry(second)}},
                    {data});
  const Tree flat = load(dir_ / "adam");
  EXPECT_NE(flat.find("dense/kernel"), nullptr);
  EXPECT_NE(flat.find("dense/kernel/Adam"), nullptr);
  save(dir_ / "adam2", flat, {.format = "tf"});
  EXPECT_EQ(keys_of(dir_ / "adam2"), (std::vector<std::string>{"dense/kernel", "dense/kernel/Adam"}));
}

TEST_F(TfTest, SeveralShards) {
  const std::string first = std::string(8, '\x01');
  const std::string second = std::string(4, '\x02');
  tfb::write_bundle(dir_ / "multi",
                    {{"", tfb::header({.num_shards = 2})},
                     {"a", tfb::entry({.dtype = 1, .shape = {2}, .size = 8, .crc = tfb::masked_crc_of(first)})},
                     {"b", tfb::entry({.dtype = 3, .shape = {1}, .shard = 1, .size = 4,
                                       .crc = tfb::masked_crc_of(second)})}},
                    {first, second});
  const Contents contents = verify(dir_ / "multi");
  EXPECT_EQ(contents.tree.at("a").tensor().bytes().size(), 8u);
  EXPECT_EQ(contents.tree.at("b").tensor().dtype(), DType::kInt32);
  EXPECT_EQ(contents.checksum, ChecksumKind::kCrc32c);
  EXPECT_EQ(contents.entries.size(), 2u);
}

TEST_F(TfTest, SlicedVariablesAreAssembled) {
  // A [3, 2] int32 variable cut into rows [0, 2) and [2, 3), as TensorFlow's
  // sharding policies write it: the full entry lists the slices, each slice
  // is an entry under EncodeTensorNameSlice(name, slice).
  const std::string name = "v";
  const std::string rows01("\x01\0\0\0\x02\0\0\0\x03\0\0\0\x04\0\0\0", 16);
  const std::string row2("\x05\0\0\0\x06\0\0\0", 8);
  auto slice_key = [&](char start, char length) {
    // OrderedCode: 0, the name, rank 1... here rank 2: start/length per dim (-1: all).
    return std::string("\0", 1) + name + std::string("\0\x01", 2) + "\x01\x02" + std::string(1, start) +
           std::string(1, length) + "\x80\x7f";
  };
  auto extent = [](int64_t start, int64_t length) {
    std::string fields = start != 0 ? tfb::field_varint(1, static_cast<uint64_t>(start)) : "";
    if (length >= 0) fields += tfb::field_varint(2, static_cast<uint64_t>(length));
    return tfb::field_bytes(1, fields);
  };
  const std::string slices = tfb::field_bytes(7, extent(0, 2) + extent(0, -1)) + tfb::field_bytes(7, extent(2, 1) + extent(0, -1));
  tfb::write_bundle(
      dir_ / "sliced",
      {{"", tfb::header()},
       {slice_key('\x80', '\x82'), tfb::entry({.dtype = 3, .shape = {2, 2}, .size = 16, .crc = tfb::masked_crc_of(rows01)})},
       {slice_key('\x82', '\x81'), tfb::entry({.dtype = 3, .shape = {1, 2}, .offset = 16, .size = 8,
                                                .crc = tfb::masked_crc_of(row2)})},
       {name, tfb::entry({.dtype = 3, .shape = {3, 2}, .extra = slices})}},
      {rows01 + row2});
  const Tree tree = verify(dir_ / "sliced").tree;
  const auto values = tree.at("v").tensor().values<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(values.begin(), values.end()), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(tree.size(), 1u) << "slice entries are no leaves of their own";
}

TEST_F(TfTest, DirectoryWithAStateFile) {
  Tree tree = Tree::map();
  tree.set("v", floats({3}, 5));
  save(dir_ / "ckpt-1", tree, {.format = "tf"});
  EXPECT_FALSE(fs::exists(dir_ / "checkpoint")) << "no state file is created unasked";
  testing::write_file(dir_ / "checkpoint",
                      "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n");
  EXPECT_EQ(detect(dir_.path()).id(), "tf");
  EXPECT_TRUE(load(dir_.path()) == tree);
  // A save beside an existing state file updates it.
  Tree newer = Tree::map();
  newer.set("v", floats({3}, 50));
  save(dir_ / "ckpt-2", newer, {.format = "tf"});
  const std::string state = testing::read_file(dir_ / "checkpoint");
  EXPECT_NE(state.find("model_checkpoint_path: \"ckpt-2\""), std::string::npos) << state;
  EXPECT_NE(state.find("all_model_checkpoint_paths: \"ckpt-1\""), std::string::npos) << state;
  EXPECT_TRUE(load(dir_.path()) == newer);
}

TEST_F(TfTest, TiedTensorsShareTheirBytes) {
  const Tensor shared = floats({16}, 1);
  Tree tree = Tree::map();
  tree.set("embed", shared);
  tree.set("norm", floats({4}, 0));
  tree.set("head", shared);
  save(dir_ / "tied", tree, {.format = "tf"});
  EXPECT_EQ(fs::file_size(dir_ / "tied.data-00000-of-00001"), 80u);
  const Tree loaded = load(dir_ / "tied");
  EXPECT_TRUE(loaded == tree);
  EXPECT_TRUE(loaded.at("embed").tensor().same_memory(loaded.at("head").tensor()));
}

// ---- the samples written by TensorFlow ----

fs::path sample_prefix(const char* name) { return kSamples / name / "variables" / "variables"; }

TEST_F(TfTest, SamplesReadAndVerify) {
  if (!fs::exists(kSamples)) GTEST_SKIP() << "no shared interop samples at " << kSamples;
  const Contents keras = verify(sample_prefix("tf-keras-single-input"));
  EXPECT_EQ(keras.format, "tf");
  const Tensor& kernel = keras.tree.at("layer_with_weights-0.kernel.VARIABLE_VALUE").tensor();
  EXPECT_EQ(kernel.shape(), (Shape{5, 5}));
  EXPECT_EQ(keras.tree.at("layer_with_weights-0.kernel..OPTIMIZER_SLOT.optimizer.m.VARIABLE_VALUE").tensor().shape(),
            (Shape{5, 5}));
  EXPECT_EQ(keras.tree.at("optimizer.iter.VARIABLE_VALUE").tensor().dtype(), DType::kInt64);
  EXPECT_EQ(keras.tree.at("_CHECKPOINTABLE_OBJECT_GRAPH").bytes().data.size(), 4647u) << "string decoded";
  const Tree v1 = load(sample_prefix("tf-regression-model"));
  EXPECT_EQ(v1.at("w").tensor().shape(), (Shape{1}));
  // A SavedModel directory names its variables bundle.
  EXPECT_EQ(detect(kSamples / "tf-regression-savedmodel").id(), "tf");
  EXPECT_EQ(load(kSamples / "tf-regression-savedmodel").at("w.VARIABLE_VALUE").tensor().shape(), (Shape{1}));
}

TEST_F(TfTest, SampleIndexesAreRebuiltByteForByte) {
  if (!fs::exists(kSamples)) GTEST_SKIP() << "no shared interop samples at " << kSamples;
  for (const char* name : {"tf-keras-single-input", "tf-regression-model", "tf-regression-savedmodel"}) {
    SCOPED_TRACE(name);
    const fs::path index = tf_detail::index_path(sample_prefix(name));
    auto mapped = detail::MappedFile::open(index);
    const auto records = tf_detail::read_index_table(mapped->bytes(), index);
    EXPECT_EQ(tf_detail::build_index_table(records), testing::read_file(index));
  }
}

TEST_F(TfTest, SamplesWhoseLayoutIsTreeOrderAreRewrittenByteForByte) {
  if (!fs::exists(kSamples)) GTEST_SKIP() << "no shared interop samples at " << kSamples;
  // Their tensors lie in the data file in an order that the tree keeps
  // (grouped by object), so ckpt's writer, without extras, gives TF's bytes.
  for (const char* name : {"tf-regression-model", "tf-regression-savedmodel"}) {
    SCOPED_TRACE(name);
    const fs::path out = dir_ / name;
    convert(sample_prefix(name), out, {.format = "tf", .extras = false});
    EXPECT_EQ(testing::read_file(tf_detail::index_path(out)),
              testing::read_file(tf_detail::index_path(sample_prefix(name))));
    EXPECT_EQ(testing::read_file(tf_detail::shard_path(out, 0, 1)),
              testing::read_file(tf_detail::shard_path(sample_prefix(name), 0, 1)));
  }
}

}  // namespace
}  // namespace ckpt
