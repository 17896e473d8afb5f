// Derived parameters (ckpt/derived.h): a user's C++ function and weight
// norm's derivation, derive() for inference exports, the formula against the
// function, and the eager cache's recomputations counted: after a raw
// tensor changed (another tensor, or the same memory written), never without.

#include "ckpt/derived.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/cast.h"
#include "ckpt/error.h"
#include "support/error_of.h"

namespace ckpt {
namespace {

using ckpt::testing::error_of;

Tensor f32(Shape shape, std::vector<float> values) {
  return Tensor::from_values<float>(DType::kFloat32, std::move(shape), std::span<const float>(values));
}

std::vector<float> floats_of(const Tensor& tensor) {
  const auto values = cast(tensor, DType::kFloat32).values<float>();
  return {values.begin(), values.end()};
}

std::vector<std::string> names_of(const Tree& tree) {
  std::vector<std::string> names;
  for (const Tree::Leaf& leaf : tree.leaves()) names.push_back(leaf.name);
  return names;
}

// A user's derivation: a weight masked element by element.
Derivation masked(int* calls = nullptr) {
  return {.name = "fc.weight",
          .raw = {"fc.weight_raw", "fc.mask"},
          .compute =
              [calls](std::span<const Tensor> raw) {
                if (calls) ++*calls;
                const auto w = raw[0].values<float>();
                const auto m = raw[1].values<float>();
                std::vector<float> out(w.size());
                for (size_t i = 0; i < out.size(); ++i) out[i] = w[i] * m[i];
                return f32(raw[0].shape(), out);
              },
          .formula = Formula::mul(Formula::parameter("fc.weight_raw"), Formula::parameter("fc.mask")),
          .dtype = DType::kFloat32};
}

Tree masked_state() {
  Tree state = Tree::map();
  state.set("fc.weight_raw", f32({2, 2}, {1, 2, 3, 4}));
  state.set("fc.mask", f32({2, 2}, {1, 0, 0, 1}));
  state.set("fc.bias", f32({2}, {5, 6}));
  return state;
}

TEST(DerivedTest, DeriveReplacesTheRawParametersForInference) {
  const Tree state = masked_state();
  const Derivation derivation = masked();
  const Tree exported = derive(state, {&derivation, 1});
  EXPECT_EQ(names_of(exported), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(floats_of(exported.at("fc.weight").tensor()), (std::vector<float>{1, 0, 0, 4}));
  EXPECT_TRUE(exported.at("fc.bias").tensor().same_memory(state.at("fc.bias").tensor()));

  const Tree both = derive(state, {&derivation, 1}, {.keep_raw = true});
  EXPECT_EQ(names_of(both), (std::vector<std::string>{"fc.weight_raw", "fc.weight", "fc.mask", "fc.bias"}));
}

TEST(DerivedTest, TheFormulaGivesTheFunctionsValues) {
  const Tree state = masked_state();
  Derivation by_formula = masked();
  by_formula.compute = {};
  EXPECT_EQ(floats_of(compute_derived(state, by_formula)), floats_of(compute_derived(state, masked())));
}

TEST(DerivedTest, WeightNormsDerivationIsFold) {
  Tree state = Tree::map();
  state.set("conv.weight_g", f32({2, 1, 1}, {2, 0.5}));
  state.set("conv.weight_v", f32({2, 1, 3}, {3, 4, 0, 6, 0, 8}));
  state.set("conv.bias", f32({2}, {0, 1}));
  const std::vector<WeightNormParameter> found = find_weight_norms(state);
  ASSERT_EQ(found.size(), 1u);
  const Derivation derivation = weight_norm_derivation(found[0]);
  EXPECT_EQ(derivation.raw, (std::vector<std::string>{"conv.weight_g", "conv.weight_v"}));
  const Tree derived = derive(state, {&derivation, 1});
  const Tree folded = fold_weight_norm(state);
  EXPECT_TRUE(derived == folded);
  // Rows of v have norms 5 and 10: w = g * v / ||v||, by hand.
  EXPECT_EQ(floats_of(derived.at("conv.weight").tensor()), (std::vector<float>{1.2f, 1.6f, 0, 0.3f, 0, 0.4f}));
}

TEST(DerivedTest, TheCacheRecomputesExactlyWhenARawTensorChanged) {
  int calls = 0;
  DerivedParameters derived({masked(&calls)});
  Tree state = masked_state();
  EXPECT_EQ(floats_of(derived.get("fc.weight", state)), (std::vector<float>{1, 0, 0, 4}));
  EXPECT_EQ(floats_of(derived.get("fc.weight", state)), (std::vector<float>{1, 0, 0, 4}));
  EXPECT_EQ(calls, 1) << "no change, no recompute";
  EXPECT_EQ(derived.computations("fc.weight"), 1u);

  // The same memory written in place (an optimizer step on a heap tensor).
  Tensor raw = state.at("fc.weight_raw").tensor();
  float ten = 10;
  std::memcpy(raw.mutable_bytes().data(), &ten, sizeof ten);
  EXPECT_EQ(floats_of(derived.get("fc.weight", state)), (std::vector<float>{10, 0, 0, 4}));
  EXPECT_EQ(calls, 2);

  // Another tensor with the same values (a load): recomputed once; the
  // identity changed, so the cache cannot know the value is the same.
  state.set("fc.mask", f32({2, 2}, {1, 0, 0, 1}));
  derived.get("fc.weight", state);
  EXPECT_EQ(calls, 3);
  derived.get("fc.weight", state);
  EXPECT_EQ(calls, 3);

  // Another shape of the same bytes.
  state.set("fc.mask", f32({4}, {0, 1, 1, 0}));
  state.set("fc.weight_raw", f32({4}, {1, 2, 3, 4}));
  EXPECT_EQ(floats_of(derived.get("fc.weight", state)), (std::vector<float>{0, 2, 3, 0}));
  EXPECT_EQ(calls, 4);
}

TEST(DerivedTest, Refusals) {
  const Tree state = masked_state();
  Derivation missing = masked();
  missing.raw[1] = "fc.scale";
  EXPECT_EQ(error_of([&] { compute_derived(state, missing); }).code(), ErrorCode::kNotFound);
  Derivation neither = masked();
  neither.compute = {};
  neither.formula.reset();
  EXPECT_NE(std::string(error_of([&] { compute_derived(state, neither); }).what()).find("neither"),
            std::string::npos);
  Derivation stray = masked();
  stray.compute = {};
  stray.formula = Formula::mul(Formula::parameter("fc.weight_raw"), Formula::parameter("fc.bias"));
  EXPECT_NE(std::string(error_of([&] { compute_derived(state, stray); }).what()).find("fc.bias"), std::string::npos);
  Derivation not_tensor = masked();
  Tree with_string = state;
  with_string.set("fc.mask", "none");
  EXPECT_EQ(error_of([&] { compute_derived(with_string, not_tensor); }).code(), ErrorCode::kInvalidArgument);
  // The derived name is taken by a leaf that stays.
  Derivation taken = masked();
  taken.name = "fc.bias";
  EXPECT_NE(std::string(error_of([&] { derive(state, {&taken, 1}); }).what()).find("already"), std::string::npos);
  const std::vector<Derivation> twice = {masked(), masked()};
  EXPECT_EQ(error_of([&] { derive(state, twice); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of([&] { DerivedParameters cache(twice); }).code(), ErrorCode::kInvalidArgument);
  DerivedParameters cache({masked()});
  EXPECT_EQ(error_of([&] { cache.get("fc.other", state); }).code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ckpt
