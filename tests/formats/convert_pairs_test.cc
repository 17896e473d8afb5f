// ckpt::convert between every pair of registered formats that can read and
// write several tensors: the tensors arrive bit-exact under the same names.

#include <gtest/gtest.h>


#include "ckpt/checkpoint.h"
#include "ckpt/convert.h"
#include "ckpt/registry.h"
#include "support/random_tensor.h"
#include "support/string_keyed.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using Pair = std::tuple<const Format*, const Format*>;

class ConvertPairsTest : public ::testing::TestWithParam<Pair> {};

using testing::random_tensor;

std::filesystem::path path_for(const std::filesystem::path& dir, const Format& format, const std::string& stem) {
  const auto extensions = format.extensions();
  return dir / (stem + "_" + std::string(format.id()) + std::string(extensions.empty() ? "" : extensions.front()));
}

TEST_P(ConvertPairsTest, TensorsArriveBitExactUnderTheirNames) {
  const auto [from, to] = GetParam();
  testing::TempDir dir;
  // What every multi-tensor format holds: float32 and int64 tensors in a
  // nested map of string keys.
  Tree tree = Tree::map();
  Tree& model = tree.set("model", Tree::map());
  model.set("encoder", Tree::map()).set("weight", random_tensor(DType::kFloat32, {4, 3}, 1));
  model.set("head", Tree::map()).set("bias", random_tensor(DType::kFloat32, {3}, 2));
  tree.set("counts", random_tensor(DType::kInt64, {2}, 3));
  const auto src = path_for(dir.path(), *from, "src");
  const auto dst = path_for(dir.path(), *to, "dst");
  save(src, tree, {.format = std::string(from->id())});
  convert(src, dst, {.save = {.format = std::string(to->id())}});
  const Contents contents = open(dst);
  EXPECT_EQ(contents.format, to->id());
  const auto leaves = contents.tree.tensor_leaves();
  ASSERT_EQ(leaves.size(), 3u) << from->id() << " -> " << to->id();
  for (const char* name : {"model.encoder.weight", "model.head.bias", "counts"}) {
    const Tree* leaf = contents.tree.find_path(name);
    ASSERT_NE(leaf, nullptr) << name << ": " << from->id() << " -> " << to->id();
    EXPECT_TRUE(leaf->tensor().equals(tree.at(name).tensor())) << name << ": " << from->id() << " -> " << to->id();
  }
}

// A torch optimizer's state (integer keys, lists, a tuple, None, scalars)
// between formats that keep trees: it arrives whole, with lists and
// integer keys where both formats keep them, else as Flax's to_state_dict
// has them (maps keyed "0", "1", ..., keys as strings), names unchanged.
TEST_P(ConvertPairsTest, OptimizerStatesArriveAsTheTargetKeepsLists) {
  const auto [from, to] = GetParam();
  if (!from->capabilities().nested_tree || !to->capabilities().nested_tree) GTEST_SKIP() << "tensors only";
  testing::TempDir dir;
  Tree tree = Tree::map();
  Tree& state = tree.set("state", Tree::map());
  for (int64_t i : {0, 1}) {
    Tree& slot = state.set(i, Tree::map());
    slot.set("step", random_tensor(DType::kFloat32, {}, 10 + static_cast<uint32_t>(i)));
    slot.set("exp_avg", random_tensor(DType::kFloat32, {3, 2}, 20 + static_cast<uint32_t>(i)));
  }
  Tree group = Tree::map();
  group.set("lr", 0.01);
  Tree betas = Tree::list();
  betas.push_back(0.9);
  betas.push_back(0.999);
  group.set("betas", betas);
  group.set("foreach", Tree());
  Tree params = Tree::list();
  params.push_back(int64_t{0});
  params.push_back(int64_t{1});
  group.set("params", params);
  Tree groups = Tree::list();
  groups.push_back(group);
  tree.set("param_groups", groups);
  const auto src = path_for(dir.path(), *from, "src");
  const auto dst = path_for(dir.path(), *to, "dst");
  save(src, tree, {.format = std::string(from->id())});
  convert(src, dst, {.save = {.format = std::string(to->id())}});
  const bool keeps = from->capabilities().lists_and_int_keys && to->capabilities().lists_and_int_keys;
  EXPECT_TRUE(load(dst) == (keeps ? tree : testing::string_keyed(tree))) << from->id() << " -> " << to->id();
}

std::vector<Pair> pairs() {
  std::vector<Pair> out;
  for (const Format* from : formats()) {
    for (const Format* to : formats()) {
      const auto a = from->capabilities(), b = to->capabilities();
      if (a.read && a.write && !a.single_tensor && b.read && b.write && !b.single_tensor) out.emplace_back(from, to);
    }
  }
  return out;
}

std::string pair_name(const ::testing::TestParamInfo<Pair>& info) {
  return std::string(std::get<0>(info.param)->id()) + "_to_" + std::string(std::get<1>(info.param)->id());
}

INSTANTIATE_TEST_SUITE_P(AllPairs, ConvertPairsTest, ::testing::ValuesIn(pairs()), pair_name);

}  // namespace
}  // namespace ckpt
