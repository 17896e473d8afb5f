// The Hugging Face sharded layout (hf_sharded): shards by max_shard_bytes,
// the index as transformers writes it, detection, replacing a directory,
// plain HF directories, the rank entry points, and malformed indexes one
// defect at a time.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "formats/hf_sharded/index.h"
#include "formats/hf_sharded/writer.h"
#include "support/files.h"
#include "support/random_tensor.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::random_tensor;
using testing::read_file;
using testing::write_file;

constexpr const char* kIndex = "model.safetensors.index.json";

// Tensors of `sizes` bytes (uint8), named t0, t1, ... in order.
Tree tensors_of(const std::vector<int64_t>& sizes) {
  Tree tree = Tree::map();
  for (size_t i = 0; i < sizes.size(); ++i) {
    tree.set("t" + std::to_string(i), random_tensor(DType::kUInt8, {sizes[i]}, static_cast<uint32_t>(i + 1)));
  }
  return tree;
}

std::vector<std::string> names_in(const Tree& tree) {
  std::vector<std::string> names;
  for (const Tree::Leaf& leaf : tree.tensor_leaves()) names.push_back(leaf.name);
  return names;
}

class HfShardedTest : public ::testing::Test {
 protected:
  fs::path dir(const std::string& name) const { return dir_ / name; }
  // The names of the files of `path`, sorted.
  static std::vector<std::string> files(const fs::path& path) {
    std::vector<std::string> names;
    for (const auto& [name, bytes] : testing::checkpoint_files(path)) names.push_back(name);
    return names;
  }
  // The tensors that each shard of `path` holds, read as plain safetensors.
  static std::vector<std::vector<std::string>> shard_contents(const fs::path& path) {
    std::vector<std::vector<std::string>> result;
    for (const std::string& name : files(path)) {
      if (name == kIndex) continue;
      result.push_back(names_in(load(path / name, {.format = "safetensors"})));
    }
    return result;
  }
  testing::TempDir dir_;
};

TEST_F(HfShardedTest, ShardsHoldWholeTensorsInOrderUpToTheMaximum) {
  const Tree tree = tensors_of({400, 400, 400, 100, 100});
  save(dir("out"), tree, {.max_shard_bytes = 1000});
  EXPECT_EQ(files(dir("out")), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                         "model-00002-of-00002.safetensors", kIndex}));
  EXPECT_EQ(shard_contents(dir("out")),
            (std::vector<std::vector<std::string>>{{"t0", "t1"}, {"t2", "t3", "t4"}}));
  EXPECT_EQ(detect(dir("out")).id(), "hf_sharded");
  const Contents contents = open(dir("out"));
  EXPECT_EQ(contents.format, "hf_sharded");
  EXPECT_TRUE(contents.tree == tree);
  EXPECT_EQ(contents.entries.size(), 5u);
  EXPECT_EQ(contents.checksum, ChecksumKind::kXxh3);
  // Each shard says {"format": "pt"}, which ckpt added: not the tree's metadata.
  EXPECT_EQ(open(dir("out") / "model-00002-of-00002.safetensors").metadata, (Metadata{{"format", "pt"}}));
  EXPECT_TRUE(contents.metadata.empty());
  save(dir("meta"), tree, {.metadata = {{"format", "np"}, {"run", "7"}}, .max_shard_bytes = 1000});
  EXPECT_EQ(open(dir("meta")).metadata, (Metadata{{"format", "np"}, {"run", "7"}}));
}

TEST_F(HfShardedTest, ATensorLargerThanTheMaximumGetsAShardOfItsOwn) {
  save(dir("out"), tensors_of({100, 2000, 100, 100}), {.max_shard_bytes = 1000});
  EXPECT_EQ(shard_contents(dir("out")),
            (std::vector<std::vector<std::string>>{{"t0"}, {"t1"}, {"t2", "t3"}}));
  save(dir("exact"), tensors_of({500, 500, 1}), {.max_shard_bytes = 1000});
  EXPECT_EQ(shard_contents(dir("exact")), (std::vector<std::vector<std::string>>{{"t0", "t1"}, {"t2"}}));
}

TEST_F(HfShardedTest, WithoutAMaximumTheFormatWritesOneShard) {
  const Tree tree = tensors_of({10, 20});
  save(dir("one"), tree, {.format = "hf_sharded"});
  EXPECT_EQ(files(dir("one")), (std::vector<std::string>{"model-00001-of-00001.safetensors", kIndex}));
  EXPECT_TRUE(load(dir("one")) == tree);
  save(dir("slash").string() + "/", tree, {.format = "hf_sharded"});  // as a shell completes a directory
  EXPECT_TRUE(load(dir("slash").string() + "/") == tree);
  // safetensors without a maximum is one file, as ever.
  save(dir("file"), tree, {.format = "safetensors"});
  EXPECT_TRUE(fs::is_regular_file(dir("file")));
}

// Byte for byte what save_pretrained writes (json.dumps(index, indent=2,
// sort_keys=True) + "\n"): names sorted, non-ASCII as \u escapes.
TEST_F(HfShardedTest, TheIndexIsWrittenAsTransformersWritesIt) {
  Tree tree = Tree::map();
  tree.set("b.weight", random_tensor(DType::kFloat32, {4}, 1));
  tree.set("a.bias", random_tensor(DType::kFloat32, {2}, 2));
  tree.set("é🙂", random_tensor(DType::kUInt8, {1}, 3));
  save(dir("out"), tree, {.extras = false, .max_shard_bytes = 16});
  const std::string expected =
      "{\n"
      "  \"metadata\": {\n"
      "    \"total_size\": 25\n"
      "  },\n"
      "  \"weight_map\": {\n"
      "    \"a.bias\": \"model-00002-of-00002.safetensors\",\n"
      "    \"b.weight\": \"model-00001-of-00002.safetensors\",\n"
      "    \"\\u00e9\\ud83d\\ude42\": \"model-00002-of-00002.safetensors\"\n"
      "  }\n"
      "}\n";
  EXPECT_EQ(read_file(dir("out") / kIndex), expected);
  const Tree loaded = load(dir("out"));
  EXPECT_TRUE(loaded.at("é🙂").tensor().equals(tree.at("é🙂").tensor()));
  // Without ckpt's record the tree is weight_map's order.
  EXPECT_EQ(names_in(loaded), (std::vector<std::string>{"a.bias", "b.weight", "é🙂"}));
}

TEST_F(HfShardedTest, ExtrasKeepTheWholeTreeInTheIndex) {
  Tree tree = Tree::map();
  Tree model = Tree::map();
  model.set("w", random_tensor(DType::kBFloat16, {8}, 1));
  model.set("c", random_tensor(DType::kComplex128, {2}, 2));
  tree.set("model", model);
  tree.set("step", int64_t{7});
  tree.set("lrs", Tree::list());
  save(dir("out"), tree, {.max_shard_bytes = 16});
  const Contents contents = open(dir("out"));
  EXPECT_TRUE(contents.tree == tree);
  EXPECT_EQ(contents.format_version, 1);
  EXPECT_NE(read_file(dir("out") / kIndex).find("\"ckpt\": {"), std::string::npos);
  // Without extras the non-tensor leaves are refused, as safetensors refuses them.
  try {
    save(dir("plain"), tree, {.extras = false, .max_shard_bytes = 16});
    ADD_FAILURE() << "saved a tree without extras";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
  }
  EXPECT_FALSE(fs::exists(dir("plain")));
}

TEST_F(HfShardedTest, TiedTensorsShareAShardAndAreStoredOnce) {
  const Tensor shared = random_tensor(DType::kFloat32, {64}, 9);
  Tree tree = Tree::map();
  tree.set("embed", shared);
  tree.set("middle", random_tensor(DType::kFloat32, {64}, 10));
  tree.set("head", shared);
  save(dir("out"), tree, {.max_shard_bytes = 256});
  const Tree loaded = load(dir("out"));
  EXPECT_TRUE(loaded.at("embed").tensor().same_memory(loaded.at("head").tensor()));
  EXPECT_NE(read_file(dir("out") / kIndex).find("\"total_size\": 512"), std::string::npos);
  EXPECT_EQ(shard_contents(dir("out")), (std::vector<std::vector<std::string>>{{"embed", "head"}, {"middle"}}));
}

TEST_F(HfShardedTest, ReplacesItsOwnLayoutAndRefusesAnythingElse) {
  save(dir("out"), tensors_of({100, 100, 100}), {.max_shard_bytes = 100});
  const Tree smaller = tensors_of({10});
  save(dir("out"), smaller, {.max_shard_bytes = 100});
  EXPECT_EQ(files(dir("out")), (std::vector<std::string>{"model-00001-of-00001.safetensors", kIndex}));
  EXPECT_TRUE(load(dir("out")) == smaller);
  fs::create_directories(dir("other"));
  write_file(dir("other") / "notes.txt", "mine");
  write_file(dir("file"), "mine");
  for (const char* name : {"other", "file"}) {
    try {
      save(dir(name), smaller, {.max_shard_bytes = 100});
      ADD_FAILURE() << "replaced " << name;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
    }
  }
  EXPECT_EQ(read_file(dir("other") / "notes.txt"), "mine");
  EXPECT_EQ(read_file(dir("file")), "mine");
  Tree reserved = Tree::map();
  reserved.set("__ckpt_piece__/x/0", random_tensor(DType::kUInt8, {1}, 1));
  try {
    save(dir("bad"), reserved, {.max_shard_bytes = 100});
    ADD_FAILURE() << "saved a name with the pieces' prefix";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
  }
}

// A directory as transformers leaves it: plain safetensors shards (with
// {"format": "pt"}), an index without ckpt's record, maybe another prefix.
class PlainDirectoryTest : public HfShardedTest {
 protected:
  void SetUp() override {
    fs::create_directories(dir("hf"));
    Tree first = Tree::map();
    first.set("b", random_tensor(DType::kFloat32, {3}, 1));
    first.set("a", random_tensor(DType::kInt64, {2}, 2));
    Tree second = Tree::map();
    second.set("c", random_tensor(DType::kFloat16, {5}, 3));
    second.set("orphan", random_tensor(DType::kUInt8, {1}, 4));  // in no weight_map: ignored
    const SaveOptions plain{.extras = false, .metadata = {{"format", "pt"}}};
    save(dir("hf") / "model-00001-of-00002.safetensors", first, plain);
    save(dir("hf") / "model-00002-of-00002.safetensors", second, plain);
    tree_ = Tree::map();
    tree_.set("a", first.at("a"));
    tree_.set("b", first.at("b"));
    tree_.set("c", second.at("c"));
  }
  void write_index(const std::string& text, const std::string& name = kIndex) { write_file(dir("hf") / name, text); }
  static std::string index_with(const std::string& weight_map, const std::string& extra = "") {
    return "{" + extra + "\"metadata\": {\"total_size\": 42}, \"weight_map\": " + weight_map + "}";
  }
  // The good weight_map and ckpt's record {"version": 1, FIELDS}.
  static std::string with_record(const std::string& fields) {
    return index_with(good_map(), "\"ckpt\": {\"version\": 1, " + fields + "},");
  }
  static std::string good_map() {
    return R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
               "c": "model-00002-of-00002.safetensors"})";
  }
  // Loading fails with `code`, naming the index (or `file`) and each of `needles`.
  void expect_error(ErrorCode code, const std::vector<std::string>& needles, const LoadOptions& options = {},
                    const std::string& file = kIndex) {
    try {
      load(dir("hf"), options);
      ADD_FAILURE() << "loaded";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), code) << error.what();
      EXPECT_NE(std::string(error.what()).find(file), std::string::npos) << error.what();
      for (const std::string& needle : needles) {
        EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << needle << " in " << error.what();
      }
    }
  }
  Tree tree_;
};

TEST_F(PlainDirectoryTest, ReadsWhatTransformersWrites) {
  write_index(index_with(good_map()));
  EXPECT_EQ(detect(dir("hf")).id(), "hf_sharded");
  const Contents contents = open(dir("hf"));
  EXPECT_TRUE(contents.tree == tree_);
  EXPECT_EQ(contents.entries.size(), 3u);
  EXPECT_EQ(contents.metadata, (Metadata{{"format", "pt"}}));
  EXPECT_EQ(contents.format_version, 0);
  // total_size (42) is not what the shards store: only verify checks it.
  expect_error(ErrorCode::kCorrupt, {"total_size"}, {.verify = true});
}

TEST_F(PlainDirectoryTest, AnotherIndexPrefixIsFoundWhenItIsTheOnlyOne) {
  write_index(index_with(good_map()), "diffusion_pytorch_model.safetensors.index.json");
  EXPECT_EQ(detect(dir("hf")).id(), "hf_sharded");
  EXPECT_TRUE(load(dir("hf")) == tree_);
  // The index named instead of its directory.
  EXPECT_EQ(detect(dir("hf") / "diffusion_pytorch_model.safetensors.index.json").id(), "hf_sharded");
  EXPECT_TRUE(load(dir("hf") / "diffusion_pytorch_model.safetensors.index.json") == tree_);
  write_index(index_with(good_map()), "other.safetensors.index.json");
  EXPECT_THROW(detect(dir("hf")), Error);
  expect_error(ErrorCode::kInvalidArgument, {"several"}, {.format = "hf_sharded"}, "hf");
  write_index(index_with(good_map()));  // model.safetensors.index.json wins
  EXPECT_TRUE(load(dir("hf")) == tree_);
}

TEST_F(PlainDirectoryTest, MalformedIndexesOneDefectAtATime) {
  struct Case {
    const char* what;
    std::string index;
    std::vector<std::string> needles;
    ErrorCode code = ErrorCode::kCorrupt;
  };
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::vector<Case> cases = {
      {"not JSON", "{\"weight_map\": ", {"not valid JSON"}},
      {"not an object", "[1, 2]", {"not a JSON object"}},
      {"no weight_map", "{\"metadata\": {}}", {"weight_map"}},
      {"weight_map not an object", "{\"weight_map\": [\"a\"]}", {"weight_map is not a JSON object"}},
      {"file not a string", index_with("{\"a\": 3}"), {"weight_map.a", "not a string"}},
      {"file with a slash", index_with("{\"a\": \"sub/" + shard1 + "\"}"), {"weight_map.a", "sub/"}},
      {"file ..", index_with("{\"a\": \"..\"}"), {"weight_map.a", "'..'"}},
      {"absolute file", index_with("{\"a\": \"/etc/passwd\"}"), {"weight_map.a", "/etc/passwd"}},
      {"empty file name", index_with("{\"a\": \"\"}"), {"weight_map.a"}},
      {"missing shard", index_with("{\"a\": \"model-00003-of-00003.safetensors\"}"),
       {"weight_map.a", "model-00003-of-00003.safetensors", "missing"}},
      {"tensor absent from its shard", index_with("{\"c\": \"" + shard1 + "\"}"), {"'c'", shard1, "does not hold"}},
      {"tensor in two shards",
       index_with("{\"a\": \"" + shard1 + "\", \"a\": \"model-00002-of-00002.safetensors\"}"), {"'a'", "twice"}},
      {"metadata not an object", "{\"metadata\": 5, \"weight_map\": {}}", {"metadata is not a JSON object"}},
      {"total_size negative", "{\"metadata\": {\"total_size\": -1}, \"weight_map\": {}}", {"metadata.total_size"}},
      {"total_size a string", "{\"metadata\": {\"total_size\": \"42\"}, \"weight_map\": {}}", {"total_size"}},
      {"record not an object", index_with(good_map(), "\"ckpt\": 1,"), {"ckpt", "not a JSON object"}},
      {"record from the future", index_with(good_map(), "\"ckpt\": {\"version\": 99},"), {"99"},
       ErrorCode::kUnsupported},
      {"record without a version", index_with(good_map(), "\"ckpt\": {},"), {"ckpt"}},
      {"tree not a string", with_record("\"tree\": 5"), {"ckpt.tree"}},
      {"tree naming an unknown tensor",
       with_record(R"("tree": "{\"map\":[[\"x\",{\"tensor\":\"x\"}]]}")"),
       {"'x'", "does not list"}},
      {"tree leaving a tensor out",
       with_record(R"("tree": "{\"map\":[[\"a\",{\"tensor\":\"a\"}]]}")"),
       {"'b'", "leaves out"}},
      {"slices not an object", with_record("\"slices\": []"), {"slices"}},
      {"slice of an unknown dtype",
       with_record(R"("slices": {"s": {"dtype": "F32", "shape": [2], "pieces": []}})"),
       {"ckpt.slices.s", "unknown dtype 'F32'"}},
      {"slice without pieces",
       with_record(R"("slices": {"s": {"dtype": "float32", "shape": [2], "pieces": []}})"),
       {"ckpt.slices.s", "no pieces"}},
      {"piece of the wrong rank",
       with_record(R"("slices": {"s": {"dtype": "float32", "shape": [2],
           "pieces": [{"file": "x", "key": "k", "offsets": [0, 0], "sizes": [2, 1]}]}})"),
       {"ckpt.slices.s", "dimensions"}},
      {"piece file escaping",
       with_record(R"("slices": {"s": {"dtype": "float32", "shape": [2],
           "pieces": [{"file": "../x", "key": "k", "offsets": [0], "sizes": [2]}]}})"),
       {"ckpt.slices.s", "../x"}},
      {"sliced tensor also whole",
       with_record(R"("slices": {"a": {"dtype": "int64", "shape": [2],
           "pieces": [{"file": "model-00001-of-00002.safetensors", "key": "b", "offsets": [0], "sizes": [2]}]}})"),
       {"ckpt.slices.a", "both"}},
      {"piece key that is a whole tensor",
       with_record(R"("slices": {"s": {"dtype": "float32", "shape": [3],
           "pieces": [{"file": "model-00001-of-00002.safetensors", "key": "b", "offsets": [0], "sizes": [3]}]}})"),
       {"ckpt.slices.s", "'b'"}},
      {"piece missing from its shard",
       with_record(R"("slices": {"s": {"dtype": "float32", "shape": [3],
           "pieces": [{"file": "model-00001-of-00002.safetensors", "key": "nope", "offsets": [0], "sizes": [3]}]}})"),
       {"ckpt.slices.s", "'nope'"}},
      {"piece of another dtype",
       with_record(R"("slices": {"s": {"dtype": "float64", "shape": [1],
           "pieces": [{"file": "model-00002-of-00002.safetensors", "key": "orphan", "offsets": [0], "sizes": [1]}]}})"),
       {"ckpt.slices.s", "uint8", "float64"}},
      {"piece of another shape",
       with_record(R"("slices": {"s": {"dtype": "uint8", "shape": [2],
           "pieces": [{"file": "model-00002-of-00002.safetensors", "key": "orphan", "offsets": [0], "sizes": [2]}]}})"),
       {"ckpt.slices.s", "shape"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_index(c.index);
    expect_error(c.code, c.needles, {.format = "hf_sharded"});
  }
}

TEST_F(PlainDirectoryTest, ABrokenShardIsNamed) {
  write_index(index_with(good_map()));
  const fs::path shard = dir("hf") / "model-00002-of-00002.safetensors";
  const std::string bytes = read_file(shard);
  write_file(shard, bytes.substr(0, bytes.size() - 1));
  expect_error(ErrorCode::kCorrupt, {}, {}, "model-00002-of-00002.safetensors");
}

// ---- The rank entry points (issue 20) ----

TEST_F(HfShardedTest, RanksWriteTheirShardsAndOneIndexDescribesThem) {
  using namespace hf_sharded_detail;
  fs::create_directories(dir("run"));
  const Tensor global = random_tensor(DType::kFloat32, {4, 3}, 5);
  auto rows = [&](int64_t begin, int64_t count) {
    Tensor part = Tensor::empty(DType::kFloat32, {count, 3});
    std::copy_n(global.bytes().begin() + begin * 12, count * 12, part.mutable_bytes().begin());
    return part;
  };
  Tree whole0 = Tree::map();
  whole0.set("bias", random_tensor(DType::kFloat32, {3}, 6));
  // Rank 0 holds row 0 of w (and bias), rank 1 rows 1 to 3.
  const std::vector<LocalPiece> pieces0 = {
      {.name = "w", .global_shape = {4, 3}, .offsets = {0, 0}, .data = rows(0, 1)}};
  const std::vector<LocalPiece> pieces1 = {
      {.name = "w", .global_shape = {4, 3}, .offsets = {1, 0}, .data = rows(1, 3)}};
  const std::vector<RankShard> ranks = {write_rank_shard(dir("run"), 0, 2, whole0, pieces0, {}),
                                        write_rank_shard(dir("run"), 1, 2, Tree::map(), pieces1, {})};
  EXPECT_EQ(ranks[0].file, "model-00001-of-00002.safetensors");
  EXPECT_EQ(ranks[0].nbytes, 24u);
  EXPECT_EQ(ranks[1].nbytes, 36u);
  write_sharded_index(dir("run"), ranks, nullptr, {});
  const ShardIndex index = parse_index(read_file(dir("run") / kIndex), dir("run") / kIndex);
  EXPECT_EQ(index.total_size, 60u);
  ASSERT_EQ(index.weight_map.size(), 1u);
  EXPECT_EQ(index.weight_map[0], (std::pair<std::string, std::string>{"bias", "model-00001-of-00002.safetensors"}));
  ASSERT_EQ(index.slices.size(), 1u);
  EXPECT_EQ(index.slices[0].shape, (Shape{4, 3}));
  ASSERT_EQ(index.slices[0].pieces.size(), 2u);
  EXPECT_EQ(index.slices[0].pieces[1].key, "__ckpt_piece__/w/1,0");
  EXPECT_EQ(index.slices[0].pieces[1].box, (Box{.offsets = {1, 0}, .sizes = {3, 3}}));
  // The pieces are ordinary tensors of their shards.
  EXPECT_TRUE(load(dir("run") / ranks[1].file).at("__ckpt_piece__/w/1,0").tensor().equals(rows(1, 3)));

  // Loaded: one global tensor, assembled when used.
  const Contents contents = open(dir("run"));
  EXPECT_EQ(names_in(contents.tree), (std::vector<std::string>{"bias", "w"}));
  const Tensor& w = contents.tree.at("w").tensor();
  EXPECT_EQ(w.shape(), (Shape{4, 3}));
  EXPECT_EQ(pieces_of(w).size(), 2u);
  EXPECT_TRUE(w.equals(global));
  EXPECT_TRUE(contents.tree.at("bias").tensor().equals(whole0.at("bias").tensor()));
  ASSERT_EQ(contents.entries.size(), 2u);
  EXPECT_EQ(contents.entries[1].name, "w");
  EXPECT_EQ(contents.entries[1].nbytes, 48u);
  // A box of it: only that region (LoadOptions::boxes reads the pieces it overlaps).
  const Tree part = load(dir("run"), {.boxes = {{"w", Box{.offsets = {2, 1}, .sizes = {2, 2}}}}});
  const Tensor& box = part.at("w").tensor();
  ASSERT_EQ(box.shape(), (Shape{2, 2}));
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 2; ++c) {
      EXPECT_EQ(box.values<float>()[r * 2 + c], global.values<float>()[(2 + r) * 3 + 1 + c]);
    }
  }
  // Through a single file and back: the whole tensor, bit-exact.
  save(dir("merged.safetensors"), contents.tree);
  EXPECT_TRUE(load(dir("merged.safetensors")).at("w").tensor().equals(global));
}

// Pieces that the index describes but that do not tile their tensor.
TEST_F(PlainDirectoryTest, PiecesThatDoNotTileTheirTensorAreCorrupt) {
  // "orphan" (uint8 [1]) and a second piece stored as "b2" in shard 2.
  Tree second = load(dir("hf") / "model-00002-of-00002.safetensors");
  second.set("b2", random_tensor(DType::kUInt8, {2}, 8));
  save(dir("hf") / "model-00002-of-00002.safetensors", second, {.extras = false});
  auto with_pieces = [&](const std::string& shape, const std::string& pieces) {
    return with_record(R"("slices": {"s": {"dtype": "uint8", "shape": )" + shape + R"(, "pieces": [)" + pieces + "]}}");
  };
  const std::string shard = R"({"file": "model-00002-of-00002.safetensors", )";
  const std::string orphan = shard + R"("key": "orphan", "offsets": [OFF], "sizes": [1]})";
  const std::string b2 = shard + R"("key": "b2", "offsets": [OFF], "sizes": [2]})";
  auto at = [](std::string piece, int offset) {
    return piece.replace(piece.find("OFF"), 3, std::to_string(offset));
  };
  write_index(with_pieces("[3]", at(orphan, 0) + ", " + at(b2, 1)));
  EXPECT_EQ(load(dir("hf")).at("s").tensor().shape(), (Shape{3}));  // the good case
  struct Case {
    const char* what;
    std::string index;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"out of bounds", with_pieces("[3]", at(orphan, 0) + ", " + at(b2, 2)), "outside"},
      {"overlapping", with_pieces("[3]", at(orphan, 1) + ", " + at(b2, 1)), "overlaps"},
      {"not covering", with_pieces("[4]", at(orphan, 0) + ", " + at(b2, 1)), "uncovered"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_index(c.index);
    expect_error(ErrorCode::kCorrupt, {"ckpt.slices.s", c.needle}, {.format = "hf_sharded"});
  }
}

TEST_F(HfShardedTest, TheIndexRefusesPiecesThatDoNotTileTheirTensor) {
  using namespace hf_sharded_detail;
  fs::create_directories(dir("run"));
  auto rank_with = [&](size_t rank, std::vector<int64_t> offsets, Shape sizes, Shape global,
                       DType dtype = DType::kFloat32) {
    const std::vector<LocalPiece> pieces = {
        {.name = "w", .global_shape = std::move(global), .offsets = std::move(offsets),
         .data = random_tensor(dtype, std::move(sizes), 1)}};
    return write_rank_shard(dir("run"), rank, 2, Tree::map(), pieces, {.fsync = false});
  };
  struct Case {
    const char* what;
    std::vector<RankShard> ranks;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"overlap", {rank_with(0, {0}, {3}, {4}), rank_with(1, {2}, {2}, {4})}, "overlap"},
      {"gap", {rank_with(0, {0}, {1}, {4}), rank_with(1, {2}, {2}, {4})}, "cover"},
      {"out of bounds", {rank_with(0, {0}, {2}, {4}), rank_with(1, {2}, {3}, {4})}, "outside"},
      {"dtype mismatch", {rank_with(0, {0}, {2}, {4}), rank_with(1, {2}, {2}, {4}, DType::kFloat64)}, "dtype"},
      {"shape mismatch", {rank_with(0, {0}, {2}, {4}), rank_with(1, {2}, {2}, {5})}, "shape"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    try {
      write_sharded_index(dir("run"), c.ranks, nullptr, {});
      ADD_FAILURE() << "wrote the index";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
      EXPECT_EQ(error.context().entry, "w") << error.what();
      EXPECT_NE(std::string(error.what()).find(c.needle), std::string::npos) << error.what();
    }
  }
  EXPECT_FALSE(fs::exists(dir("run") / kIndex));
  EXPECT_THROW(write_rank_shard(dir("run"), 2, 2, Tree::map(), {}, {}), Error);
}

}  // namespace
}  // namespace ckpt
