// restore(): each report field, strict errors listing every problem, defaults
// (strict too), casts, partial restores, renames, tied target leaves, specs.

#include "ckpt/restore.h"

#include <gtest/gtest.h>

#include <cstring>

#include <vector>

#include "ckpt/cast.h"

namespace ckpt {
namespace {

using Names = std::vector<std::string>;

Tensor floats(Shape shape, std::vector<float> values) {
  return Tensor::from_values<float>(DType::kFloat32, std::move(shape), std::span<const float>(values));
}

Tensor filled(Shape shape, float value) {
  Tensor tensor = Tensor::zeros(DType::kFloat32, shape);
  auto bytes = tensor.mutable_bytes();
  for (size_t i = 0; i < bytes.size() / 4; ++i) std::memcpy(bytes.data() + 4 * i, &value, 4);
  return tensor;
}

float first(const Tree& leaf) { return leaf.tensor().values<float>()[0]; }

// The current model: encoder weight and bias, a head, a step counter.
Tree target_tree() {
  Tree model = Tree::map();
  Tree& encoder = model.set("encoder", Tree::map());
  encoder.set("weight", filled({2, 3}, 0.0f));
  encoder.set("bias", filled({3}, 0.0f));
  model.set("head", Tree::map()).set("weight", filled({3, 4}, 0.0f));
  Tree state = Tree::map();
  state.set("model", std::move(model));
  state.set("step", Tree(int64_t{0}));
  return state;
}

// A checkpoint of the same model, flat torch-style names, values 1.
Tree matching_source() {
  Tree source = Tree::map();
  source.set("model.encoder.weight", filled({2, 3}, 1.0f));
  source.set("model.encoder.bias", filled({3}, 1.0f));
  source.set("model.head.weight", filled({3, 4}, 1.0f));
  source.set("step", Tree(int64_t{1200}));
  return source;
}

TEST(RestoreTest, MatchingSourceRestoresEveryLeafAcrossFlatAndNestedNames) {
  const RestoreReport report = restore(target_tree(), matching_source());
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.restored, (Names{"model.encoder.weight", "model.encoder.bias", "model.head.weight", "step"}));
  EXPECT_EQ(first(report.tree.at("model.encoder.weight")), 1.0f);
  EXPECT_EQ(report.tree.at("step").integer(), 1200);
  // The target's structure is kept (nested maps), the source's tensors shared.
  ASSERT_TRUE(report.tree.find("model") != nullptr);
  EXPECT_TRUE(report.tree.at("model.head.weight").tensor().same_memory(
      matching_source().at("model.head.weight").tensor()) == false);  // a fresh source: other memory
  const Tree source = matching_source();
  const RestoreReport shared = restore(target_tree(), source);
  EXPECT_TRUE(shared.tree.at("model.head.weight").tensor().same_memory(source.at("model.head.weight").tensor()));
  EXPECT_TRUE(shared.summary().empty());
}

TEST(RestoreTest, StrictErrorListsEveryProblemGroupedWithShapesAndDtypes) {
  Tree source = matching_source();
  source.set("model.encoder.weight", filled({3, 3}, 1.0f));  // shape
  source.set("model.encoder.bias", Tensor::zeros(DType::kFloat64, {3}));  // dtype
  Tree trimmed = Tree::map();  // head.weight and step missing
  trimmed.set("model.encoder.weight", source.at("model.encoder.weight"));
  trimmed.set("model.encoder.bias", source.at("model.encoder.bias"));
  trimmed.set("model.decoder.weight", filled({1}, 1.0f));  // unexpected
  trimmed.set("extra", Tree("x"));                           // unexpected
  try {
    restore(target_tree(), trimmed);
    FAIL() << "strict restore accepted a mismatched checkpoint";
  } catch (const MismatchError& error) {
    EXPECT_EQ(error.code(), ErrorCode::kMismatch);
    const std::string text = error.what();
    EXPECT_NE(text.find("6 problems"), std::string::npos) << text;
    EXPECT_NE(text.find("missing (2): model.head.weight, step"), std::string::npos) << text;
    EXPECT_NE(text.find("unexpected (2): model.decoder.weight, extra"), std::string::npos) << text;
    EXPECT_NE(text.find("shape mismatched (1): model.encoder.weight (checkpoint [3, 3] float32, target [2, 3] float32)"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("dtype mismatched (1): model.encoder.bias (checkpoint [3] float64, target [3] float32)"),
              std::string::npos)
        << text;
    EXPECT_EQ(error.report().missing, (Names{"model.head.weight", "step"}));
    EXPECT_EQ(error.report().shape_mismatched, (Names{"model.encoder.weight"}));
  }
}

TEST(RestoreTest, NonStrictRestoresWhatMatchesAndNeverAppliesAShapeMismatch) {
  Tree source = matching_source();
  source.set("model.encoder.weight", filled({3, 3}, 7.0f));
  source.set("model.encoder.bias", Tensor::zeros(DType::kFloat64, {3}));
  source.set("unused", Tree(1.5));
  Tree target = target_tree();
  const RestoreReport report = restore(target, source, {.strict = false});
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.restored, (Names{"model.head.weight", "step"}));
  EXPECT_EQ(report.shape_mismatched, (Names{"model.encoder.weight"}));
  EXPECT_EQ(report.dtype_mismatched, (Names{"model.encoder.bias"}));
  EXPECT_EQ(report.unexpected, (Names{"unused"}));
  EXPECT_TRUE(report.missing.empty());
  // The mismatched leaves keep the target's values, untouched.
  EXPECT_EQ(report.tree.at("model.encoder.weight").tensor().shape(), (Shape{2, 3}));
  EXPECT_EQ(first(report.tree.at("model.encoder.weight")), 0.0f);
  EXPECT_TRUE(report.tree.at("model.encoder.weight").tensor().same_memory(target.at("model.encoder.weight").tensor()));
  EXPECT_EQ(report.tree.at("model.encoder.bias").tensor().dtype(), DType::kFloat32);
  EXPECT_EQ(report.details.size(), 2u);
}

TEST(RestoreTest, NonStrictReportsMissingAndKeepsTheTargetValue) {
  Tree source = matching_source();
  Tree partial = Tree::map();
  partial.set("model.encoder.weight", source.at("model.encoder.weight"));
  const RestoreReport report = restore(target_tree(), partial, {.strict = false});
  EXPECT_EQ(report.missing, (Names{"model.encoder.bias", "model.head.weight", "step"}));
  EXPECT_EQ(report.tree.at("step").integer(), 0);
  EXPECT_EQ(first(report.tree.at("model.encoder.weight")), 1.0f);
}

TEST(RestoreTest, DefaultsFillMissingOptionalFieldsEvenInStrictMode) {
  // An old checkpoint without "ema" and "loss_scale", restored into a state
  // that gained both.
  Tree target = target_tree();
  Tree& ema = target.set("ema", Tree::map());
  ema.set("weight", filled({2}, 5.0f));
  ema.set("count", Tree(int64_t{-1}));
  target.set("loss_scale", Tree(1.0));
  target.set("rng", filled({2}, 9.0f));
  Tree ema_default = Tree::map();
  ema_default.set("weight", filled({2}, 0.5f));
  ema_default.set("count", Tree(int64_t{0}));
  RestoreOptions options;
  options.defaults.emplace_back("ema", FieldDefault::value(ema_default));
  options.defaults.emplace_back("loss_scale", FieldDefault::init([](std::string_view name, const Tree& current) {
    EXPECT_EQ(name, "loss_scale");
    EXPECT_EQ(current.real(), 1.0);
    return Tree(128.0);
  }));
  options.defaults.emplace_back("r?g", FieldDefault::keep());
  const RestoreReport report = restore(target, matching_source(), options);
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.defaulted, (Names{"ema.weight", "ema.count", "loss_scale", "rng"}));
  EXPECT_EQ(first(report.tree.at("ema.weight")), 0.5f);
  EXPECT_EQ(report.tree.at("ema.count").integer(), 0);
  EXPECT_EQ(report.tree.at("loss_scale").real(), 128.0);
  EXPECT_EQ(first(report.tree.at("rng")), 9.0f);
  EXPECT_EQ(report.tree.at("step").integer(), 1200);
}

TEST(RestoreTest, AFieldPresentInTheSourceIsRestoredNotDefaulted) {
  Tree target = target_tree();
  RestoreOptions options;
  options.defaults.emplace_back("step", FieldDefault::value(Tree(int64_t{-5})));
  const RestoreReport report = restore(target, matching_source(), options);
  EXPECT_TRUE(report.defaulted.empty());
  EXPECT_EQ(report.tree.at("step").integer(), 1200);
}

TEST(RestoreTest, ADefaultValueWithoutTheLeafOrOfAnotherShapeIsAnError) {
  Tree target = target_tree();
  target.set("ema", Tree::map()).set("weight", filled({2}, 0.0f));
  RestoreOptions options;
  options.defaults.emplace_back("ema", FieldDefault::value(Tree::map()));
  EXPECT_THROW(restore(target, matching_source(), options), Error);
  options.defaults.clear();
  options.defaults.emplace_back("ema.weight", FieldDefault::value(Tree(filled({3}, 0.0f))));
  try {
    restore(target, matching_source(), options);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("ema.weight"), std::string::npos);
  }
}

TEST(RestoreTest, CastConvertsOnlyWhenAskedAndReportsIt) {
  Tree target = Tree::map();
  target.set("w", Tensor::zeros(DType::kBFloat16, {3}));
  target.set("v", Tensor::zeros(DType::kFloat16, {1}));
  Tree source = Tree::map();
  source.set("w", floats({3}, {1.0f, -2.5f, 3.0f}));
  source.set("v", Tensor::zeros(DType::kFloat64, {1}));
  EXPECT_THROW(restore(target, source), MismatchError);

  RestoreOptions options{.dtype = DTypePolicy::kCast};
  RestoreReport report = restore(target, source, options);
  EXPECT_EQ(report.cast, (Names{"w", "v"}));
  EXPECT_EQ(report.restored, (Names{"w", "v"}));
  EXPECT_EQ(report.tree.at("w").tensor().dtype(), DType::kBFloat16);
  const std::vector<uint16_t> expected{0x3F80, 0xC020, 0x4040};  // bfloat16 bits of 1, -2.5, 3
  EXPECT_EQ(std::vector<uint16_t>(report.tree.at("w").tensor().values<uint16_t>().begin(),
                                  report.tree.at("w").tensor().values<uint16_t>().end()),
            expected);

  // Only the listed pairs.
  options.casts = {{DType::kFloat32, DType::kBFloat16}};
  options.strict = false;
  report = restore(target, source, options);
  EXPECT_EQ(report.cast, (Names{"w"}));
  EXPECT_EQ(report.dtype_mismatched, (Names{"v"}));
}

TEST(RestoreTest, ScalarsConvertWhereExactAndZeroDTensorsStandInForScalars) {
  Tree target = Tree::map();
  target.set("step", Tree(int64_t{0}));
  target.set("lr", Tree(0.1));
  target.set("count", Tensor::zeros(DType::kInt32, {}));
  target.set("name", Tree("model"));
  target.set("scale", Tensor::zeros(DType::kFloat32, {}));
  Tree source = Tree::map();
  const int32_t step = 77;
  source.set("step", Tensor::from_values<int32_t>(DType::kInt32, {}, std::span(&step, 1)));  // Flax: a 0-d array
  source.set("lr", Tree(int64_t{1}));
  source.set("count", Tree(int64_t{12}));
  source.set("name", Tree(int64_t{3}));
  source.set("scale", Tree(int64_t{1} << 40));
  const RestoreReport report = restore(target, source, {.strict = false});
  EXPECT_EQ(report.restored, (Names{"step", "lr", "count", "scale"}));
  EXPECT_EQ(report.dtype_mismatched, (Names{"name"}));
  EXPECT_EQ(report.tree.at("step").integer(), 77);
  EXPECT_EQ(report.tree.at("lr").real(), 1.0);
  EXPECT_EQ(report.tree.at("count").tensor().values<int32_t>()[0], 12);
  EXPECT_EQ(report.tree.at("scale").tensor().values<float>()[0], 1099511627776.0f);

  // An int that int32 cannot hold is a mismatch, not a wrap-around.
  source.set("count", Tree(int64_t{1} << 40));
  EXPECT_EQ(restore(target, source, {.strict = false}).dtype_mismatched, (Names{"count", "name"}));
}

TEST(RestoreTest, ANoneLeafTakesAWholeSubtreeOfTheSource) {
  Tree target = Tree::map();
  target.set("ema_params", Tree());
  Tree source = Tree::map();
  source.set("ema_params", Tree::map()).set("w", filled({2}, 3.0f));
  const RestoreReport report = restore(target, source);
  EXPECT_EQ(report.restored, (Names{"ema_params"}));
  EXPECT_EQ(first(report.tree.at("ema_params.w")), 3.0f);
}

TEST(RestoreTest, PrefixAndGlobsRestoreOnlyPartOfTheTarget) {
  Tree target = target_tree();
  Tree source = Tree::map();
  source.set("model.encoder.weight", filled({2, 3}, 1.0f));
  source.set("model.encoder.bias", filled({3}, 1.0f));
  source.set("model.decoder.weight", filled({5}, 1.0f));  // outside: ignored
  RestoreReport report = restore(target, source, {.prefix = "model.encoder"});
  EXPECT_EQ(report.restored, (Names{"model.encoder.weight", "model.encoder.bias"}));
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(first(report.tree.at("model.head.weight")), 0.0f);

  report = restore(target, source, {.strict = false, .only = {"*.bias", "step"}});
  EXPECT_EQ(report.restored, (Names{"model.encoder.bias"}));
  EXPECT_EQ(report.missing, (Names{"step"}));
  EXPECT_TRUE(report.unexpected.empty());
  EXPECT_EQ(first(report.tree.at("model.encoder.weight")), 0.0f);
}

TEST(RestoreTest, RenamesApplyToTheSourceBeforeMatching) {
  Tree source = Tree::map();
  source.set("enc.weight", filled({2, 3}, 1.0f));
  source.set("enc.bias", filled({3}, 1.0f));
  source.set("lm.weight", filled({3, 4}, 1.0f));
  source.set("optimizer_step", Tree(int64_t{4}));
  RestoreOptions options;
  options.rename.rename_prefix("enc", "model.encoder").rename_prefix("lm", "model.head")
      .rename({{"optimizer_step", "step"}});
  const RestoreReport report = restore(target_tree(), source, options);
  EXPECT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(report.tree.at("step").integer(), 4);

  RestoreOptions ambiguous;
  ambiguous.rename.rename_prefix("enc", "lm");
  EXPECT_THROW(restore(target_tree(), source, ambiguous), Error);
}

TEST(RestoreTest, TiedTargetLeavesAreFilledFromEachOther) {
  // Tied embeddings: the checkpoint holds only one of the two names (as
  // huggingface's save_model writes it).
  const Tensor embedding = filled({4, 2}, 0.0f);
  Tree target = Tree::map();
  target.set("embed.weight", embedding);
  target.set("lm_head.weight", embedding);
  Tree source = Tree::map();
  source.set("embed.weight", filled({4, 2}, 2.0f));
  const RestoreReport report = restore(target, source);
  EXPECT_EQ(report.restored, (Names{"embed.weight", "lm_head.weight"}));
  EXPECT_TRUE(report.tree.at("embed.weight").tensor().same_memory(report.tree.at("lm_head.weight").tensor()));

  // Untied leaves of equal shape are not filled from each other.
  Tree untied = Tree::map();
  untied.set("embed.weight", filled({4, 2}, 0.0f));
  untied.set("lm_head.weight", filled({4, 2}, 0.0f));
  EXPECT_EQ(restore(untied, source, {.strict = false}).missing, (Names{"lm_head.weight"}));
}

TEST(RestoreTest, ASpecTargetGivesShapesAndDtypesOnly) {
  Tree spec = Tree::map();
  spec.set("w", Tensor::spec(DType::kFloat32, {2, 3}));
  spec.set("b", Tensor::spec(DType::kFloat32, {3}));
  EXPECT_FALSE(spec.at("w").tensor().has_data());
  EXPECT_THROW(spec.at("w").tensor().bytes(), Error);
  Tree source = Tree::map();
  source.set("w", filled({2, 3}, 1.0f));
  source.set("b", filled({4}, 1.0f));
  const RestoreReport report = restore(spec, source, {.strict = false});
  EXPECT_EQ(report.restored, (Names{"w"}));
  EXPECT_EQ(report.shape_mismatched, (Names{"b"}));
  EXPECT_TRUE(report.tree.at("w").tensor().has_data());
  EXPECT_FALSE(report.tree.at("b").tensor().has_data());
  // Two specs of one size are not tied.
  EXPECT_FALSE(Tensor::spec(DType::kFloat32, {3}).same_memory(Tensor::spec(DType::kFloat32, {3})));
}

TEST(RestoreTest, RawRestoreGivesTheSourceRenamedAndFiltered) {
  const Tree source = matching_source();
  RestoreReport report = restore(source);
  EXPECT_EQ(report.tree, source);
  EXPECT_EQ(report.restored.size(), 4u);
  report = restore(source, {.prefix = "model.encoder"});
  EXPECT_EQ(report.restored, (Names{"model.encoder.weight", "model.encoder.bias"}));
  EXPECT_EQ(report.tree.find_path("step"), nullptr);

  Tree nested = Tree::map();
  Tree& layers = nested.set("layers", Tree::list());
  layers.push_back(Tree::map()).set("w", filled({1}, 1.0f));
  layers.push_back(Tree::map()).set("b", filled({1}, 2.0f));
  report = restore(nested, {.only = {"*.b"}});
  EXPECT_EQ(report.restored, (Names{"layers.1.b"}));  // the name survives the dropped item
}

// A Flax file keeps no lists (lists_and_int_keys is false there): a
// TrainState's opt_state tuple and a torch optimizer's integer keys come
// back as maps of string keys, and they fill a target that has the lists
// and integer keys, which keeps its own structure.
TEST(RestoreTest, ATargetsListsAndIntegerKeysMatchStringKeyedMaps) {
  Tree target = Tree::map();
  target.set("step", Tree(int64_t{0}));
  Tree& opt_state = target.set("opt_state", Tree::list());
  Tree& adam = opt_state.push_back(Tree::map());
  adam.set("count", filled({}, 0.0f));
  adam.set("mu", Tree::map()).set("w", filled({2}, 0.0f));
  opt_state.push_back(Tree::map());  // optax.EmptyState(): no leaves
  target.set("state", Tree::map()).set(int64_t{3}, filled({1}, 0.0f));

  Tree source = Tree::map();
  source.set("step", Tree(int64_t{2}));
  Tree& saved = source.set("opt_state", Tree::map());
  Tree& saved_adam = saved.set("0", Tree::map());
  saved_adam.set("count", filled({}, 2.0f));
  saved_adam.set("mu", Tree::map()).set("w", filled({2}, 5.0f));
  saved.set("1", Tree::map());
  source.set("state", Tree::map()).set("3", filled({1}, 7.0f));

  const RestoreReport report = restore(target, source);
  EXPECT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(report.restored, (Names{"step", "opt_state.0.count", "opt_state.0.mu.w", "state.3"}));
  ASSERT_TRUE(report.tree.at("opt_state").is_list());
  EXPECT_EQ(report.tree.at("opt_state").size(), 2u);
  EXPECT_EQ(first(report.tree.at("opt_state.0.mu.w")), 5.0f);
  ASSERT_NE(report.tree.at("state").find(int64_t{3}), nullptr);
  EXPECT_EQ(first(*report.tree.at("state").find(int64_t{3})), 7.0f);
}

// ---------------------------------------------------------------- defaults: the rules

TEST(RestoreTest, AFactoryDefaultIsMadeOnceWhenFirstNeededAndNeverOtherwise) {
  Tree target = target_tree();
  Tree& ema = target.set("ema", Tree::map());
  ema.set("w", filled({2}, 5.0f));
  ema.set("b", filled({2}, 5.0f));
  ema.set("c", filled({2}, 5.0f));
  Tree source = matching_source();
  source.set("ema.w", filled({2}, 1.0f));  // ema is partly in the checkpoint: leaf by leaf
  int made = 0, never = 0;
  RestoreOptions options;
  options.defaults.emplace_back("ema", FieldDefault::factory([&made] {
    ++made;
    Tree value = Tree::map();
    value.set("b", filled({2}, 0.25f));
    value.set("c", filled({2}, 0.5f));
    return value;
  }));
  options.defaults.emplace_back("model", FieldDefault::factory([&never] {
    ++never;
    return Tree();
  }));
  const RestoreReport report = restore(target, source, options);
  EXPECT_EQ(report.defaulted, (Names{"ema.b", "ema.c"}));
  EXPECT_EQ(made, 1);   // two leaves, one call
  EXPECT_EQ(never, 0);  // nothing under "model" was missing
  EXPECT_EQ(first(report.tree.at("ema.w")), 1.0f);
  EXPECT_EQ(first(report.tree.at("ema.b")), 0.25f);
  EXPECT_EQ(first(report.tree.at("ema.c")), 0.5f);
}

TEST(RestoreTest, AFieldWhoseEveryLeafIsDefaultedTakesTheWholeValue) {
  Tree target = target_tree();
  Tree& ema = target.set("ema", Tree::map());
  ema.set("w", filled({2}, 5.0f));
  ema.set("b", filled({2}, 5.0f));
  RestoreOptions options;
  options.defaults.emplace_back("ema", FieldDefault::value(Tree()));  // none in place of a map of tensors
  RestoreReport report = restore(target, matching_source(), options);
  EXPECT_EQ(report.defaulted, (Names{"ema.w", "ema.b"}));
  ASSERT_NE(report.tree.find("ema"), nullptr);
  EXPECT_TRUE(report.tree.find("ema")->is_none());
  ASSERT_EQ(report.filled.size(), 5u);  // four restored leaves, then ema whole
  EXPECT_EQ(report.filled[1].path, (KeyPath{"model", "encoder", "bias"}));
  EXPECT_EQ(report.filled[1].default_index, FilledPart::kFromSource);
  EXPECT_EQ(report.filled[4].path, (KeyPath{"ema"}));
  EXPECT_EQ(report.filled[4].default_index, 0u);
  EXPECT_TRUE(report.filled[4].whole_default);

  // A map value gives each leaf its part, in the target's structure.
  Tree ema_default = Tree::map();
  ema_default.set("w", filled({2}, 0.5f));
  ema_default.set("b", filled({2}, 0.25f));
  ema_default.set("extra", Tree(int64_t{1}));
  options.defaults = {{"ema", FieldDefault::value(ema_default)}};
  report = restore(target, matching_source(), options);
  EXPECT_EQ(report.tree.find("ema")->size(), 2u);
  EXPECT_EQ(first(report.tree.at("ema.b")), 0.25f);
  EXPECT_EQ(report.filled.size(), 6u);

  // With one leaf in the checkpoint the others take parts of the value,
  // which none does not have.
  options.defaults = {{"ema", FieldDefault::value(Tree())}};
  Tree source = matching_source();
  source.set("ema.w", filled({2}, 1.0f));
  EXPECT_THROW(restore(target, source, options), Error);

  // A glob is never a whole field: each leaf takes the value.
  options.defaults = {{"ema.*", FieldDefault::value(Tree())}};
  report = restore(target, matching_source(), options);
  ASSERT_TRUE(report.tree.find("ema")->is_map());
  EXPECT_TRUE(report.tree.at("ema.w").is_none());
  EXPECT_TRUE(report.tree.at("ema.b").is_none());
  EXPECT_TRUE(report.filled[4].whole_default);
  EXPECT_EQ(report.filled[5].path, (KeyPath{"ema", "b"}));
}

TEST(RestoreTest, ADefaultValueIsFoundByIntegerKeysAndListPositions) {
  // Torch optimizer state has integer keys; the default's keys print the same.
  Tree target = Tree::map();
  Tree& state = target.set("opt", Tree::map()).set("state", Tree::map());
  state.set(int64_t{0}, Tree::map()).set("m", filled({2}, 0.0f));
  state.set(int64_t{1}, Tree::map()).set("m", filled({2}, 0.0f));
  Tree& layers = target.set("layers", Tree::list());
  layers.push_back(Tree::map()).set("w", filled({1}, 0.0f));
  layers.push_back(Tree::map()).set("w", filled({1}, 0.0f));
  Tree source = Tree::map();
  source.set("opt.state.0.m", filled({2}, 1.0f));
  source.set("layers.0.w", filled({1}, 1.0f));

  Tree opt = Tree::map();
  Tree& by_text = opt.set("state", Tree::map());
  by_text.set("0", Tree::map()).set("m", filled({2}, 7.0f));
  by_text.set("1", Tree::map()).set("m", filled({2}, 8.0f));
  Tree as_list = Tree::list();
  as_list.push_back(Tree::map()).set("w", filled({1}, 3.0f));
  as_list.push_back(Tree::map()).set("w", filled({1}, 4.0f));
  RestoreOptions options;
  options.defaults.emplace_back("opt", FieldDefault::value(opt));
  options.defaults.emplace_back("layers", FieldDefault::value(as_list));
  RestoreReport report = restore(target, source, options);
  EXPECT_EQ(report.defaulted, (Names{"opt.state.1.m", "layers.1.w"}));
  EXPECT_EQ(first(report.tree.at("opt.state.1.m")), 8.0f);
  EXPECT_EQ(first(report.tree.at("layers.1.w")), 4.0f);
  EXPECT_FALSE(report.filled.back().whole_default);

  // A list position in the target finds the key "1" of a map, and an
  // integer key of the value finds the target's list position.
  Tree as_map = Tree::map();
  as_map.set(int64_t{1}, Tree::map()).set("w", filled({1}, 6.0f));
  options.defaults[1] = {"layers", FieldDefault::value(as_map)};
  report = restore(target, source, options);
  EXPECT_EQ(first(report.tree.at("layers.1.w")), 6.0f);
  as_map = Tree::map();
  as_map.set("1", Tree::map()).set("w", filled({1}, 2.0f));
  options.defaults[1] = {"layers", FieldDefault::value(as_map)};
  EXPECT_EQ(first(restore(target, source, options).tree.at("layers.1.w")), 2.0f);
}

TEST(RestoreTest, TheFirstDeclarationThatCoversALeafWins) {
  Tree target = target_tree();
  Tree& ema = target.set("ema", Tree::map());
  ema.set("w", filled({2}, 5.0f));
  ema.set("b", filled({2}, 5.0f));
  target.set("loss_scale", Tree(4.0));
  Tree ema_default = Tree::map();
  ema_default.set("w", filled({2}, 0.5f));
  ema_default.set("b", filled({2}, 0.25f));
  RestoreOptions options;
  options.defaults.emplace_back("ema.w", FieldDefault::keep());
  options.defaults.emplace_back("ema", FieldDefault::value(ema_default));
  options.defaults.emplace_back("*", FieldDefault::value(Tree(1.0)));
  const RestoreReport report = restore(target, matching_source(), options);
  EXPECT_EQ(report.defaulted, (Names{"ema.w", "ema.b", "loss_scale"}));
  // ema.w keeps its value: "ema" does not take it, whole or in part.
  EXPECT_EQ(first(report.tree.at("ema.w")), 5.0f);
  EXPECT_EQ(first(report.tree.at("ema.b")), 0.25f);
  EXPECT_EQ(report.tree.at("loss_scale").real(), 1.0);
}

TEST(RestoreTest, DefaultsAndFilledPartsFollowKeysNotTheEscapedNames) {
  // {"a.b": x, "a": {"b": y, "c": z}}: x is "a.b", y gets the escaped name.
  Tree target = Tree::map();
  target.set("a.b", filled({2}, 0.0f));
  Tree& a = target.set("a", Tree::map());
  a.set("b", filled({3}, 0.0f));
  a.set("c", filled({1}, 0.0f));
  Tree source = Tree::map();
  source.set("a.b", filled({2}, 1.0f));
  source.set("a", Tree::map()).set("c", filled({1}, 2.0f));
  Tree a_default = Tree::map();
  a_default.set("b", filled({3}, 7.0f));
  RestoreOptions options;
  options.defaults.emplace_back("a", FieldDefault::value(a_default));
  RestoreReport report = restore(target, source, options);
  EXPECT_EQ(report.restored, (Names{"a.b", "a.c"}));
  ASSERT_EQ(report.defaulted.size(), 1u);
  EXPECT_NE(report.defaulted[0], "a.b");
  EXPECT_EQ(first(*report.tree.find("a.b")), 1.0f);
  EXPECT_EQ(first(*report.tree.find("a")->find("b")), 7.0f);
  EXPECT_EQ(first(*report.tree.find("a")->find("c")), 2.0f);
  ASSERT_EQ(report.filled.size(), 3u);
  EXPECT_EQ(report.filled[0].path, (KeyPath{"a.b"}));
  EXPECT_EQ(report.filled[1].path, (KeyPath{"a", "b"}));
  EXPECT_EQ(report.filled[2].path, (KeyPath{"a", "c"}));

  // A key path selects exactly: {"a", "b"} is y alone, {"a.b"} x alone.
  options.defaults = {{KeyPath{"a", "b"}, FieldDefault::value(Tree(filled({3}, 9.0f)))}};
  report = restore(target, source, options);
  EXPECT_EQ(first(*report.tree.find("a")->find("b")), 9.0f);
  EXPECT_TRUE(report.filled[1].whole_default);
  Tree only_c = Tree::map();
  only_c.set("a", Tree::map()).set("c", filled({1}, 2.0f));
  options.defaults = {{KeyPath{"a.b"}, FieldDefault::value(Tree(filled({2}, 9.0f)))},
                      {KeyPath{"a", "b"}, FieldDefault::value(Tree(filled({3}, 8.0f)))}};
  report = restore(target, only_c, options);
  EXPECT_EQ(report.defaulted.size(), 2u);
  EXPECT_EQ(first(*report.tree.find("a.b")), 9.0f);
  EXPECT_EQ(first(*report.tree.find("a")->find("b")), 8.0f);
}

}  // namespace
}  // namespace ckpt
