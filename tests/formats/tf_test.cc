// TensorFlow tensor bundles: round trips, names, paths, several shards, and
// the shared samples written by TensorFlow (the state file:
// tf_state_file_test.cc).

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <map>
#include <optional>

#include "ckpt/checkpoint.h"
#include "ckpt/convert.h"
#include "ckpt/error.h"
#include "formats/tf/format.h"
#include "formats/tf/index_table.h"
#include "formats/tf/shard_trailer.h"
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

TEST_F(TfTest, TiedTensorsShareTheirBytes) {
  const Tensor shared = floats({16}, 1);
  Tree tree = Tree::map();
  tree.set("embed", shared);
  tree.set("norm", floats({4}, 0));
  tree.set("head", shared);
  save(dir_ / "tied", tree, {.format = "tf"});
  EXPECT_EQ(fs::file_size(dir_ / "tied.data-00000-of-00001"), 80u + tf_detail::kShardTrailerSize);
  const Tree loaded = load(dir_ / "tied");
  EXPECT_TRUE(loaded == tree);
  EXPECT_TRUE(loaded.at("embed").tensor().same_memory(loaded.at("head").tensor()));
}

// ---- several shards (SaveOptions::max_shard_bytes) ----

// Where the bundle at `prefix` says each key's bytes are: {shard, offset, size}.
struct Placement {
  uint64_t shard = 0, offset = 0, size = 0;
  bool operator==(const Placement&) const = default;
};
std::map<std::string, Placement> placements_of(const fs::path& prefix, uint64_t* num_shards = nullptr) {
  auto index = detail::MappedFile::open(tf_detail::index_path(prefix));
  std::map<std::string, Placement> placements;
  for (const auto& [key, value] : tf_detail::read_index_table(index->bytes(), index->path())) {
    auto fields = tfb::varint_fields(value);
    if (key.empty()) {
      if (num_shards != nullptr) *num_shards = fields[1];
      continue;
    }
    placements[key] = {fields[3], fields[4], fields[5]};
  }
  return placements;
}

// The data files of `prefix` in `dir`, sorted.
std::vector<std::string> shard_files(const testing::TempDir& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const std::string& name : dir.list()) {
    if (name.starts_with(prefix + ".data-")) names.push_back(name);
  }
  return names;
}

// Bytes [offset, offset + size) of shard `shard` of `num_shards` of `prefix`.
std::string stored_bytes(const fs::path& prefix, int num_shards, const Placement& at) {
  const std::string shard = testing::read_file(tf_detail::shard_path(prefix, static_cast<int>(at.shard), num_shards));
  EXPECT_LE(at.offset + at.size, shard.size());
  return shard.substr(at.offset, at.size);
}

std::string bytes_of(const Tensor& tensor) {
  const auto bytes = tensor.bytes();
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST_F(TfTest, MaxShardBytesSplitsTheDataIntoShards) {
  // 40 + 40 bytes fit a 100-byte shard, the third 40 do not; 200 bytes get a
  // shard of their own; the empty tensor stays with the last one.
  Tree tree = Tree::map();
  tree.set("a", floats({10}, 0));
  tree.set("b", floats({10}, 100));
  tree.set("c", floats({10}, 200));
  tree.set("big", floats({50}, 300));
  tree.set("d", floats({2}, 400));
  tree.set("empty", floats({0, 3}, 0));
  tree.set("text", Bytes{"twelve bytes"});
  save(dir_ / "m", tree, {.format = "tf", .max_shard_bytes = 100});
  EXPECT_EQ(shard_files(dir_, "m"), (std::vector<std::string>{"m.data-00000-of-00004", "m.data-00001-of-00004",
                                                               "m.data-00002-of-00004", "m.data-00003-of-00004"}));
  uint64_t num_shards = 0;
  const auto placements = placements_of(dir_ / "m", &num_shards);
  EXPECT_EQ(num_shards, 4u);
  EXPECT_EQ(placements.at("a"), (Placement{0, 0, 40}));
  EXPECT_EQ(placements.at("b"), (Placement{0, 40, 40}));
  EXPECT_EQ(placements.at("c"), (Placement{1, 0, 40}));
  EXPECT_EQ(placements.at("big"), (Placement{2, 0, 200}));
  EXPECT_EQ(placements.at("d"), (Placement{3, 0, 8}));
  EXPECT_EQ(placements.at("empty"), (Placement{3, 8, 0}));
  EXPECT_EQ(placements.at("text"), (Placement{3, 8, 1 + 4 + 12}));  // varint length, length CRC, bytes
  // Each shard: its tensors' bytes, then ckpt's 16-byte trailer (extras).
  EXPECT_EQ(fs::file_size(dir_ / "m.data-00000-of-00004"), 80u + tf_detail::kShardTrailerSize);
  EXPECT_EQ(fs::file_size(dir_ / "m.data-00002-of-00004"), 200u + tf_detail::kShardTrailerSize);
  EXPECT_EQ(fs::file_size(dir_ / "m.data-00003-of-00004"), 25u + tf_detail::kShardTrailerSize);
  // Every entry points at its own tensor's bytes, read here without ckpt's reader.
  for (const char* name : {"a", "b", "c", "big", "d"}) {
    EXPECT_EQ(stored_bytes(dir_ / "m", 4, placements.at(name)), bytes_of(tree.at(name).tensor())) << name;
  }
  EXPECT_TRUE(verify(dir_ / "m").tree == tree);
  // Without extras too (the keys name the tree).
  save(dir_ / "plain", tree, {.format = "tf", .extras = false, .max_shard_bytes = 100});
  EXPECT_EQ(shard_files(dir_, "plain").size(), 4u);
  const Tree plain = verify(dir_ / "plain").tree;
  for (const char* name : {"a", "b", "c", "big", "d", "empty"}) {
    EXPECT_TRUE(plain.at(name).tensor().equals(tree.at(name).tensor())) << name;
  }
}

TEST_F(TfTest, ShardLimitEdges) {
  Tree tree = Tree::map();
  tree.set("a", floats({25}, 0));   // 100 bytes: exactly the limit
  tree.set("b", floats({1}, 0));    // 4 more: a new shard
  tree.set("c", floats({24}, 0));   // 4 + 96 = 100: fits
  save(dir_ / "e", tree, {.format = "tf", .max_shard_bytes = 100});
  auto placements = placements_of(dir_ / "e");
  EXPECT_EQ(placements.at("a"), (Placement{0, 0, 100}));
  EXPECT_EQ(placements.at("b"), (Placement{1, 0, 4}));
  EXPECT_EQ(placements.at("c"), (Placement{1, 4, 96}));
  // A limit of one byte: one shard per tensor.
  save(dir_ / "one", tree, {.format = "tf", .max_shard_bytes = 1});
  EXPECT_EQ(shard_files(dir_, "one").size(), 3u);
  EXPECT_TRUE(load(dir_ / "one") == tree);
  // A limit above the total, and 0 (the default): one shard.
  for (uint64_t limit : {uint64_t{0}, uint64_t{1} << 40}) {
    save(dir_ / "whole", tree, {.format = "tf", .max_shard_bytes = limit});
    EXPECT_EQ(shard_files(dir_, "whole"), (std::vector<std::string>{"whole.data-00000-of-00001"}));
  }
  // A tree without tensor bytes still has its one (empty) shard.
  Tree empty = Tree::map();
  empty.set("step", int64_t{3});
  save(dir_ / "none", empty, {.format = "tf", .max_shard_bytes = 1});
  EXPECT_EQ(shard_files(dir_, "none"), (std::vector<std::string>{"none.data-00000-of-00001"}));
  EXPECT_TRUE(load(dir_ / "none") == empty);
}

// One descriptor at a time: more shards than the process may open at once.
TEST_F(TfTest, ManyMoreShardsThanOpenFilesAllowed) {
  Tree tree = Tree::map();
  for (int i = 0; i < 300; ++i) {
    std::string name = "t";
    name += std::to_string(i);
    tree.set(name, floats({2}, static_cast<float>(i)));
  }
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  rlimit low = before;
  low.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::optional<Error> failure;
  try {
    save(dir_ / "many", tree, {.format = "tf", .max_shard_bytes = 1});
  } catch (const Error& error) {
    failure = error;
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &before), 0);
  ASSERT_FALSE(failure) << failure->what();
  EXPECT_EQ(shard_files(dir_, "many").size(), 300u);
  EXPECT_TRUE(load(dir_ / "many") == tree);
}

TEST_F(TfTest, TiedTensorsPointIntoTheFirstOnesShard) {
  const Tensor shared = floats({16}, 1);
  Tree tree = Tree::map();
  tree.set("embed", shared);
  tree.set("norm", floats({30}, 0));
  tree.set("head", shared);
  save(dir_ / "tied", tree, {.format = "tf", .max_shard_bytes = 64});
  const auto placements = placements_of(dir_ / "tied");
  EXPECT_EQ(placements.at("embed"), (Placement{0, 0, 64}));
  EXPECT_EQ(placements.at("norm"), (Placement{1, 0, 120}));
  EXPECT_EQ(placements.at("head"), placements.at("embed"));
  EXPECT_EQ(shard_files(dir_, "tied").size(), 2u);
  const Tree loaded = verify(dir_ / "tied").tree;
  EXPECT_TRUE(loaded == tree);
  EXPECT_TRUE(loaded.at("embed").tensor().same_memory(loaded.at("head").tensor()));
}

TEST_F(TfTest, ASaveWithAnotherShardCountRemovesTheOldShards) {
  Tree tree = Tree::map();
  for (int i = 0; i < 4; ++i) tree.set("t" + std::to_string(i), floats({8}, static_cast<float>(i)));
  // Files that only look alike stay: another prefix, other name shapes.
  for (const char* name : {"other.data-00000-of-00002", "m.data-00000-of-00002.bak", "m.data-x-of-y",
                           "m.data-0-of-2", "mm.data-00000-of-00002"}) {
    testing::write_file(dir_ / name, "keep");
  }
  save(dir_ / "m", tree, {.format = "tf", .max_shard_bytes = 32});
  const std::vector<std::string> four = {"m.data-00000-of-00004", "m.data-00001-of-00004", "m.data-00002-of-00004",
                                         "m.data-00003-of-00004"};
  std::vector<std::string> data;
  for (const std::string& name : dir_.list()) {
    if (name.starts_with("m.data-000") && !name.ends_with(".bak")) data.push_back(name);
  }
  EXPECT_EQ(data, four);
  save(dir_ / "m", tree, {.format = "tf", .max_shard_bytes = 32});  // the same count: replaced in place
  EXPECT_EQ(shard_files(dir_, "m").size(), 4u + 3u);  // and the look-alikes
  EXPECT_TRUE(load(dir_ / "m") == tree);
  save(dir_ / "m", tree, {.format = "tf"});
  EXPECT_EQ(dir_.list(), (std::vector<std::string>{"m.data-0-of-2", "m.data-00000-of-00001",
                                                   "m.data-00000-of-00002.bak", "m.data-x-of-y", "m.index",
                                                   "mm.data-00000-of-00002", "other.data-00000-of-00002"}));
  EXPECT_TRUE(verify(dir_ / "m").tree == tree);
  save(dir_ / "m", tree, {.format = "tf", .max_shard_bytes = 64});
  EXPECT_FALSE(fs::exists(dir_ / "m.data-00000-of-00001"));
  EXPECT_TRUE(fs::exists(dir_ / "m.data-00001-of-00002"));
  EXPECT_TRUE(fs::exists(dir_ / "m.data-00000-of-00002.bak"));
  EXPECT_TRUE(verify(dir_ / "m").tree == tree);
}

TEST_F(TfTest, AFailedShardedSaveKeepsThePreviousBundle) {
  Tree old_state = Tree::map();
  old_state.set("w", floats({100}, 1));
  save(dir_ / "state", old_state, {.format = "tf"});
  const auto before = dir_.list();
  Tree new_state = Tree::map();
  for (int i = 0; i < 3; ++i) new_state.set("w" + std::to_string(i), floats({1 << 16}, static_cast<float>(i)));
  for (int64_t fail_after : {0, 100, 1 << 18, (1 << 19) + 100}) {
    detail::inject_write_fault_after(fail_after);
    EXPECT_THROW(save(dir_ / "state", new_state, {.format = "tf", .max_shard_bytes = 1 << 18}), Error);
    detail::inject_write_fault_after(-1);
    EXPECT_EQ(dir_.list(), before) << "a temporary or a shard was left behind (fault after " << fail_after << ")";
    EXPECT_TRUE(load(dir_ / "state", {.verify = true}) == old_state);
  }
  save(dir_ / "state", new_state, {.format = "tf", .max_shard_bytes = 1 << 18});
  EXPECT_EQ(shard_files(dir_, "state").size(), 3u);
  EXPECT_TRUE(load(dir_ / "state", {.verify = true}) == new_state);
}

TEST_F(TfTest, TooManyShardsAreRefusedBeforeAnythingIsWritten) {
  Tree list = Tree::list();
  for (int i = 0; i <= tf_detail::kMaxWriteShards; ++i) list.push_back(Tensor::zeros(DType::kUInt8, {1}));
  Tree tree = Tree::map();
  tree.set("bytes", list);
  try {
    save(dir_ / "many", tree, {.format = "tf", .max_shard_bytes = 1});
    ADD_FAILURE() << "wrote " << tf_detail::kMaxWriteShards + 1 << " shards";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
    EXPECT_NE(std::string(error.what()).find("99999 shards"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(dir_.list().empty());
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
    convert(sample_prefix(name), out, {.save = {.format = "tf", .extras = false}});
    EXPECT_EQ(testing::read_file(tf_detail::index_path(out)),
              testing::read_file(tf_detail::index_path(sample_prefix(name))));
    EXPECT_EQ(testing::read_file(tf_detail::shard_path(out, 0, 1)),
              testing::read_file(tf_detail::shard_path(sample_prefix(name), 0, 1)));
  }
}

}  // namespace
}  // namespace ckpt
