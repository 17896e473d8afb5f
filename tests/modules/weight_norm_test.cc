// Weight norm's converters and formula (ckpt/weight_norm.h, ckpt/formula.h):
// hand-computed 2x3 weights for dim 0, 1, negative dims and all dims, the
// three namings found in flat and nested trees, the formula against fold,
// and every refusal one defect at a time. Against real torch modules:
// tests/python/test_weight_norm.py.

#include "ckpt/weight_norm.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <string>
#include <vector>

#include "ckpt/cast.h"
#include "ckpt/error.h"
#include "support/error_of.h"

namespace ckpt {
namespace {

Tensor f32(Shape shape, std::vector<float> values) {
  return Tensor::from_values<float>(DType::kFloat32, std::move(shape), std::span<const float>(values));
}

std::vector<float> floats_of(const Tree& leaf) {
  const Tensor wide = cast(leaf.tensor(), DType::kFloat32);
  const auto values = wide.values<float>();
  return {values.begin(), values.end()};
}

using ckpt::testing::error_of;

std::vector<std::string> names_of(const Tree& tree) {
  std::vector<std::string> names;
  for (const Tree::Leaf& leaf : tree.leaves()) names.push_back(leaf.name);
  return names;
}

// Hand-computed: rows of A have norms 5 and 10, columns of B 5, 5 and 10,
// and C as a whole has norm 5.
const std::vector<float> kA = {3, 4, 0, 6, 0, 8};
const std::vector<float> kB = {3, 0, 6, 4, 5, 8};
const std::vector<float> kC = {1, 2, 2, 0, 0, 4};

TEST(ModuleWeightNorm, FoldDimZeroOldNames) {
  Tree tree = Tree::map();
  tree.set("lin.weight_g", f32({2, 1}, {10, 5}));  // scales rows by 2 and 0.5
  tree.set("lin.weight_v", f32({2, 3}, kA));
  tree.set("lin.bias", f32({2}, {1, 2}));
  const Tree folded = fold_weight_norm(tree);
  EXPECT_EQ(names_of(folded), (std::vector<std::string>{"lin.weight", "lin.bias"}));
  EXPECT_EQ(folded.at("lin.weight").tensor().shape(), (Shape{2, 3}));
  EXPECT_EQ(floats_of(folded.at("lin.weight")), (std::vector<float>{6, 8, 0, 3, 0, 4}));
  EXPECT_TRUE(folded.at("lin.bias").tensor().same_memory(tree.at("lin.bias").tensor()));
}

TEST(ModuleWeightNorm, FoldDimOneNewNames) {
  Tree tree = Tree::map();
  tree.set("parametrizations.weight.original0", f32({1, 3}, {10, 1, 5}));  // columns by 2, 0.2, 0.5
  tree.set("parametrizations.weight.original1", f32({2, 3}, kB));
  const Tree folded = fold_weight_norm(tree);
  EXPECT_EQ(names_of(folded), (std::vector<std::string>{"weight"}));
  const std::vector<float> w = floats_of(folded.at("weight"));
  const std::vector<float> expected = {6, 0, 3, 8, 1, 4};
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], expected[i], 1e-6) << i;
}

TEST(ModuleWeightNorm, FoldAllDimsZeroDimensionalG) {
  Tree tree = Tree::map();
  tree.set("conv.weight_g", f32({}, {10}));  // dim=None: one norm, 5
  tree.set("conv.weight_v", f32({2, 3}, kC));
  const std::vector<WeightNormParameter> found = find_weight_norms(tree);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].dim, kWeightNormAllDims);
  EXPECT_EQ(floats_of(fold_weight_norm(tree).at("conv.weight")), (std::vector<float>{2, 4, 4, 0, 0, 8}));
}

TEST(ModuleWeightNorm, FoldReturnnCommonNamesWithEpsilon) {
  Tree tree = Tree::map();
  Tree& lin = tree.set("lin", Tree::map());
  Tree& normalized = lin.set("weight_normalized", Tree::map());
  normalized.set("g", f32({2}, {10, 5}));  // 1-d g over dim 0
  normalized.set("v", f32({2, 3}, kA));
  lin.set("bias", f32({2}, {0, 0}));
  const std::vector<WeightNormParameter> found = find_weight_norms(tree);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].names, WeightNormNames::kReturnnCommon);
  EXPECT_EQ(found[0].name, "lin.weight");
  EXPECT_EQ(found[0].dim, 0);
  const Tree folded = fold_weight_norm(tree);
  // The nested map that held g and v is gone; w is in the module's map.
  ASSERT_NE(folded.find_key_path({"lin", "weight"}), nullptr);
  EXPECT_EQ(folded.find_key_path({"lin", "weight_normalized"}), nullptr);
  const std::vector<float> w = floats_of(folded.at("lin.weight"));
  // w = v * g / sqrt(25 + 1e-6) (row 0) and / sqrt(100 + 1e-6) (row 1).
  for (size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(w[i], static_cast<float>(kA[i] * 10 / std::sqrt(25 + 1e-6)));
  for (size_t i = 3; i < 6; ++i) EXPECT_FLOAT_EQ(w[i], static_cast<float>(kA[i] * 5 / std::sqrt(100 + 1e-6)));
}

TEST(ModuleWeightNorm, FoldNestedNewNamesDropsEmptyMaps) {
  Tree tree = Tree::map();
  Tree& lin = tree.set("model", Tree::map()).set("lin", Tree::map());
  Tree& weight = lin.set("parametrizations", Tree::map()).set("weight", Tree::map());
  weight.set("original0", f32({2, 1}, {10, 5}));
  weight.set("original1", f32({2, 3}, kA));
  lin.set("bias", f32({2}, {1, 2}));
  const Tree folded = fold_weight_norm(tree);
  EXPECT_EQ(names_of(folded), (std::vector<std::string>{"model.lin.weight", "model.lin.bias"}));
  ASSERT_NE(folded.find_key_path({"model", "lin", "weight"}), nullptr);
  EXPECT_EQ(floats_of(folded.at("model.lin.weight")), (std::vector<float>{6, 8, 0, 3, 0, 4}));
}

TEST(ModuleWeightNorm, FoldKeepsDtype) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
    Tree tree = Tree::map();
    tree.set("weight_g", cast(f32({2, 1}, {10, 5}), dtype));
    tree.set("weight_v", cast(f32({2, 3}, kA), dtype));
    const Tree folded = fold_weight_norm(tree);
    EXPECT_EQ(folded.at("weight").tensor().dtype(), dtype);
    EXPECT_TRUE(folded.at("weight").tensor().equals(cast(f32({2, 3}, {6, 8, 0, 3, 0, 4}), dtype)))
        << dtype_name(dtype);
  }
  // Mixed: torch promotes float16 with bfloat16 to float32.
  Tree tree = Tree::map();
  tree.set("weight_g", cast(f32({2, 1}, {10, 5}), DType::kFloat16));
  tree.set("weight_v", cast(f32({2, 3}, kA), DType::kBFloat16));
  EXPECT_EQ(fold_weight_norm(tree).at("weight").tensor().dtype(), DType::kFloat32);
}

TEST(ModuleWeightNorm, UnfoldDims) {
  struct Case {
    int64_t dim;
    std::vector<float> weight;
    Shape g_shape;
    std::vector<float> g;
  };
  const std::vector<Case> cases = {
      {0, kA, {2, 1}, {5, 10}},
      {-2, kA, {2, 1}, {5, 10}},  // counts from the end: dim 0 of a 2-d weight
      {1, kB, {1, 3}, {5, 5, 10}},
      {-1, kC, {}, {5}},  // torch's -1 is dim=None, not the last dim
  };
  for (const Case& c : cases) {
    Tree tree = Tree::map();
    tree.set("lin.weight", f32({2, 3}, c.weight));
    tree.set("lin.bias", f32({2}, {1, 2}));
    const Tree unfolded = unfold_weight_norm(tree, c.dim);
    EXPECT_EQ(names_of(unfolded), (std::vector<std::string>{"lin.parametrizations.weight.original0",
                                                            "lin.parametrizations.weight.original1", "lin.bias"}))
        << c.dim;
    const Tensor& g = unfolded.at("lin.parametrizations.weight.original0").tensor();
    EXPECT_EQ(g.shape(), c.g_shape) << c.dim;
    EXPECT_EQ(floats_of(unfolded.at("lin.parametrizations.weight.original0")), c.g) << c.dim;
    EXPECT_TRUE(unfolded.at("lin.parametrizations.weight.original1").tensor().same_memory(tree.at("lin.weight").tensor()));
    // And back: w again (g / ||v|| is 1 up to rounding).
    const Tree folded = fold_weight_norm(unfolded);
    const std::vector<float> w = floats_of(folded.at("lin.weight"));
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], c.weight[i], 1e-6) << c.dim;
  }
}

TEST(ModuleWeightNorm, UnfoldNamings) {
  Tree tree = Tree::map();
  tree.set("lin.weight", f32({2, 3}, kA));
  const Tree old_names = unfold_weight_norm(tree, 0, {.names = WeightNormNames::kTorchOld});
  EXPECT_EQ(names_of(old_names), (std::vector<std::string>{"lin.weight_g", "lin.weight_v"}));
  const Tree rc = unfold_weight_norm(tree, 0, {.names = WeightNormNames::kReturnnCommon});
  EXPECT_EQ(names_of(rc), (std::vector<std::string>{"lin.weight_normalized.g", "lin.weight_normalized.v"}));
  EXPECT_EQ(rc.at("lin.weight_normalized.g").tensor().shape(), (Shape{2}));
  EXPECT_FLOAT_EQ(floats_of(rc.at("lin.weight_normalized.g"))[0], static_cast<float>(std::sqrt(25 + 1e-6)));
  // Nested: one map per part.
  const Tree nested = unfold_weight_norm(tree, 0, {.names = WeightNormNames::kReturnnCommon, .nested = true});
  EXPECT_NE(nested.find_key_path({"lin", "weight_normalized", "g"}), nullptr);
}

TEST(ModuleWeightNorm, UnfoldSelection) {
  Tree tree = Tree::map();
  tree.set("lin.weight", f32({2, 3}, kA));
  tree.set("norm.weight", f32({3}, {1, 1, 1}));  // 1-d: a layer norm's scale
  tree.set("emb.weights", f32({2, 3}, kA));      // not "*.weight"
  tree.set("ids.weight", Tensor::zeros(DType::kInt64, {2, 2}));
  EXPECT_EQ(weight_norm_targets(tree), (std::vector<std::string>{"lin.weight"}));
  EXPECT_EQ(weight_norm_targets(tree, {.parameters = {"emb.weights"}}), (std::vector<std::string>{"emb.weights"}));
  const UnfoldWeightNormOptions by_predicate{
      .select = [](std::string_view name, const Tensor& tensor) { return name.starts_with("norm"); }};
  EXPECT_EQ(weight_norm_targets(tree, by_predicate), (std::vector<std::string>{"norm.weight"}));
  const Tree unfolded = unfold_weight_norm(tree, 0, {.parameters = {"norm.weight"}});
  EXPECT_EQ(unfolded.at("norm.parametrizations.weight.original0").tensor().shape(), (Shape{3}));
}

TEST(ModuleWeightNorm, ConvertNamesRoundTrip) {
  Tree tree = Tree::map();
  tree.set("enc.conv.weight_g", f32({2, 1}, {10, 5}));
  tree.set("enc.conv.weight_v", f32({2, 3}, kA));
  tree.set("enc.conv.bias", f32({2}, {1, 2}));
  const Tree modern = convert_weight_norm_names(tree, std::nullopt, WeightNormNames::kTorchNew);
  EXPECT_EQ(names_of(modern), (std::vector<std::string>{"enc.conv.parametrizations.weight.original0",
                                                        "enc.conv.parametrizations.weight.original1",
                                                        "enc.conv.bias"}));
  const Tree rc = convert_weight_norm_names(modern, WeightNormNames::kTorchNew, WeightNormNames::kReturnnCommon);
  EXPECT_EQ(rc.at("enc.conv.weight_normalized.g").tensor().shape(), (Shape{2}));
  EXPECT_EQ(floats_of(rc.at("enc.conv.weight_normalized.g")), (std::vector<float>{10, 5}));
  const Tree back = convert_weight_norm_names(rc, std::nullopt, WeightNormNames::kTorchOld);
  EXPECT_TRUE(back == tree);
  // `from` limits what is renamed.
  EXPECT_TRUE(convert_weight_norm_names(tree, WeightNormNames::kTorchNew, WeightNormNames::kReturnnCommon) == tree);
}

TEST(ModuleWeightNorm, DetectsEveryNaming) {
  Tree tree = Tree::map();
  tree.set("a.weight_g", f32({2, 1}, {1, 1}));
  tree.set("a.weight_v", f32({2, 3}, kA));
  tree.set("b.parametrizations.kernel.original0", f32({1, 3}, {1, 1, 1}));
  tree.set("b.parametrizations.kernel.original1", f32({2, 3}, kB));
  tree.set("c.w_normalized.g", f32({3}, {1, 1, 1}));
  tree.set("c.w_normalized.v", f32({2, 3}, kB));
  tree.set("attn.bias_v", f32({1, 3}, {0, 0, 0}));  // a v alone (nn.MultiheadAttention) is no parameter
  const std::vector<WeightNormParameter> found = find_weight_norms(tree);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].name, "a.weight");
  EXPECT_EQ(found[0].names, WeightNormNames::kTorchOld);
  EXPECT_EQ(found[0].dim, 0);
  EXPECT_EQ(found[1].name, "b.kernel");
  EXPECT_EQ(found[1].names, WeightNormNames::kTorchNew);
  EXPECT_EQ(found[1].g_name, "b.parametrizations.kernel.original0");
  EXPECT_EQ(found[1].v_name, "b.parametrizations.kernel.original1");
  EXPECT_EQ(found[1].dim, 1);
  EXPECT_EQ(found[2].name, "c.w");
  EXPECT_EQ(found[2].names, WeightNormNames::kReturnnCommon);
  EXPECT_EQ(found[2].dim, 1);
  // Only the namings asked for.
  EXPECT_EQ(find_weight_norms(tree, {.names = {WeightNormNames::kTorchNew}}).size(), 1u);
  EXPECT_EQ(names_of(fold_weight_norm(tree)), (std::vector<std::string>{"a.weight", "b.kernel", "c.w", "attn.bias_v"}));
}

TEST(ModuleWeightNorm, NamesIds) {
  for (const WeightNormNames names :
       {WeightNormNames::kTorchOld, WeightNormNames::kTorchNew, WeightNormNames::kReturnnCommon}) {
    EXPECT_EQ(weight_norm_names_from_id(weight_norm_names_id(names)), names);
  }
  EXPECT_EQ(weight_norm_names_id(WeightNormNames::kTorchOld), "old");
  EXPECT_EQ(error_of([] { weight_norm_names_from_id("newest"); }).code(), ErrorCode::kInvalidArgument);
}

// One defect at a time; each error names the parameter.
TEST(ModuleWeightNorm, RefusesDefects) {
  struct Case {
    const char* what;
    std::vector<std::pair<std::string, Tree>> leaves;
    std::string parameter;
  };
  const std::vector<Case> cases = {
      {"g without v (old)", {{"lin.weight_g", f32({2, 1}, {1, 1})}}, "lin.weight"},
      {"original0 without original1",
       {{"lin.parametrizations.weight.original0", f32({2, 1}, {1, 1})}},
       "lin.weight"},
      {"g without v (returnn_common)", {{"lin.weight_normalized.g", f32({2}, {1, 1})}}, "lin.weight"},
      {"integer g",
       {{"lin.weight_g", Tensor::zeros(DType::kInt32, {2, 1})}, {"lin.weight_v", f32({2, 3}, kA)}},
       "lin.weight"},
      {"integer v",
       {{"lin.weight_g", f32({2, 1}, {1, 1})}, {"lin.weight_v", Tensor::zeros(DType::kInt64, {2, 3})}},
       "lin.weight"},
      {"v not a tensor", {{"lin.weight_g", f32({2, 1}, {1, 1})}, {"lin.weight_v", Tree(int64_t{3})}}, "lin.weight"},
      {"g of another size", {{"lin.weight_g", f32({3, 1}, {1, 1, 1})}, {"lin.weight_v", f32({2, 3}, kA)}}, "lin.weight"},
      {"g over two dims", {{"w_g", f32({2, 3}, kA)}, {"w_v", f32({2, 3}, kA)}}, "w"},
      {"g of another ndim (torch)", {{"w_g", f32({2}, {1, 1})}, {"w_v", f32({2, 3}, kA)}}, "w"},
      {"returnn_common g of no dim's size", {{"w_normalized.g", f32({4}, {1, 1, 1, 1})}, {"w_normalized.v", f32({2, 3}, kA)}}, "w"},
      {"returnn_common g of several dims' size",
       {{"w_normalized.g", f32({3}, {1, 1, 1})}, {"w_normalized.v", Tensor::zeros(DType::kFloat32, {3, 3})}},
       "w"},
      {"plain name taken", {{"w_g", f32({2, 1}, {1, 1})}, {"w_v", f32({2, 3}, kA)}, {"w", f32({2, 3}, kA)}}, "w"},
  };
  for (const Case& c : cases) {
    Tree tree = Tree::map();
    for (const auto& [name, value] : c.leaves) tree.set(name, value);
    const Error error = error_of([&] { fold_weight_norm(tree); });
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << c.what << ": " << error.what();
    EXPECT_EQ(error.context().entry, c.parameter) << c.what << ": " << error.what();
  }
  // The ambiguous returnn_common g, told its dim.
  Tree square = Tree::map();
  square.set("w_normalized.g", f32({3}, {1, 1, 1}));
  square.set("w_normalized.v", f32({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(find_weight_norms(square, {.dim = 1}).at(0).dim, 1);
}

TEST(ModuleWeightNorm, UnfoldRefusesDefects) {
  Tree tree = Tree::map();
  tree.set("lin.weight", f32({2, 3}, kA));
  tree.set("ids", Tensor::zeros(DType::kInt32, {2, 3}));
  EXPECT_EQ(error_of([&] { unfold_weight_norm(tree, 2); }).context().entry, "lin.weight");
  EXPECT_EQ(error_of([&] { unfold_weight_norm(tree, -3); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { unfold_weight_norm(tree, 0, {.parameters = {"nope"}}); }).code(), ErrorCode::kNotFound);
  const Error integer = error_of([&] { unfold_weight_norm(tree, 0, {.parameters = {"ids"}}); });
  EXPECT_EQ(integer.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(integer.context().entry, "ids");
  Tree taken = tree;
  taken.set("lin.parametrizations.weight.original1", f32({1}, {0}));
  EXPECT_EQ(error_of([&] { unfold_weight_norm(taken, 0); }).context().entry, "lin.weight");
}

// A deterministic float32 tensor with values in [-1, 1).
Tensor pattern(Shape shape, uint32_t seed) {
  std::vector<float> values(checked_numel(shape));
  for (float& value : values) {
    seed = seed * 1664525u + 1013904223u;
    value = static_cast<float>(seed >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return f32(std::move(shape), values);
}

TEST(ModuleWeightNorm, FormulaEqualsFold) {
  const Shape shape = {4, 3, 5};
  for (const WeightNormNames names :
       {WeightNormNames::kTorchOld, WeightNormNames::kTorchNew, WeightNormNames::kReturnnCommon}) {
    for (const int64_t dim : {0, 1, 2, -2, -1}) {
      Tree tree = Tree::map();
      tree.set("conv.weight", pattern(shape, 7 + static_cast<uint32_t>(dim)));
      const Tree raw = unfold_weight_norm(tree, dim, {.names = names});
      const WeightNormParameter parameter = find_weight_norms(raw).at(0);
      // g other than the norm, so that w is not v.
      Tree scaled = Tree::map();
      for (const Tree::Leaf& leaf : raw.leaves()) {
        const bool is_g = leaf.name == parameter.g_name;
        Tensor t = leaf.value->tensor();
        if (is_g) {
          std::vector<float> g = floats_of(*leaf.value);
          for (size_t i = 0; i < g.size(); ++i) g[i] *= static_cast<float>(i + 2);
          t = f32(t.shape(), g);
        }
        scaled.set(leaf.name, t);
      }
      const Formula formula = weight_norm_formula(parameter);
      EXPECT_EQ(formula.parameters(), (std::vector<std::string>{parameter.v_name, parameter.g_name}));
      const Tensor evaluated = cast(evaluate(formula, scaled), DType::kFloat32);
      const Tree folded_tree = fold_weight_norm(scaled);
      const Tensor& folded = folded_tree.at("conv.weight").tensor();
      EXPECT_TRUE(evaluated.equals(folded)) << weight_norm_names_id(names) << " dim " << dim << ": "
                                            << formula.text() << " " << shape_text(evaluated.shape()) << " vs "
                                            << shape_text(folded.shape()) << " " << floats_of(Tree(evaluated))[0]
                                            << " vs " << floats_of(Tree(folded))[0];
    }
  }
}

TEST(ModuleWeightNorm, FormulaText) {
  Tree tree = Tree::map();
  tree.set("lin.weight_g", f32({2, 1}, {10, 5}));
  tree.set("lin.weight_v", f32({2, 3}, kA));
  const Formula torch_formula = weight_norm_formula(find_weight_norms(tree).at(0));
  EXPECT_EQ(torch_formula.text(),
            R"(mul("lin.weight_v", div("lin.weight_g", norm_except_dim("lin.weight_v", 2, 0))))");
  Tree rc = Tree::map();
  rc.set("w_normalized.g", f32({3}, {1, 1, 1}));
  rc.set("w_normalized.v", f32({2, 3}, kB));
  EXPECT_EQ(weight_norm_formula(find_weight_norms(rc).at(0)).text(),
            R"(mul("w_normalized.v", div(reshape("w_normalized.g", [1, 3]), )"
            R"(sqrt(add(sum_squares_except_dim("w_normalized.v", 1), 1e-06)))))");
  // The JSON reads back as the same tree of ops.
  simdjson::dom::parser parser;
  const simdjson::dom::element root = parser.parse(torch_formula.json());
  EXPECT_EQ(std::string_view(root["op"]), "mul");
  EXPECT_EQ(std::string_view(root["args"].at(0)["op"]), "param");
  EXPECT_EQ(std::string_view(root["args"].at(0)["name"]), "lin.weight_v");
  const simdjson::dom::element norm = root["args"].at(1)["args"].at(1);
  EXPECT_EQ(std::string_view(norm["op"]), "norm_except_dim");
  EXPECT_EQ(int64_t(norm["p"]), 2);
  EXPECT_EQ(int64_t(norm["dim"]), 0);
}

TEST(ModuleWeightNorm, EvaluateRefusesDefects) {
  Tree tree = Tree::map();
  tree.set("a", f32({2, 3}, kA));
  tree.set("b", f32({2}, {1, 2}));
  tree.set("i", Tensor::zeros(DType::kInt8, {2}));
  EXPECT_EQ(error_of([&] { evaluate(Formula::parameter("nope"), tree); }).code(), ErrorCode::kNotFound);
  EXPECT_EQ(error_of([&] { evaluate(Formula::parameter("i"), tree); }).context().entry, "i");
  const Formula a = Formula::parameter("a"), b = Formula::parameter("b");
  EXPECT_EQ(error_of([&] { evaluate(Formula::mul(a, b), tree); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { evaluate(Formula::reshape(a, {4}), tree); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { evaluate(Formula::norm_except_dim(a, 1, 0), tree); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { evaluate(Formula::norm_except_dim(a, 2, 2), tree); }).code(), ErrorCode::kInvalidArgument);
  // Broadcasting as numpy: [2, 3] * [2, 1] and [2, 3] + 0-d.
  const Tensor product = evaluate(Formula::mul(a, Formula::reshape(b, {2, 1})), tree);
  const auto values = product.values<double>();
  EXPECT_EQ(std::vector<double>(values.begin(), values.end()), (std::vector<double>{3, 4, 0, 12, 0, 16}));
  EXPECT_EQ(evaluate(Formula::add(a, Formula::constant(1)), tree).values<double>()[0], 4.0);
}

}  // namespace
}  // namespace ckpt
