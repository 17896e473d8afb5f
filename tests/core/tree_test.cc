#include "ckpt/tree.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ckpt/error.h"

namespace ckpt {
namespace {

Tensor scalar(float value) { return Tensor::from_values<float>(DType::kFloat32, {}, std::span(&value, 1)); }

std::vector<std::string> names_of(const std::vector<Tree::Leaf>& leaves) {
  std::vector<std::string> names;
  for (const auto& leaf : leaves) names.push_back(leaf.name);
  return names;
}

TEST(TreeTest, FlatStateDictKeepsItsKeysAsNames) {
  Tree sd = Tree::map();
  sd.set("encoder.layers.0.weight", scalar(1));
  sd.set("encoder.layers.0.bias", scalar(2));
  EXPECT_EQ(names_of(sd.tensor_leaves()),
            (std::vector<std::string>{"encoder.layers.0.weight", "encoder.layers.0.bias"}));
  EXPECT_EQ(sd.at("encoder.layers.0.bias").tensor().values<float>()[0], 2.0f);
}

TEST(TreeTest, NestingPrefixesNamesWithDots) {
  Tree sd = Tree::map();
  sd.set("encoder.layers.0.weight", scalar(1));
  Tree state = Tree::map();
  state.set("model", sd);
  state.set("epoch", int64_t{3});
  EXPECT_EQ(names_of(state.leaves()), (std::vector<std::string>{"model.encoder.layers.0.weight", "epoch"}));
  EXPECT_EQ(state.at("model.encoder.layers.0.weight").tensor().values<float>()[0], 1.0f);
  EXPECT_EQ(state.at("epoch").integer(), 3);
}

TEST(TreeTest, IntegerKeysAndListPositionsPrintInDecimal) {
  Tree slot = Tree::map();
  slot.set("exp_avg", scalar(5));
  Tree per_param = Tree::map();
  per_param.set(int64_t{0}, slot);
  Tree groups = Tree::list();
  Tree group = Tree::map();
  group.set("lr", 0.001);
  groups.push_back(group);
  Tree optimizer = Tree::map();
  optimizer.set("state", per_param);
  optimizer.set("param_groups", groups);
  EXPECT_EQ(names_of(optimizer.leaves()), (std::vector<std::string>{"state.0.exp_avg", "param_groups.0.lr"}));
  EXPECT_EQ(optimizer.at("state.0.exp_avg").tensor().values<float>()[0], 5.0f);
  EXPECT_EQ(optimizer.at("param_groups.0.lr").real(), 0.001);
  // The integer key is kept as an integer, distinct from the string "0".
  EXPECT_NE(optimizer.find("state")->find(int64_t{0}), nullptr);
  EXPECT_EQ(optimizer.find("state")->find(std::string("0")), nullptr);
}

TEST(TreeTest, CollidingNamesGetAnEscapeThatIsFoundAgain) {
  Tree inner = Tree::map();
  inner.set("b", scalar(2));
  Tree tree = Tree::map();
  tree.set("a.b", scalar(1));
  tree.set("a", inner);
  const auto names = names_of(tree.tensor_leaves());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "a.b");
  EXPECT_EQ(names[1], "a.b\\#1") << "a.b escapes to itself, so it takes a counter";
  EXPECT_EQ(tree.at("a.b\\#1").tensor().values<float>()[0], 2.0f);
  EXPECT_EQ(tree.at("a.b").tensor().values<float>()[0], 1.0f);
}

TEST(TreeTest, SecondCollidingLeafIsEscaped) {
  Tree inner = Tree::map();
  inner.set("b", scalar(2));
  Tree tree = Tree::map();
  tree.set("a", inner);
  tree.set("a.b", scalar(1));
  const auto names = names_of(tree.tensor_leaves());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "a.b");
  EXPECT_EQ(names[1], "a\\.b");
  EXPECT_EQ(tree.at("a\\.b").tensor().values<float>()[0], 1.0f);
}

TEST(TreeTest, IntegerAndStringKeyWithOneNameAreBothKept) {
  Tree tree = Tree::map();
  tree.set(int64_t{0}, scalar(1));
  tree.set(std::string("0"), scalar(2));
  const auto leaves = tree.tensor_leaves();
  ASSERT_EQ(leaves.size(), 2u);
  EXPECT_EQ(leaves[0].name, "0");
  EXPECT_EQ(leaves[1].name, "0\\#1");
  EXPECT_EQ(tree.at("0\\#1").tensor().values<float>()[0], 2.0f);
}

TEST(TreeTest, SetKeepsFirstPositionAndReplacesValue) {
  Tree tree = Tree::map();
  tree.set("x", int64_t{1});
  tree.set("y", int64_t{2});
  tree.set("x", int64_t{3});
  ASSERT_EQ(tree.size(), 2u);
  EXPECT_EQ(std::get<std::string>(tree.entries()[0].key), "x");
  EXPECT_EQ(tree.entries()[0].value.integer(), 3);
}

TEST(TreeTest, WrongKindAccessThrowsInvalidArgument) {
  Tree tree(int64_t{1});
  try {
    tree.tensor();
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_THROW(tree.set("a", 1), Error);
  EXPECT_THROW(Tree::map().push_back(1), Error);
}

TEST(TreeTest, MissingNameIsNotFound) {
  Tree tree = Tree::map();
  tree.set("a", 1);
  EXPECT_EQ(tree.find_path("b"), nullptr);
  try {
    tree.at("a.b");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kNotFound);
    EXPECT_EQ(error.context().entry, "a.b");
  }
}

TEST(TreeTest, EqualityIsDeepAndBitwiseForFloats) {
  Tree a = Tree::map();
  a.set("nan", std::numeric_limits<double>::quiet_NaN());
  a.set("t", scalar(1));
  Tree b = a;
  EXPECT_TRUE(a == b);
  b.set("t", scalar(2));
  EXPECT_FALSE(a == b);
  Tree c = Tree::map();
  c.set("t", scalar(1));
  c.set("nan", std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(a == c) << "key order matters";
  EXPECT_FALSE(Tree(0.0) == Tree(-0.0));
  EXPECT_FALSE(Tree(int64_t{1}) == Tree(1.0));
  EXPECT_FALSE(Tree(std::string("x")) == Tree(Bytes{"x"}));
}

TEST(TreeTest, CopiesAreDeep) {
  Tree a = Tree::map();
  a.set("x", 1);
  Tree b = a;
  b.set("y", 2);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(b.size(), 2u);
  EXPECT_EQ(b.find("x")->integer(), 1);
}

TEST(TreeTest, EmptyContainersAreNotLeaves) {
  Tree tree = Tree::map();
  tree.set("empty", Tree::map());
  tree.set("none", Tree());
  EXPECT_EQ(names_of(tree.leaves()), (std::vector<std::string>{"none"}));
  EXPECT_TRUE(tree.at("empty").is_map());
}

TEST(TreeTest, ManyLeavesAreFoundByName) {
  Tree tree = Tree::map();
  for (int i = 0; i < 10000; ++i) tree.set("layer." + std::to_string(i) + ".w", int64_t{i});
  EXPECT_EQ(tree.at("layer.9999.w").integer(), 9999);
  EXPECT_EQ(tree.leaves().size(), 10000u);
}

TEST(TreeNameTest, NamesJoinWithDotsBelowTheRoot) {
  EXPECT_EQ(join_name("", "model"), "model");
  EXPECT_EQ(join_name("model", "encoder"), "model.encoder");
  EXPECT_EQ(join_name("model.layers", "0"), "model.layers.0");
  EXPECT_EQ(join_name("a", ""), "a.");
  std::string name;
  append_name(name, "model");
  append_name(name, "w");
  EXPECT_EQ(name, "model.w");
  EXPECT_EQ(join_names(std::vector<std::string>{}), "");
  EXPECT_EQ(join_names(std::vector<std::string>{"optimizer", "state", "0", "exp_avg"}), "optimizer.state.0.exp_avg");
  const std::vector<std::string> keys = {"a", "b", "c"};
  std::string step_by_step;
  for (const std::string& key : keys) step_by_step = join_name(step_by_step, key);
  EXPECT_EQ(join_names(keys), step_by_step) << "one rule";
}

TEST(TreeTest, LeavesAreSmallAndStringsAreSharedByCopies) {
  // A none, bool, int or float leaf is its 16 bytes where it is stored.
  static_assert(sizeof(Tree) <= 16);
  Tree list = Tree::list();
  list.push_back(std::string(100, 's'));
  list.push_back(Bytes{std::string(100, 'b')});
  const Tree copy = list;
  EXPECT_EQ(&copy[0].string(), &list[0].string());
  EXPECT_EQ(&copy[1].bytes(), &list[1].bytes());
  EXPECT_TRUE(copy[0].shared());
  EXPECT_EQ(copy, list);
  // Lists store no keys; entries() makes each position's key.
  Tree many = Tree::list();
  for (int i = 0; i < 3; ++i) many.push_back(i * 10);
  int64_t expected = 0;
  for (const TreeEntry& entry : many.entries()) {
    EXPECT_EQ(entry.key, Key(expected));
    EXPECT_EQ(entry.value.integer(), expected * 10);
    ++expected;
  }
  EXPECT_EQ(many.entries().at(2).key, Key(int64_t{2}));
  EXPECT_THROW(many.entries().at(3), Error);
  // Moving a child over its parent keeps the child.
  Tree nest = Tree::map();
  nest.set("inner", Tree::list()).push_back(7);
  nest = std::move(*nest.find(Key("inner")));
  ASSERT_TRUE(nest.is_list());
  EXPECT_EQ(nest[0].integer(), 7);
}

TEST(TreeTest, ForEachLeafNamesAsLeavesDoes) {
  // Colliding names ("a.b" twice) are escaped in both walks alike.
  Tree tree = Tree::map();
  tree.set("a.b", 1);
  tree.set("a", Tree::map()).set("b", 2);
  tree.set("l", Tree::list()).push_back(3);
  std::vector<std::string> walked;
  tree.for_each_leaf([&](std::string_view name, const Tree&) { walked.emplace_back(name); });
  std::vector<std::string> listed;
  for (const Tree::Leaf& leaf : tree.leaves()) listed.push_back(leaf.name);
  EXPECT_EQ(walked, listed);
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0], "a.b");
  EXPECT_NE(listed[1], "a.b");  // escaped, as the file comment of tree.h says
  EXPECT_EQ(listed[2], "l.0");
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// reserve() builds the key index up front; a map that stays smaller than the
// linear-search threshold, or grows past the reserved size, must still find
// every key and replace (not duplicate) a key set twice.
TEST(TreeTest, ReservedMapFindsEveryKeyAtEverySize) {
  for (const size_t reserved : {size_t{0}, size_t{20}, size_t{1000}}) {
    for (const size_t count : {size_t{3}, size_t{17}, size_t{2500}}) {
      Tree map = Tree::map();
      map.reserve(reserved);
      for (size_t i = 0; i < count; ++i) map.set("layer." + std::to_string(i), static_cast<int64_t>(i));
      map.set("layer.1", int64_t{-1});
      ASSERT_EQ(map.size(), count) << reserved << " " << count;
      for (size_t i = 0; i < count; ++i) {
        const Tree* found = map.find("layer." + std::to_string(i));
        ASSERT_NE(found, nullptr) << i;
        EXPECT_EQ(found->integer(), i == 1 ? -1 : static_cast<int64_t>(i));
      }
      EXPECT_EQ(map.find("layer." + std::to_string(count)), nullptr);
    }
  }
}

}  // namespace
}  // namespace ckpt
