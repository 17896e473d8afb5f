// One conformance suite that every registered format runs (like tensorstore's
// key-value store conformance tests): whatever a format can hold must come
// back bit-exact through ckpt::save / ckpt::load, and a second save of what
// was loaded must give the same bytes.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "support/files.h"
#include "support/random_tensor.h"
#include "support/string_keyed.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::checkpoint_files;
using testing::random_tensor;
using testing::read_file;
using testing::string_keyed;

class ConformanceTest : public ::testing::TestWithParam<const Format*> {
 protected:
  const Format& format() const { return *GetParam(); }
  FormatCapabilities caps() const { return format().capabilities(); }
  std::filesystem::path file(const std::string& stem) const {
    const auto extensions = format().extensions();
    return dir_ / (stem + std::string(extensions.empty() ? "" : extensions.front()));
  }

  // Saves, loads, checks equality (with lists and integer keys as the
  // format keeps them: string_keyed() where it lacks lists_and_int_keys),
  // saves the loaded tree again and checks the bytes are identical (all
  // ckpt writers are deterministic). The second file has the same name in
  // another folder: torch files name their archive folder after the file.
  Tree round_trip(const Tree& tree, const std::string& stem = "x") {
    const auto path = file(stem);
    save(path, tree, {.format = std::string(format().id())});
    Tree loaded = load(path);
    const Tree expected = caps().lists_and_int_keys ? tree : string_keyed(tree);
    EXPECT_TRUE(loaded == expected) << format().id() << ": tree differs after a round trip";
    std::filesystem::create_directories(dir_ / "again");
    const auto again = dir_ / "again" / path.filename();
    save(again, loaded, {.format = std::string(format().id())});
    EXPECT_EQ(checkpoint_files(path), checkpoint_files(again)) << format().id() << ": second save differs";
    return loaded;
  }

  // Wraps `tensor` as the format's simplest container.
  Tree holder(const std::string& name, Tensor tensor) const {
    if (caps().single_tensor) return Tree(std::move(tensor));
    Tree tree = Tree::map();
    tree.set(name, std::move(tensor));
    return tree;
  }

  testing::TempDir dir_;
};

TEST_P(ConformanceTest, EveryDTypeTheFormatHolds) {
  if (!caps().write) GTEST_SKIP() << "read-only format";
  uint32_t seed = 1;
  for (DType dtype : format().dtypes()) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    round_trip(holder("t", random_tensor(dtype, {3, 5}, seed++)), std::string(dtype_name(dtype)));
  }
}

TEST_P(ConformanceTest, ZeroDimensionalEmptyAndZeroSizeTensors) {
  if (!caps().write) GTEST_SKIP() << "read-only format";
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{1, 1, 1, 1, 1}}) {
    round_trip(holder("t", random_tensor(DType::kFloat32, shape, 7)));
  }
}

TEST_P(ConformanceTest, UnicodeAndDottedNames) {
  if (!caps().write || caps().single_tensor) GTEST_SKIP() << "format holds no names";
  Tree tree = Tree::map();
  tree.set("encoder.layers.0.weight", random_tensor(DType::kFloat32, {2, 2}, 1));
  tree.set("décodeur.层.0", random_tensor(DType::kFloat16, {3}, 2));
  tree.set("emoji 🙂 name", random_tensor(DType::kInt32, {1}, 3));
  Tree loaded = round_trip(tree);
  EXPECT_TRUE(loaded.at("décodeur.层.0").tensor().equals(tree.at("décodeur.层.0").tensor()));
}

TEST_P(ConformanceTest, NestedTreesWithEveryLeafKind) {
  if (!caps().write || !caps().nested_tree) GTEST_SKIP() << "format holds flat tensor maps only";
  Tree model = Tree::map();
  model.set("layer.0.weight", random_tensor(DType::kFloat32, {4, 3}, 1));
  model.set("layer.0.bias", random_tensor(DType::kBFloat16, {4}, 2));
  Tree slot = Tree::map();
  slot.set("step", random_tensor(DType::kFloat32, {}, 3));
  slot.set("exp_avg", random_tensor(DType::kFloat32, {4, 3}, 4));
  Tree per_param = Tree::map();
  per_param.set(int64_t{0}, slot);
  Tree group = Tree::map();
  group.set("lr", 0.001);
  Tree params = Tree::list();
  params.push_back(int64_t{0});
  params.push_back(int64_t{1});
  group.set("params", params);
  group.set("nesterov", false);
  Tree groups = Tree::list();
  groups.push_back(group);
  Tree optimizer = Tree::map();
  optimizer.set("state", per_param);
  optimizer.set("param_groups", groups);
  Tree state = Tree::map();
  state.set("model", model);
  state.set("optimizer", optimizer);
  state.set("epoch", int64_t{3});
  state.set("big", int64_t{-9223372036854775807 - 1});
  state.set("nan", std::numeric_limits<double>::quiet_NaN());
  state.set("neg_zero", -0.0);
  state.set("name", std::string("run \"7\"\n"));
  state.set("blob", Bytes{std::string("\x00\xff\x10", 3)});
  state.set("nothing", Tree());
  state.set("empty_map", Tree::map());
  state.set("empty_list", Tree::list());
  Tree loaded = round_trip(state);
  EXPECT_EQ(loaded.at("optimizer.param_groups.0.lr").real(), 0.001);
  if (caps().lists_and_int_keys) {
    EXPECT_NE(loaded.at("optimizer.state").find(int64_t{0}), nullptr) << "integer key kept";
    EXPECT_TRUE(loaded.at("optimizer.param_groups").is_list()) << "list kept";
  } else {
    EXPECT_NE(loaded.at("optimizer.state").find(std::string("0")), nullptr) << "integer key as a string";
    EXPECT_TRUE(loaded.at("optimizer.param_groups").is_map()) << "list as a map";
    EXPECT_TRUE(loaded.at("empty_list").is_map()) << "empty list as an empty map";
  }
}

// An integer key and a string key that print the same are never merged:
// where the format keeps integer keys they come back apart (or the save is
// refused, as TF bundles and Orbax, which key leaves by printed names, do);
// where it writes keys as strings the save is refused.
TEST_P(ConformanceTest, IntegerAndStringKeysThatPrintTheSame) {
  if (!caps().write || !caps().nested_tree) GTEST_SKIP() << "format holds flat tensor maps only";
  Tree tree = Tree::map();
  tree.set(int64_t{1}, random_tensor(DType::kFloat32, {2}, 1));
  tree.set(std::string("1"), random_tensor(DType::kFloat32, {2}, 2));
  if (caps().lists_and_int_keys) {
    try {
      save(file("x"), tree, {.format = std::string(format().id())});
    } catch (const Error& error) {
      GTEST_SKIP() << format().id() << " refuses the two keys: " << error.what();
    }
    round_trip(tree);
    return;
  }
  try {
    save(file("x"), tree, {.format = std::string(format().id())});
    ADD_FAILURE() << format().id() << " saved the keys 1 and \"1\" as one";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
  }
}

TEST_P(ConformanceTest, CollidingNamesRoundTrip) {
  if (!caps().write || !caps().nested_tree) GTEST_SKIP() << "format holds flat tensor maps only";
  Tree inner = Tree::map();
  inner.set("b", random_tensor(DType::kFloat32, {2}, 1));
  Tree tree = Tree::map();
  tree.set("a.b", random_tensor(DType::kFloat32, {2}, 2));
  tree.set("a", inner);
  if (!caps().colliding_names) {
    // The format names a leaf by its keys joined with "." (Orbax: an
    // array's folder or key prefix): both leaves would be "a.b".
    try {
      save(file("x"), tree, {.format = std::string(format().id())});
      ADD_FAILURE() << format().id() << " saved two leaves named 'a.b'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
    }
    return;
  }
  round_trip(tree);
}

TEST_P(ConformanceTest, TenThousandTensors) {
  if (!caps().write || caps().single_tensor) GTEST_SKIP() << "format holds one tensor";
  // A format with files of its own per tensor (Orbax: a directory and three
  // files per array) gets 1,000 (30,000 file creations per save take
  // minutes on a slow file system).
  const int count = caps().file_per_tensor ? 1000 : 10000;
  Tree tree = Tree::map();
  for (int i = 0; i < count; ++i) {
    tree.set("layers." + std::to_string(i) + ".w", random_tensor(DType::kFloat32, {3}, static_cast<uint32_t>(i)));
  }
  Tree loaded = round_trip(tree);
  EXPECT_EQ(loaded.tensor_leaves().size(), static_cast<size_t>(count));
}

// Every format that holds several tensors stores tied tensors
// (Tensor::same_memory) once and loads them back tied.
TEST_P(ConformanceTest, TiedTensorsAreStoredOnceAndLoadTied) {
  if (!caps().write || caps().single_tensor) GTEST_SKIP() << "format holds one tensor";
  const Tensor shared = random_tensor(DType::kFloat32, {64, 32}, 9);
  Tree tree = Tree::map();
  tree.set("embed.weight", shared);
  tree.set("norm.weight", random_tensor(DType::kFloat32, {32}, 10));
  tree.set("lm_head.weight", shared);
  const Tree loaded = round_trip(tree, "tied");
  if (!caps().ties) {
    // A directory of one file per array (Orbax) has no way to share bytes
    // between leaves: the round trip is all there is to check.
    EXPECT_TRUE(caps().file_per_tensor) << format().id() << " declares no ties but could keep them";
    GTEST_SKIP() << format().id() << " stores each leaf in its own file";
  }
  const Tensor& embed = loaded.at("embed.weight").tensor();
  uint64_t size = 0;  // all its files: a directory's (hf_sharded, dcp) too
  for (const auto& [name, bytes] : checkpoint_files(file("tied"))) size += bytes.size();
  EXPECT_FALSE(embed.same_memory(loaded.at("norm.weight").tensor()));
  EXPECT_TRUE(embed.same_memory(loaded.at("lm_head.weight").tensor())) << format().id() << ": tie lost";
  EXPECT_LT(size, 2 * shared.nbytes()) << format().id() << ": the tied bytes are stored twice";
  const Tree in_memory = load(file("tied"), {.lazy = false});
  EXPECT_TRUE(in_memory.at("embed.weight").tensor().same_memory(in_memory.at("lm_head.weight").tensor()))
      << format().id() << ": tie lost by a load into memory";
}

// SaveOptions::max_shard_bytes splits the data of a format that declares
// shards, and changes nothing for the others.
TEST_P(ConformanceTest, MaxShardBytesSplitsExactlyTheFormatsWithShards) {
  if (!caps().write || caps().single_tensor) GTEST_SKIP() << "format holds one tensor";
  Tree tree = Tree::map();
  for (int i = 0; i < 3; ++i) tree.set("w" + std::to_string(i), random_tensor(DType::kFloat32, {64}, 20 + i));
  std::filesystem::create_directories(dir_ / "whole");
  std::filesystem::create_directories(dir_ / "split");
  const std::string id(format().id());
  save(dir_ / "whole" / file("x").filename(), tree, {.format = id});
  save(dir_ / "split" / file("x").filename(), tree, {.format = id, .max_shard_bytes = 256});
  const auto whole = checkpoint_files(dir_ / "whole" / file("x").filename());
  const auto split = checkpoint_files(dir_ / "split" / file("x").filename());
  if (caps().shards) {
    EXPECT_GT(split.size(), whole.size()) << id << ": no more files with max_shard_bytes";
  } else {
    EXPECT_EQ(split, whole) << id << " does not declare shards, yet max_shard_bytes changed its files";
  }
  EXPECT_TRUE(load(dir_ / "split" / file("x").filename()) == tree);
}

// SaveOptions::state_file creates a state file beside the checkpoint for a
// format that declares one (kUpdate), never for the others, and never with
// kLeave.
TEST_P(ConformanceTest, StateFilePolicyAddsAFileOnlyWhereTheFormatKeepsOne) {
  if (!caps().write) GTEST_SKIP() << "read-only format";
  const Tree tree = holder("t", random_tensor(DType::kInt32, {4}, 30));
  const std::string id(format().id());
  const auto entries = [](const std::filesystem::path& directory) {
    std::map<std::string, std::string> files;
    for (const auto& item : std::filesystem::directory_iterator(directory)) {
      files[item.path().filename().string()] = item.is_regular_file() ? read_file(item.path()) : "(directory)";
    }
    return files;
  };
  for (const auto& [name, policy] : {std::pair{"leave", StateFilePolicy::kLeave},
                                     std::pair{"if_present", StateFilePolicy::kIfPresent},
                                     std::pair{"update", StateFilePolicy::kUpdate}}) {
    std::filesystem::create_directories(dir_ / name);
    save(dir_ / name / file("x").filename(), tree, {.format = id, .state_file = policy});
  }
  const auto left = entries(dir_ / "leave");
  EXPECT_EQ(entries(dir_ / "if_present"), left) << id << ": a fresh directory gets no state file unasked";
  auto updated = entries(dir_ / "update");
  if (caps().state_file) {
    EXPECT_EQ(updated.size(), left.size() + 1) << id << ": kUpdate wrote no state file";
    EXPECT_TRUE(load(dir_ / "update") == tree) << id << ": the state file names the checkpoint";
  } else {
    EXPECT_EQ(updated, left) << id << " declares no state file, yet state_file changed its directory";
  }
}

TEST_P(ConformanceTest, DetectsItsOwnFilesWhateverTheName) {
  if (!caps().write) GTEST_SKIP() << "read-only format";
  const auto path = dir_ / "no_extension";
  save(path, holder("t", random_tensor(DType::kInt64, {2}, 5)), {.format = std::string(format().id())});
  EXPECT_EQ(detect(path).id(), format().id());
}

TEST_P(ConformanceTest, LoadedTensorsOutliveNothingButThemselves) {
  if (!caps().write) GTEST_SKIP() << "read-only format";
  const Tensor original = random_tensor(DType::kFloat64, {64}, 11);
  const auto path = file("life");
  save(path, holder("t", original), {.format = std::string(format().id())});
  Tensor kept;
  {
    Tree loaded = load(path);
    kept = caps().single_tensor ? loaded.tensor() : loaded.at("t").tensor();
  }
  EXPECT_TRUE(kept.equals(original));
}

TEST_P(ConformanceTest, TruncatedFilesAreRejectedCleanly) {
  if (!caps().write) GTEST_SKIP() << "read-only format";
  const auto path = file("cut");
  save(path, holder("t", random_tensor(DType::kFloat32, {16}, 3)), {.format = std::string(format().id())});
  // A checkpoint that is a directory: cut its largest file.
  std::filesystem::path victim = path;
  if (std::filesystem::is_directory(path)) {
    uint64_t largest = 0;
    for (const auto& item : std::filesystem::recursive_directory_iterator(path)) {
      if (item.is_regular_file() && item.file_size() >= largest) {
        largest = item.file_size();
        victim = item.path();
      }
    }
  }
  const std::string bytes = read_file(victim);
  for (size_t keep : {size_t{0}, size_t{1}, size_t{7}, bytes.size() / 2, bytes.size() - 1}) {
    std::ofstream(victim, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(keep));
    try {
      load(path, {.format = std::string(format().id())});
      ADD_FAILURE() << "a file cut to " << keep << " bytes loaded";
    } catch (const Error& error) {
      EXPECT_TRUE(error.code() == ErrorCode::kCorrupt || error.code() == ErrorCode::kUnsupported)
          << error.what();
      EXPECT_NE(std::string(error.what()).find(path.filename().string()), std::string::npos) << error.what();
    }
  }
}

std::string format_name(const ::testing::TestParamInfo<const Format*>& info) {
  return std::string(info.param->id());
}

INSTANTIATE_TEST_SUITE_P(AllFormats, ConformanceTest,
                         ::testing::ValuesIn(formats().begin(), formats().end()), format_name);

}  // namespace
}  // namespace ckpt
