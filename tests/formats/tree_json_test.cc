#include "formats/tree_json.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "ckpt/error.h"
#include "core/json_writer.h"

namespace ckpt {
namespace {

using detail::base64_decode;
using detail::base64_encode;
using detail::tree_from_json;
using detail::tree_to_json;

Tensor floats(std::initializer_list<float> values) {
  return Tensor::from_values<float>(DType::kFloat32, {static_cast<int64_t>(values.size())},
                                    std::span(values.begin(), values.size()));
}

// Resolves names against the tensor leaves of `tree` (as a format would
// against its stored tensors), counting how often each is asked for.
struct Store {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, int> asked;
  explicit Store(const Tree& tree) {
    for (const Tree::Leaf& leaf : tree.tensor_leaves()) tensors.emplace(leaf.name, leaf.value->tensor());
  }
  detail::TensorResolver resolver() {
    return [this](std::string_view name) {
      ++asked[std::string(name)];
      auto found = tensors.find(std::string(name));
      if (found == tensors.end()) throw Error(ErrorCode::kCorrupt, "no tensor " + std::string(name));
      return found->second;
    };
  }
};

Tree round_trip(const Tree& tree) {
  Store store(tree);
  return tree_from_json(tree_to_json(tree), store.resolver());
}

Tree no_tensors_parse(std::string_view json) {
  return tree_from_json(json, [](std::string_view name) -> Tensor {
    throw Error(ErrorCode::kCorrupt, "unexpected tensor " + std::string(name));
  });
}

ErrorCode parse_error(std::string_view json) {
  try {
    no_tensors_parse(json);
  } catch (const Error& error) {
    return error.code();
  }
  ADD_FAILURE() << "no error for " << json;
  return ErrorCode::kInvalidArgument;
}

Tree every_leaf_kind() {
  Tree inner = Tree::map();
  inner.set("w", floats({1, 2}));
  inner.set(int64_t{7}, Tree(Bytes{std::string("\x00\xff\x10", 3)}));
  Tree list = Tree::list();
  list.push_back(Tree());
  list.push_back(true);
  list.push_back(int64_t{-42});
  list.push_back(2.5);
  list.push_back("text \"quoted\" \\ \n ünïcödé");
  list.push_back(Tree::map());
  list.push_back(Tree::list());
  Tree root = Tree::map();
  root.set("model", inner);
  root.set("items", list);
  root.set("b", floats({3}));
  return root;
}

TEST(TreeJsonTest, EncodesEachKindAsDocumented) {
  Tree tree = Tree::map();
  tree.set("step", int64_t{3});
  Tree model = Tree::map();
  model.set("w", floats({1}));
  tree.set("model", model);
  Tree slots = Tree::map();
  Tree values = Tree::list();
  values.push_back(1.5);
  slots.set(int64_t{0}, values);
  tree.set("opt", slots);
  tree.set("none", Tree());
  tree.set("flag", false);
  tree.set("blob", Tree(Bytes{"foo"}));
  EXPECT_EQ(tree_to_json(tree),
            R"({"map":[["step",3],["model",{"map":[["w",{"tensor":"model.w"}]]}],)"
            R"(["opt",{"map":[[0,[{"float":1.5}]]]}],["none",null],["flag",false],)"
            R"(["blob",{"bytes":"Zm9v"}]]})");
}

TEST(TreeJsonTest, RoundTripsEveryLeafKindExactly) {
  const Tree tree = every_leaf_kind();
  const Tree back = round_trip(tree);
  EXPECT_TRUE(back == tree);
  EXPECT_EQ(back.find("model")->entries()[1].key, Key(int64_t{7}));
  EXPECT_EQ(back.find("items")->size(), 7u);
  EXPECT_TRUE((*back.find("items"))[5].is_map());
  EXPECT_EQ((*back.find("items"))[5].size(), 0u);
  EXPECT_TRUE((*back.find("items"))[6].is_list());
}

TEST(TreeJsonTest, IntegerAndStringKeysStayDistinct) {
  Tree tree = Tree::map();
  tree.set(int64_t{1}, int64_t{10});
  tree.set(std::string("1"), int64_t{20});
  tree.set(int64_t{-5}, int64_t{30});
  tree.set(std::numeric_limits<int64_t>::min(), int64_t{40});
  EXPECT_EQ(tree_to_json(tree), R"({"map":[[1,10],["1",20],[-5,30],[-9223372036854775808,40]]})");
  const Tree back = round_trip(tree);
  ASSERT_TRUE(back == tree);
  EXPECT_EQ(back.find(int64_t{1})->integer(), 10);
  EXPECT_EQ(back.find(std::string("1"))->integer(), 20);
}

TEST(TreeJsonTest, KeepsMapOrderNotSorted) {
  Tree tree = Tree::map();
  for (const char* key : {"zeta", "alpha", "mid", ""}) tree.set(std::string(key), Tree());
  const Tree back = round_trip(tree);
  ASSERT_EQ(back.size(), 4u);
  EXPECT_EQ(back.entries()[0].key, Key(std::string("zeta")));
  EXPECT_EQ(back.entries()[3].key, Key(std::string("")));
}

TEST(TreeJsonTest, EmptyContainersAtTheRoot) {
  EXPECT_EQ(tree_to_json(Tree::map()), R"({"map":[]})");
  EXPECT_EQ(tree_to_json(Tree::list()), "[]");
  EXPECT_TRUE(round_trip(Tree::map()).is_map());
  EXPECT_TRUE(round_trip(Tree::list()).is_list());
  EXPECT_TRUE(round_trip(Tree()).is_none());
}

TEST(TreeJsonTest, FloatsRoundTripBitExact) {
  const double values[] = {0.0,
                           -0.0,
                           0.1,
                           1.0,
                           -1e300,
                           5e-324,
                           std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::bit_cast<double>(0x7ff8000000000000ull),
                           std::bit_cast<double>(0xfff8000000000000ull),
                           std::bit_cast<double>(0x7ff0000000000001ull),
                           std::bit_cast<double>(0x7ff8dead0000beefull)};
  for (double value : values) {
    const Tree back = round_trip(Tree(value));
    ASSERT_EQ(back.kind(), Tree::Kind::kFloat);
    EXPECT_EQ(std::bit_cast<uint64_t>(back.real()), std::bit_cast<uint64_t>(value)) << tree_to_json(Tree(value));
  }
  EXPECT_EQ(tree_to_json(Tree(-0.0)), R"({"float":-0.0})");
  EXPECT_EQ(tree_to_json(Tree(1.0)), R"({"float":1.0})");
  EXPECT_EQ(tree_to_json(Tree(std::numeric_limits<double>::infinity())), R"({"float":"inf"})");
  EXPECT_EQ(tree_to_json(Tree(std::bit_cast<double>(0x7ff8000000000000ull))), R"({"float":"nan"})");
  EXPECT_EQ(tree_to_json(Tree(std::bit_cast<double>(0xfff8000000000000ull))), R"({"float":"nan:fff8000000000000"})");
}

TEST(TreeJsonTest, IntegersAtTheLimitsOfInt64) {
  for (int64_t value : {std::numeric_limits<int64_t>::min(), int64_t{0}, std::numeric_limits<int64_t>::max()}) {
    const Tree back = round_trip(Tree(value));
    ASSERT_EQ(back.kind(), Tree::Kind::kInt);
    EXPECT_EQ(back.integer(), value);
  }
}

TEST(TreeJsonTest, StringsWithEscapesAndUnicode) {
  std::string all_controls;
  for (int c = 1; c < 0x20; ++c) all_controls += static_cast<char>(c);
  for (const std::string& text : {std::string(""), std::string("\"\\/"), all_controls, std::string("日本語 🙂"),
                                  std::string("nul\0inside", 10)}) {
    const Tree back = round_trip(Tree(text));
    ASSERT_EQ(back.kind(), Tree::Kind::kString);
    EXPECT_EQ(back.string(), text);
  }
}

TEST(TreeJsonTest, Base64MatchesRfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    EXPECT_EQ(base64_decode(encoded), plain);
  }
  std::string every_byte;
  for (int c = 0; c < 256; ++c) every_byte += static_cast<char>(c);
  EXPECT_EQ(base64_decode(base64_encode(every_byte)), every_byte);
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zh==", "Zm9=", "Zm 9", "Zg==Zg==", "=Zg="}) {
    EXPECT_THROW(base64_decode(bad), Error) << bad;
  }
}

TEST(TreeJsonTest, TensorLeavesResolveByStoredNameOnce) {
  const Tree tree = every_leaf_kind();
  Store store(tree);
  const Tree back = tree_from_json(tree_to_json(tree), store.resolver());
  EXPECT_EQ(store.asked, (std::map<std::string, int>{{"model.w", 1}, {"b", 1}}));
  EXPECT_TRUE(back.at("model.w").tensor().equals(floats({1, 2})));
}

TEST(TreeJsonTest, CollidingNamesUseTheTreesEscapedNames) {
  Tree tree = Tree::map();
  tree.set("a.b", floats({1}));
  Tree a = Tree::map();
  a.set("b", floats({2}));
  tree.set("a", a);
  const std::string json = tree_to_json(tree);
  const auto leaves = tree.tensor_leaves();
  ASSERT_EQ(leaves.size(), 2u);
  ASSERT_NE(leaves[0].name, leaves[1].name);
  std::string escaped_name;
  detail::append_json_string(escaped_name, leaves[1].name);
  EXPECT_NE(json.find(R"({"tensor":)" + escaped_name + "}"), std::string::npos) << json;
  const Tree back = round_trip(tree);
  EXPECT_TRUE(back == tree);
  EXPECT_TRUE(back.find("a")->find("b")->tensor().equals(floats({2})));
}

TEST(TreeJsonTest, ResolverErrorsNameTheTreePath) {
  Tree tree = Tree::map();
  Tree inner = Tree::list();
  inner.push_back(floats({1}));
  tree.set("outer", inner);
  try {
    no_tensors_parse(tree_to_json(tree));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().entry, "outer.0");
  }
}

TEST(TreeJsonTest, RefusesStringsThatAreNotUtf8) {
  try {
    tree_to_json(Tree(std::string("\xff\xfe")));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
  }
  Tree bad_key = Tree::map();
  bad_key.set(std::string("ok"), Tree::map()).set(std::string("\xc3"), int64_t{1});
  try {
    tree_to_json(bad_key);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_EQ(error.context().entry, "ok.\xc3");
  }
}

TEST(TreeJsonTest, RefusesATensorLeafListThatDoesNotMatch) {
  const Tree tree = every_leaf_kind();
  std::vector<Tree::Leaf> leaves = tree.tensor_leaves();
  leaves.pop_back();
  detail::JsonWriter out;
  EXPECT_THROW(detail::write_tree_json(out, tree, leaves), Error);
}

TEST(TreeJsonTest, MalformedSkeletonsAreCorrupt) {
  const char* cases[] = {
      "{",                                      // not JSON
      R"({"map":[],"float":1.0})",              // two tags
      R"({"list":[]})",                         // unknown tag
      "{}",                                     // no tag
      "1.5",                                    // bare float
      "18446744073709551615",                   // beyond int64
      R"({"map":[["a"]]})",                     // pair of one
      R"({"map":[["a",1,2]]})",                 // pair of three
      R"({"map":{"a":1}})",                     // map not an array
      R"({"map":[[1.5,1]]})",                   // key neither string nor int
      R"({"map":[[null,1]]})",                  // key null
      R"({"map":[["a",1],["a",2]]})",           // duplicate string key
      R"({"map":[[3,1],[3,2]]})",               // duplicate integer key
      R"({"float":"NaN"})",                     // unknown float text
      R"({"float":"nan:7ff0000000000000"})",    // bits of inf, not NaN
      R"({"float":"nan:7FF8000000000001"})",    // upper-case hex
      R"({"float":2})",                         // integer where a float belongs
      R"({"float":true})",                      // wrong type
      R"({"bytes":"Zg="})",                     // bad base64
      R"({"bytes":3})",                         // bytes not a string
      R"({"tensor":3})",                        // tensor name not a string
  };
  for (const char* json : cases) EXPECT_EQ(parse_error(json), ErrorCode::kCorrupt) << json;
}

}  // namespace
}  // namespace ckpt
