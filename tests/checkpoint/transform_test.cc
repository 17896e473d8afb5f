// glob_match, name_under and Transforms: each step on names, steps in
// order, and apply() on trees (shapes kept, lists, integer keys, empty
// containers, ambiguity). Names with escapes (tree.h) are out of scope.

#include "ckpt/transform.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ckpt/error.h"
#include "support/error_of.h"

namespace ckpt {
namespace {

Tensor tensor(float value) { return Tensor::from_values<float>(DType::kFloat32, {1}, std::vector<float>{value}); }

using ckpt::testing::error_of;

std::vector<std::string> keys_of(const Tree& tree) {
  std::vector<std::string> keys;
  for (const TreeEntry& entry : tree.entries()) keys.push_back(key_to_string(entry.key));
  return keys;
}

std::vector<std::string> names_of(const Tree& tree) {
  std::vector<std::string> names;
  for (const Tree::Leaf& leaf : tree.leaves()) names.push_back(leaf.name);
  return names;
}

bool is_integer_key(const Tree& tree, size_t position) {
  return std::holds_alternative<int64_t>(tree.entries().at(position).key);
}

using Names = std::vector<std::string>;

// ---- glob ----

TEST(GlobTest, MatchesAsFnmatchcase) {
  // Each expectation checked against Python 3's fnmatch.fnmatchcase.
  struct Case {
    const char* pattern;
    const char* name;
    bool match;
  };
  const Case cases[] = {
      {"*", "", true},          {"*", "a.b", true},        {"a.*", "a.b.c", true},  {"a.*", "a", false},
      {"*.weight", "enc.layers.0.weight", true},           {"?", "a", true},        {"?", "ab", false},
      {"?", "\xC3\xA9", true},  // é: one character, two bytes
      {"a?c", "a.c", true},     {"[abc]x", "bx", true},    {"[a-c]x", "dx", false}, {"[!a-c]x", "dx", true},
      {"[!a-c]x", "ax", false}, {"[", "[", true},          {"a[b", "a[b", true},    {"a[b", "ab", false},
      {"[]]", "]", true},       {"[!]]", "a", true},       {"[!]]", "]", false},    {"[a-]", "-", true},
      {"[a-]", "b", false},     {"[z-a]", "a", false},     {"[!z-a]", "q", true},   {"\\", "\\", true},
      {"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaa", false},     {"layers.*.attn.*", "layers.3.attn.q.weight", true},
      {"", "", true},           {"", "a", false},          {"a**b", "ab", true},    {"[!]", "[!]", true},
      {"[\xC3\xA9-\xC3\xBC]x", "\xC3\xB1x", true},  // [é-ü] holds ñ
      {"[a-c-e]", "-", true},   {"[a-c-e]", "d", false},   {"[b-a-z]", "z", true},  {"[b-a-z]", "-", true},
      {"[b-a-z]", "c", false},  {"[a--]", "a", false},     {"*.[!0-9]*", "h.x1", true},
  };
  for (const Case& c : cases) EXPECT_EQ(glob_match(c.pattern, c.name), c.match) << c.pattern << " ~ " << c.name;
}

TEST(GlobTest, NameUnderIsAWholePartPrefix) {
  EXPECT_TRUE(name_under("a.b", "a"));
  EXPECT_TRUE(name_under("a", "a"));
  EXPECT_TRUE(name_under("a.b.c", "a.b"));
  EXPECT_FALSE(name_under("a.bc", "a.b"));
  EXPECT_FALSE(name_under("ab", "a"));
  EXPECT_FALSE(name_under("a", "a.b"));
  EXPECT_TRUE(name_under("anything", ""));
  EXPECT_TRUE(name_under("", ""));
}

// ---- steps on names ----

TEST(TransformTest, RenamePrefixReplacesWholeParts) {
  Transforms rename;
  rename.rename_prefix("encoder", "enc");
  EXPECT_EQ(rename.apply("encoder.w"), "enc.w");
  EXPECT_EQ(rename.apply("encoder"), "enc");
  EXPECT_EQ(rename.apply("encoders.w"), "encoders.w");
  EXPECT_EQ(rename.apply("x.encoder.w"), "x.encoder.w");

  Transforms remove;  // an empty `to` removes the prefix and its dot
  remove.rename_prefix("model", "");
  EXPECT_EQ(remove.apply("model.layer.w"), "layer.w");
  EXPECT_EQ(remove.apply("other"), "other");
  EXPECT_EQ(error_of([&] { remove.apply("model"); }).code(), ErrorCode::kInvalidArgument);

  Transforms add;  // an empty `from` adds `to`
  add.rename_prefix("", "model");
  EXPECT_EQ(add.apply("w"), "model.w");
}

TEST(TransformTest, AddAndStripPrefix) {
  Transforms add;
  add.add_prefix("module");
  EXPECT_EQ(add.apply("layer.w"), "module.layer.w");
  Transforms strip;
  strip.strip_prefix("module");
  EXPECT_EQ(strip.apply("module.layer.w"), "layer.w");
  EXPECT_EQ(strip.apply("module"), "module");  // only "module." is stripped
  EXPECT_EQ(strip.apply("modules.w"), "modules.w");
  EXPECT_EQ(strip.apply("x.module.w"), "x.module.w");
}

TEST(TransformTest, RenameRegexWithGroups) {
  Transforms dollar;
  dollar.rename_regex(R"(^h\.(\d+)\.)", "layers.$1.");
  EXPECT_EQ(dollar.apply("h.11.attn.w"), "layers.11.attn.w");
  EXPECT_EQ(dollar.apply("x.h.1.w"), "x.h.1.w");
  Transforms backslash;
  backslash.rename_regex(R"(^h\.(\d+)\.(\w+))", R"(layers.\1.\2_x)");
  EXPECT_EQ(backslash.apply("h.3.mlp.w"), "layers.3.mlp_x.w");
  Transforms every;  // every match, "$&" the match, "\\" a backslash
  every.rename_regex("a", "[$&]").rename_regex("b", R"(\\)");
  EXPECT_EQ(every.apply("a.b.a"), "[a].\\.[a]");
  const Error bad = error_of([] { Transforms().rename_regex("(unclosed", "x"); });
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("(unclosed"), std::string::npos) << bad.message();
  Transforms empties;
  empties.rename_regex(".*", "");
  EXPECT_EQ(error_of([&] { empties.apply("w"); }).code(), ErrorCode::kInvalidArgument);
}

TEST(TransformTest, TableAndDrop) {
  Transforms transforms;
  transforms.rename({{"a", "b"}, {"x.y", "z"}}).drop("*.bias");
  EXPECT_EQ(transforms.apply("a"), "b");
  EXPECT_EQ(transforms.apply("a.w"), "a.w");  // exact names only
  EXPECT_EQ(transforms.apply("x.y"), "z");
  EXPECT_EQ(transforms.apply("enc.bias"), std::nullopt);
  EXPECT_EQ(transforms.apply("bias"), "bias");
  EXPECT_EQ(transforms.describe(), (Names{"rename table of 2 names", "drop '*.bias'"}));
  Transforms all;
  all.rename_prefix("a", "b").rename_regex("x", "y").add_prefix("p").strip_prefix("q");
  EXPECT_EQ(all.describe(), (Names{"rename prefix 'a' -> 'b'", "rename regex 'x' -> 'y'", "add prefix 'p'",
                                   "strip prefix 'q'"}));
  EXPECT_TRUE(Transforms().empty());
  EXPECT_FALSE(all.empty());
}

TEST(TransformTest, StepsApplyInOrder) {
  Transforms rename_then_drop;
  rename_then_drop.rename_prefix("a", "b").drop("b.*");
  Transforms drop_then_rename;
  drop_then_rename.drop("b.*").rename_prefix("a", "b");
  EXPECT_EQ(rename_then_drop.apply("a.x"), std::nullopt);
  EXPECT_EQ(drop_then_rename.apply("a.x"), "b.x");
  EXPECT_EQ(drop_then_rename.apply("b.x"), std::nullopt);

  Tree tree = Tree::map();
  tree.set("a", Tree::map()).set("x", tensor(1));
  tree.set("c", tensor(2));
  EXPECT_EQ(names_of(rename_then_drop.apply(tree)), (Names{"c"}));
  EXPECT_EQ(names_of(drop_then_rename.apply(tree)), (Names{"b.x", "c"}));
}

// ---- trees ----

TEST(TransformTest, FlaxTreeKeepsItsNesting) {
  Tree dense = Tree::map();
  dense.set("kernel", tensor(1));
  dense.set("bias", tensor(2));
  Tree params = Tree::map();
  params.set("Dense_0", dense);
  params.set("Dense_1", dense);
  Tree tree = Tree::map();
  tree.set("params", params);
  Transforms transforms;
  transforms.rename_prefix("params.Dense_0", "params.dense");
  const Tree out = transforms.apply(tree);
  EXPECT_EQ(keys_of(out), (Names{"params"}));
  EXPECT_EQ(keys_of(out.at("params")), (Names{"dense", "Dense_1"}));
  EXPECT_EQ(keys_of(out.at("params.dense")), (Names{"kernel", "bias"}));
  EXPECT_TRUE(out.at("params.dense.kernel").tensor().same_memory(tree.at("params.Dense_0.kernel").tensor()));
  EXPECT_TRUE(out.at("params.Dense_1.bias").tensor().same_memory(tree.at("params.Dense_1.bias").tensor()));
}

TEST(TransformTest, FlatTorchStateDictStaysFlat) {
  Tree tree = Tree::map();
  tree.set("encoder.layers.0.weight", tensor(1));
  tree.set("encoder.layers.0.bias", tensor(2));
  tree.set("head.weight", tensor(3));
  Transforms transforms;
  transforms.rename_prefix("encoder", "enc").rename_regex(R"(\.layers\.)", ".l.");
  const Tree out = transforms.apply(tree);
  EXPECT_EQ(keys_of(out), (Names{"enc.l.0.weight", "enc.l.0.bias", "head.weight"}));
  for (const Tree::Leaf& leaf : out.leaves()) EXPECT_TRUE(leaf.value->is_tensor()) << leaf.name;
  EXPECT_TRUE(out.at("enc.l.0.bias").tensor().same_memory(tree.at("encoder.layers.0.bias").tensor()));
}

// A torch optimizer state dict: integer keys, a list of param groups.
Tree optimizer_state() {
  Tree slot = Tree::map();
  slot.set("step", tensor(7));
  slot.set("exp_avg", tensor(0.5f));
  Tree state = Tree::map();
  state.set(int64_t{0}, slot);
  state.set(int64_t{1}, slot);
  Tree group = Tree::map();
  group.set("lr", 0.001);
  group.set("params", Tree::list()).push_back(int64_t{0});
  group.find("params")->push_back(int64_t{1});
  Tree optimizer = Tree::map();
  optimizer.set("state", state);
  optimizer.set("param_groups", Tree::list()).push_back(group);
  Tree tree = Tree::map();
  tree.set("optimizer", optimizer);
  tree.set("model.w", tensor(1));
  return tree;
}

TEST(TransformTest, IntegerKeysStayIntegers) {
  const Tree tree = optimizer_state();
  // Unchanged leaves keep their integer keys and lists.
  Transforms elsewhere;
  elsewhere.rename_prefix("model.w", "model.weight");
  Tree out = elsewhere.apply(tree);
  EXPECT_TRUE(is_integer_key(out.at("optimizer.state"), 0));
  EXPECT_TRUE(out.at("optimizer.param_groups").is_list());
  EXPECT_TRUE(out.at("optimizer.param_groups.0.params").is_list());
  EXPECT_EQ(keys_of(out), (Names{"optimizer", "model.weight"}));
  // A renamed parent: the integer parts below stay integer keys.
  Transforms parent;
  parent.rename_prefix("optimizer", "opt");
  out = parent.apply(tree);
  EXPECT_EQ(keys_of(out), (Names{"opt", "model.w"}));
  EXPECT_EQ(keys_of(out.at("opt.state")), (Names{"0", "1"}));
  EXPECT_TRUE(is_integer_key(out.at("opt.state"), 0));
  EXPECT_TRUE(is_integer_key(out.at("opt.state"), 1));
  EXPECT_EQ(keys_of(out.at("opt.state.1")), (Names{"step", "exp_avg"}));
  EXPECT_TRUE(out.at("opt.state.1.exp_avg").tensor().same_memory(tree.at("optimizer.state.1.exp_avg").tensor()));
  // A renamed integer key stays an integer.
  Transforms key;
  key.rename_prefix("optimizer.state.1", "optimizer.state.5");
  out = key.apply(tree);
  EXPECT_EQ(keys_of(out.at("optimizer.state")), (Names{"0", "5"}));
  EXPECT_TRUE(is_integer_key(out.at("optimizer.state"), 1));
}

TEST(TransformTest, ListsStayListsUntilAnItemMoves) {
  Tree tree = Tree::map();
  Tree& betas = tree.set("betas", Tree::list());
  betas.push_back(0.9);
  betas.push_back(0.999);
  tree.set("w", tensor(1));
  Transforms untouched;
  untouched.rename_prefix("w", "weight");
  Tree out = untouched.apply(tree);
  ASSERT_TRUE(out.at("betas").is_list());
  EXPECT_EQ(out.at("betas").size(), 2u);

  Transforms drop_first;
  drop_first.drop("betas.0");
  out = drop_first.apply(tree);
  ASSERT_TRUE(out.at("betas").is_map());
  EXPECT_EQ(keys_of(out.at("betas")), (Names{"1"}));
  EXPECT_TRUE(is_integer_key(out.at("betas"), 0));
  EXPECT_EQ(out.at("betas.1").real(), 0.999);

  Transforms swap;
  swap.rename({{"betas.0", "betas.1"}, {"betas.1", "betas.0"}});
  out = swap.apply(tree);
  ASSERT_TRUE(out.at("betas").is_map());
  EXPECT_EQ(keys_of(out.at("betas")), (Names{"1", "0"}));  // tree order
  EXPECT_EQ(out.at("betas.1").real(), 0.9);

  // Renamed within an item, the list keeps its items in place.
  const Tree optimizer = optimizer_state();
  Transforms inside;
  inside.rename_prefix("optimizer.param_groups.0.lr", "optimizer.param_groups.0.learning_rate");
  out = inside.apply(optimizer);
  ASSERT_TRUE(out.at("optimizer.param_groups").is_list());
  EXPECT_EQ(keys_of(out.at("optimizer.param_groups.0")), (Names{"learning_rate", "params"}));
}

TEST(TransformTest, EmptyContainersAreCarriedAlong) {
  Tree tree = Tree::map();
  Tree& optimizer = tree.set("opt", Tree::map());
  optimizer.set("state", Tree::map());
  optimizer.set("groups", Tree::list());
  tree.set("w", tensor(1));
  Transforms transforms;
  transforms.rename_prefix("opt", "optimizer").drop("w");
  const Tree out = transforms.apply(tree);
  EXPECT_EQ(keys_of(out), (Names{"optimizer"}));
  EXPECT_EQ(keys_of(out.at("optimizer")), (Names{"state", "groups"}));
  EXPECT_TRUE(out.at("optimizer.state").is_map());
  EXPECT_TRUE(out.at("optimizer.groups").is_list());
  EXPECT_EQ(out.at("optimizer.state").size(), 0u);
  // An empty container that a new path runs through is filled, not kept apart.
  Tree other = Tree::map();
  other.set("opt", Tree::map()).set("state", Tree::map());
  other.set("x", Tree::map()).set("y", Tree::map()).set("z", tensor(2));
  Transforms into;
  into.rename_prefix("x.y", "opt.state");
  const Tree filled = into.apply(other);
  EXPECT_EQ(keys_of(filled), (Names{"opt"}));
  EXPECT_EQ(keys_of(filled.at("opt.state")), (Names{"z"}));
}

TEST(TransformTest, TwoLeavesToOneNameIsAnError) {
  Tree tree = Tree::map();
  tree.set("first", tensor(1));
  tree.set("second", tensor(2));
  tree.set("third", tensor(3));
  Transforms table;
  table.rename({{"first", "merged"}, {"second", "merged"}});
  Error error = error_of([&] { table.apply(tree); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  for (const char* name : {"'first'", "'second'", "'merged'"}) {
    EXPECT_NE(error.message().find(name), std::string::npos) << error.message();
  }
  Transforms onto_unchanged;
  onto_unchanged.rename({{"first", "third"}});
  error = error_of([&] { onto_unchanged.apply(tree); });
  EXPECT_NE(error.message().find("'first'"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("'third'"), std::string::npos) << error.message();
}

TEST(TransformTest, ALeafIsNeverUsedAsAContainer) {
  Tree tree = Tree::map();
  tree.set("a", tensor(1));
  tree.set("b", Tree::map()).set("c", tensor(2));
  Transforms transforms;
  transforms.rename_prefix("b", "a");  // "a" and "a.c": the deeper one stays one key
  const Tree out = transforms.apply(tree);
  EXPECT_EQ(keys_of(out), (Names{"a", "a.c"}));
  EXPECT_TRUE(out.find("a")->is_tensor());
  EXPECT_TRUE(out.find("a.c")->is_tensor());
}

TEST(TransformTest, MismatchedPartCountsKeepTheTrailingKeys) {
  Tree tree = Tree::map();
  tree.set("model", Tree::map()).set("w", tensor(1));
  tree.set("step", int64_t{3});
  Transforms transforms;
  transforms.add_prefix("ema");  // "ema.model.w" has 3 parts, the old path 2
  const Tree out = transforms.apply(tree);
  EXPECT_EQ(keys_of(out), (Names{"ema"}));
  ASSERT_NE(out.find("ema")->find("model"), nullptr);
  EXPECT_TRUE(out.find("ema")->find("model")->find("w")->is_tensor());
  EXPECT_EQ(out.find("ema")->find("step")->integer(), 3);

  // Two old parts into one new one: the unchanged tail stays its own key.
  Tree nested = Tree::map();
  nested.set("model", Tree::map()).set("encoder", Tree::map()).set("w", tensor(1));
  Transforms shorten;
  shorten.rename_prefix("model.encoder", "enc");
  const Tree short_out = shorten.apply(nested);
  EXPECT_EQ(keys_of(short_out), (Names{"enc"}));
  EXPECT_TRUE(short_out.find("enc")->find("w")->is_tensor());

  // A flat key that the new name does not end with stays one key.
  Tree flat = Tree::map();
  flat.set("encoder.0.weight", tensor(1));
  Transforms to_enc;
  to_enc.rename_prefix("encoder", "enc.layers");
  EXPECT_EQ(keys_of(to_enc.apply(flat)), (Names{"enc.layers.0.weight"}));
}

TEST(TransformTest, UnchangedLeavesSharingANameAreKept) {
  Tree tree = Tree::map();  // the escaped pair of tree.h: both are named "a.b"
  tree.set("a.b", tensor(1));
  tree.set("a", Tree::map()).set("b", tensor(2));
  tree.set("c", tensor(3));
  Transforms transforms;
  transforms.rename_prefix("c", "d");
  const Tree out = transforms.apply(tree);
  EXPECT_EQ(keys_of(out), (Names{"a.b", "a", "d"}));
}

TEST(TransformTest, AHundredThousandLeaves) {
  Tree tree = Tree::map();
  Tree& layers = tree.set("h", Tree::map());
  for (int64_t i = 0; i < 25000; ++i) {
    Tree& layer = layers.set(std::to_string(i), Tree::map());
    for (const char* name : {"q", "k", "v", "o"}) layer.set(name, int64_t{i});
  }
  Transforms transforms;
  transforms.rename_regex(R"(^h\.(\d+)\.)", "layers.$1.").drop("*.o");
  const Tree out = transforms.apply(tree);
  ASSERT_EQ(out.at("layers").size(), 25000u);
  EXPECT_EQ(keys_of(out.at("layers.24999")), (Names{"q", "k", "v"}));
  EXPECT_EQ(out.at("layers.123.v").integer(), 123);
}

TEST(TransformTest, NoStepsAndNonContainerRoots) {
  const Tree tree = optimizer_state();
  EXPECT_TRUE(Transforms().apply(tree) == tree);
  Transforms transforms;
  transforms.add_prefix("x");
  EXPECT_TRUE(transforms.apply(Tree(int64_t{5})) == Tree(int64_t{5}));
  // A root list whose items stay put stays a list.
  Tree list = Tree::list();
  list.push_back(tensor(1));
  list.push_back(Tree::map()).set("w", tensor(2));
  Transforms inner;
  inner.rename_prefix("1.w", "1.weight");
  const Tree out = inner.apply(list);
  ASSERT_TRUE(out.is_list());
  EXPECT_EQ(names_of(out), (Names{"0", "1.weight"}));
}

}  // namespace
}  // namespace ckpt
