// apply_preloads: every option (prefix both ways, var_name_mapping,
// ignore_missing, ignore_params(_prefixes), checkpoint_key), when a spec
// applies (fresh only, always, not in training), conflicts and overrides,
// a prefix that matches nothing, shape and dtype mismatches, all-or-nothing,
// and sources read from files and run directories. Sources are built in the
// test; every expected value is the source's own tensor.

#include "ckpt/preload.h"

#include <gtest/gtest.h>

#include <map>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "support/temp_dir.h"
#include "support/error_of.h"

namespace ckpt {
namespace {

using Names = std::vector<std::string>;
using Pairs = std::vector<std::pair<std::string, std::string>>;

Tensor filled(float value, Shape shape = {2}) {
  Tensor tensor = Tensor::zeros(DType::kFloat32, shape);
  std::vector<float> values(static_cast<size_t>(tensor.numel()), value);
  return Tensor::from_values<float>(DType::kFloat32, std::move(shape), std::span<const float>(values));
}

float first(const Tree& leaf) { return leaf.tensor().values<float>()[0]; }

// The model as the trainer holds it: an encoder, a decoder, an LM, all zeros.
Tree target() {
  Tree state = Tree::map();
  for (const char* name : {"encoder.layer0.w", "encoder.layer0.b", "encoder.layer1.w", "decoder.w", "decoder.b",
                           "lm.w"}) {
    state.set(name, filled(0));
  }
  return state;
}

// Another model's checkpoint: an encoder under other names, and more.
Tree pretrained() {
  Tree state = Tree::map();
  state.set("enc.layer0.w", filled(1));
  state.set("enc.layer0.b", filled(2));
  state.set("enc.layer1.w", filled(3));
  state.set("head.w", filled(4));
  return state;
}

// Sources by name, without files.
PreloadOptions from_memory(std::map<std::string, Tree> sources, TrainingStage stage = TrainingStage::kFreshTraining) {
  return {.stage = stage, .read_source = [sources = std::move(sources)](const PreloadSpec& spec) {
            return PreloadSource{spec.source, sources.at(spec.source.string())};
          }};
}

PreloadReport apply_one(const PreloadSpec& spec, const std::map<std::string, Tree>& sources,
                        TrainingStage stage = TrainingStage::kFreshTraining) {
  return apply_preloads(target(), {&spec, 1}, from_memory(sources, stage));
}

using ckpt::testing::error_of;

TEST(Preload, WhenItApplies) {
  // Hand-written table: RETURNN's init_for_train False / True / "always".
  using W = PreloadWhen;
  using S = TrainingStage;
  EXPECT_FALSE(preload_applies(W::kNotInTraining, S::kFreshTraining));
  EXPECT_FALSE(preload_applies(W::kNotInTraining, S::kContinuedTraining));
  EXPECT_TRUE(preload_applies(W::kNotInTraining, S::kNotTraining));
  EXPECT_TRUE(preload_applies(W::kFreshTraining, S::kFreshTraining));
  EXPECT_FALSE(preload_applies(W::kFreshTraining, S::kContinuedTraining));
  EXPECT_FALSE(preload_applies(W::kFreshTraining, S::kNotTraining));
  EXPECT_TRUE(preload_applies(W::kAlways, S::kFreshTraining));
  EXPECT_TRUE(preload_applies(W::kAlways, S::kContinuedTraining));
  EXPECT_TRUE(preload_applies(W::kAlways, S::kNotTraining));
}

TEST(Preload, PrefixMapsSourceNamesToTargetNames) {
  const PreloadSpec spec{.name = "enc", .source = "pre", .prefix = {{"enc.", "encoder."}}};
  const PreloadReport report = apply_one(spec, {{"pre", pretrained()}});
  ASSERT_EQ(report.preloads.size(), 1u);
  const PreloadResult& result = report.preloads[0];
  EXPECT_TRUE(result.applied);
  EXPECT_EQ(result.source, "pre");
  EXPECT_EQ(result.set, (Pairs{{"encoder.layer0.w", "enc.layer0.w"},
                               {"encoder.layer0.b", "enc.layer0.b"},
                               {"encoder.layer1.w", "enc.layer1.w"}}));
  EXPECT_TRUE(result.missing.empty());
  EXPECT_TRUE(result.unexpected.empty());  // head.w matches no source prefix: not considered
  EXPECT_EQ(report.state.at("encoder.layer0.w"), pretrained().at("enc.layer0.w"));
  EXPECT_EQ(report.state.at("encoder.layer1.w"), pretrained().at("enc.layer1.w"));
  EXPECT_EQ(first(report.state.at("decoder.w")), 0.0f);  // untouched
  EXPECT_TRUE(report.init_only().empty());
}

TEST(Preload, ReturnnStylePrefixIsTheTargetPrefixOfEveryName) {
  // RETURNN: "prefix": P loads source name N into P + N.
  Tree lm = Tree::map();
  lm.set("w", filled(7));
  const PreloadSpec spec{.name = "lm", .source = "lm", .prefix = {{"", "lm."}}};
  const PreloadReport report = apply_one(spec, {{"lm", lm}});
  EXPECT_EQ(report.preloads[0].set, (Pairs{{"lm.w", "w"}}));
  EXPECT_EQ(first(report.state.at("lm.w")), 7.0f);
}

TEST(Preload, LongestSourcePrefixWins) {
  const PreloadSpec spec{.name = "two", .source = "pre",
                         .prefix = {{"enc.", "encoder."}, {"enc.layer1.", "decoder."}},
                         .ignore_missing = true};
  Tree source = pretrained();
  source.set("enc.layer1.b", filled(5));
  const PreloadReport report = apply_one(spec, {{"pre", source}});
  EXPECT_EQ(first(report.state.at("decoder.w")), 3.0f);
  EXPECT_EQ(first(report.state.at("decoder.b")), 5.0f);
  EXPECT_EQ(first(report.state.at("encoder.layer0.w")), 1.0f);
  EXPECT_EQ(first(report.state.at("encoder.layer1.w")), 0.0f);  // its source went to decoder.w
  EXPECT_EQ(report.preloads[0].missing, (Names{"encoder.layer1.w"}));
}

TEST(Preload, NoPrefixLoadsNamesAsTheyAre) {
  Tree source = Tree::map();
  source.set("decoder.w", filled(8));
  source.set("decoder.b", filled(9));
  source.set("extra", filled(1));
  const PreloadSpec spec{.name = "same", .source = "s", .ignore_missing = true};
  const PreloadReport report = apply_one(spec, {{"s", source}});
  EXPECT_EQ(report.preloads[0].set, (Pairs{{"decoder.w", "decoder.w"}, {"decoder.b", "decoder.b"}}));
  EXPECT_EQ(report.preloads[0].unexpected, (Names{"extra"}));
  EXPECT_EQ(report.preloads[0].missing, (Names{"encoder.layer0.w", "encoder.layer0.b", "encoder.layer1.w", "lm.w"}));
}

TEST(Preload, MissingParametersAreAnErrorUnlessIgnored) {
  Tree source = pretrained();
  Tree partial = Tree::map();
  partial.set("enc.layer0.w", source.at("enc.layer0.w"));
  const PreloadSpec spec{.name = "partial", .source = "p", .prefix = {{"enc.", "encoder."}}};
  const Error error = error_of([&] { apply_one(spec, {{"p", partial}}); });
  EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  const std::string text = error.what();
  EXPECT_NE(text.find("preload 'partial'"), std::string::npos) << text;
  EXPECT_NE(text.find("encoder.layer0.b, encoder.layer1.w"), std::string::npos) << text;

  PreloadSpec lenient = spec;
  lenient.ignore_missing = true;
  const PreloadReport report = apply_one(lenient, {{"p", partial}});
  EXPECT_EQ(report.preloads[0].missing, (Names{"encoder.layer0.b", "encoder.layer1.w"}));
  EXPECT_EQ(report.preloads[0].set, (Pairs{{"encoder.layer0.w", "enc.layer0.w"}}));
}

TEST(Preload, VarNameMapping) {
  const PreloadSpec spec{.name = "map", .source = "pre", .prefix = {{"enc.", "encoder."}},
                         .var_name_mapping = {{"encoder.layer1.w", "head.w"}, {"lm.w", "enc.layer1.w"}}};
  const PreloadReport report = apply_one(spec, {{"pre", pretrained()}});
  EXPECT_EQ(first(report.state.at("encoder.layer1.w")), 4.0f);  // from head.w
  EXPECT_EQ(first(report.state.at("lm.w")), 3.0f);              // enc.layer1.w went there, not through the prefix
  EXPECT_EQ(first(report.state.at("encoder.layer0.w")), 1.0f);
  EXPECT_EQ(report.preloads[0].set, (Pairs{{"encoder.layer0.w", "enc.layer0.w"},
                                           {"encoder.layer0.b", "enc.layer0.b"},
                                           {"encoder.layer1.w", "head.w"},
                                           {"lm.w", "enc.layer1.w"}}));
  // A mapping to a source name the source lacks, or to a target name the target lacks.
  PreloadSpec bad_source = spec;
  bad_source.var_name_mapping = {{"lm.w", "nope"}};
  EXPECT_EQ(error_of([&] { apply_one(bad_source, {{"pre", pretrained()}}); }).code(), ErrorCode::kNotFound);
  PreloadSpec bad_target = spec;
  bad_target.var_name_mapping = {{"nope", "head.w"}};
  EXPECT_EQ(error_of([&] { apply_one(bad_target, {{"pre", pretrained()}}); }).code(), ErrorCode::kNotFound);
}

TEST(Preload, IgnoreParamsAndPrefixes) {
  const PreloadSpec spec{.name = "ign", .source = "pre", .prefix = {{"enc.", "encoder."}},
                         .ignore_params = {"encoder.layer0.b"}, .ignore_params_prefixes = {"encoder.layer1"}};
  const PreloadReport report = apply_one(spec, {{"pre", pretrained()}});
  EXPECT_EQ(report.preloads[0].set, (Pairs{{"encoder.layer0.w", "enc.layer0.w"}}));
  EXPECT_EQ(report.preloads[0].ignored, (Names{"encoder.layer0.b", "encoder.layer1.w"}));
  EXPECT_TRUE(report.preloads[0].missing.empty());  // ignored ones are not missing
  EXPECT_EQ(first(report.state.at("encoder.layer0.b")), 0.0f);
  EXPECT_EQ(first(report.state.at("encoder.layer1.w")), 0.0f);
}

TEST(Preload, CheckpointKey) {
  Tree wrapped = Tree::map();
  wrapped.set("model", pretrained());
  wrapped.set("optimizer", Tree::map()).set("lr", 0.1);
  wrapped.set("epoch", int64_t{3});
  PreloadSpec spec{.name = "key", .source = "w", .prefix = {{"enc.", "encoder."}}, .checkpoint_key = "model"};
  const PreloadReport report = apply_one(spec, {{"w", wrapped}});
  EXPECT_EQ(report.preloads[0].set.size(), 3u);
  EXPECT_EQ(report.state.at("encoder.layer0.b"), pretrained().at("enc.layer0.b"));
  // Without the key the prefix finds nothing ("model.enc..." does not start with "enc.").
  spec.checkpoint_key.reset();
  EXPECT_EQ(error_of([&] { apply_one(spec, {{"w", wrapped}}); }).code(), ErrorCode::kNotFound);
  spec.checkpoint_key = "params";
  const Error missing = error_of([&] { apply_one(spec, {{"w", wrapped}}); });
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(missing.what()).find("model, optimizer, epoch"), std::string::npos) << missing.what();
  spec.checkpoint_key = "epoch";
  EXPECT_EQ(error_of([&] { apply_one(spec, {{"w", wrapped}}); }).code(), ErrorCode::kInvalidArgument);
}

TEST(Preload, APrefixThatMatchesNothingIsAnError) {
  const PreloadSpec in_source{.name = "typo", .source = "pre", .prefix = {{"encoder.", "encoder."}}};
  const Error source_error = error_of([&] { apply_one(in_source, {{"pre", pretrained()}}); });
  EXPECT_EQ(source_error.code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(source_error.what()).find("prefix 'encoder.' matches no name in the source"),
            std::string::npos)
      << source_error.what();
  const PreloadSpec in_target{.name = "typo", .source = "pre", .prefix = {{"enc.", "encodr."}}};
  const Error target_error = error_of([&] { apply_one(in_target, {{"pre", pretrained()}}); });
  EXPECT_EQ(target_error.code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(target_error.what()).find("'encodr.'"), std::string::npos) << target_error.what();
  // A spec that sets nothing is an error, also with ignore_missing.
  Tree unrelated = Tree::map();
  unrelated.set("x", filled(1));
  const PreloadSpec nothing{.name = "none", .source = "u", .ignore_missing = true};
  EXPECT_EQ(error_of([&] { apply_one(nothing, {{"u", unrelated}}); }).code(), ErrorCode::kNotFound);
}

TEST(Preload, ShapeAndDtypeMismatchesNameBoth) {
  Tree source = pretrained();
  source.set("enc.layer0.w", filled(1, {3, 4}));
  const PreloadSpec spec{.name = "shape", .source = "s", .prefix = {{"enc.", "encoder."}}};
  const Error shape = error_of([&] { apply_one(spec, {{"s", source}}); });
  EXPECT_EQ(shape.code(), ErrorCode::kMismatch);
  EXPECT_EQ(shape.context().entry, "encoder.layer0.w");
  const std::string text = shape.what();
  EXPECT_NE(text.find("'encoder.layer0.w': source 'enc.layer0.w' [3, 4] float32, target [2] float32"),
            std::string::npos)
      << text;
  Tree doubles = pretrained();
  doubles.set("enc.layer0.b", Tensor::zeros(DType::kFloat64, {2}));
  const Error dtype = error_of([&] { apply_one(spec, {{"s", doubles}}); });
  EXPECT_EQ(dtype.code(), ErrorCode::kMismatch);
  EXPECT_NE(std::string(dtype.what()).find("[2] float64, target [2] float32"), std::string::npos) << dtype.what();
  Tree kinds = pretrained();
  kinds.set("enc.layer0.b", "a string");
  EXPECT_EQ(error_of([&] { apply_one(spec, {{"s", kinds}}); }).code(), ErrorCode::kMismatch);
}

TEST(Preload, StagesDecideWhichSpecsRun) {
  Tree lm = Tree::map();
  lm.set("w", filled(7));
  const std::vector<PreloadSpec> specs{
      {.name = "fresh", .source = "pre", .prefix = {{"enc.", "encoder."}}, .when = PreloadWhen::kFreshTraining},
      {.name = "always", .source = "lm", .prefix = {{"", "lm."}}, .when = PreloadWhen::kAlways},
      {.name = "recog", .source = "dec", .prefix = {{"", "decoder."}}, .when = PreloadWhen::kNotInTraining},
  };
  Tree decoder = Tree::map();
  decoder.set("w", filled(5));
  decoder.set("b", filled(6));
  const std::map<std::string, Tree> sources{{"pre", pretrained()}, {"lm", lm}, {"dec", decoder}};
  struct Row {
    TrainingStage stage;
    std::vector<bool> applied;
  };
  for (const Row& row : {Row{TrainingStage::kFreshTraining, {true, true, false}},
                         Row{TrainingStage::kContinuedTraining, {false, true, false}},
                         Row{TrainingStage::kNotTraining, {false, true, true}}}) {
    const PreloadReport report = apply_preloads(target(), specs, from_memory(sources, row.stage));
    ASSERT_EQ(report.preloads.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(report.preloads[i].applied, row.applied[i]) << i;
      EXPECT_EQ(report.preloads[i].name, specs[i].name);
      if (!row.applied[i]) {
        EXPECT_TRUE(report.preloads[i].set.empty());
      }
    }
    EXPECT_EQ(first(report.state.at("encoder.layer0.w")), row.applied[0] ? 1.0f : 0.0f);
    EXPECT_EQ(first(report.state.at("lm.w")), 7.0f);
    EXPECT_EQ(first(report.state.at("decoder.b")), row.applied[2] ? 6.0f : 0.0f);
    // The "always" spec's parameters are init-only.
    EXPECT_EQ(report.init_only(), (Names{"lm.w"}));
  }
}

TEST(Preload, SkippedSpecsDoNotReadTheirSource) {
  const PreloadSpec spec{.name = "fresh", .source = "/no/such/file.pt", .when = PreloadWhen::kFreshTraining};
  const PreloadReport report =
      apply_preloads(target(), {&spec, 1}, {.stage = TrainingStage::kContinuedTraining});
  EXPECT_FALSE(report.preloads[0].applied);
  EXPECT_TRUE(report.preloads[0].source.empty());
  EXPECT_EQ(report.state, target());
}

TEST(Preload, TwoPreloadsWritingOneParameterConflictUnlessOverriding) {
  Tree second = Tree::map();
  second.set("layer0.w", filled(9));
  std::vector<PreloadSpec> specs{
      {.name = "first", .source = "pre", .prefix = {{"enc.", "encoder."}}},
      {.name = "second", .source = "two", .prefix = {{"", "encoder."}}, .ignore_missing = true},
  };
  const std::map<std::string, Tree> sources{{"pre", pretrained()}, {"two", second}};
  const Error conflict = error_of([&] { apply_preloads(target(), specs, from_memory(sources)); });
  EXPECT_EQ(conflict.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(conflict.what()).find("preload 'second'"), std::string::npos) << conflict.what();
  EXPECT_NE(std::string(conflict.what()).find("which preload 'first' wrote"), std::string::npos) << conflict.what();
  EXPECT_EQ(conflict.context().entry, "encoder.layer0.w");

  specs[1].overrides = true;
  const PreloadReport report = apply_preloads(target(), specs, from_memory(sources));
  EXPECT_EQ(first(report.state.at("encoder.layer0.w")), 9.0f);  // the later one
  EXPECT_EQ(first(report.state.at("encoder.layer0.b")), 2.0f);  // the earlier one's, kept
  EXPECT_EQ(report.preloads[1].overridden, (Names{"encoder.layer0.w"}));
  // What the first set is not missing for the second.
  EXPECT_TRUE(report.preloads[1].missing.empty());
}

TEST(Preload, AllOrNothing) {
  // The second spec fails: the state is untouched (the input is const and nothing is returned).
  const Tree state = target();
  const std::vector<PreloadSpec> specs{
      {.name = "ok", .source = "pre", .prefix = {{"enc.", "encoder."}}},
      {.name = "bad", .source = "pre", .prefix = {{"nothing.", "lm."}}},
  };
  EXPECT_THROW(apply_preloads(state, specs, from_memory({{"pre", pretrained()}})), Error);
  EXPECT_EQ(state, target());
}

TEST(Preload, NestedTargetsAndSources) {
  // A Flax-like nested target, a flat source: names match by dotted names.
  Tree nested = Tree::map();
  Tree& encoder = nested.set("params", Tree::map()).set("encoder", Tree::map());
  encoder.set("kernel", filled(0));
  encoder.set("bias", filled(0));
  Tree source = Tree::map();
  source.set("kernel", filled(3));
  source.set("bias", filled(4));
  const PreloadSpec spec{.name = "flax", .source = "s", .prefix = {{"", "params.encoder."}}};
  const PreloadReport report = apply_preloads(nested, {&spec, 1}, from_memory({{"s", source}}));
  EXPECT_EQ(first(*report.state.find_key_path({std::string("params"), std::string("encoder"), std::string("kernel")})),
            3.0f);
  EXPECT_TRUE(report.state.find("params")->is_map());
  EXPECT_EQ(report.preloads[0].set, (Pairs{{"params.encoder.kernel", "kernel"}, {"params.encoder.bias", "bias"}}));
}

TEST(Preload, ReadsFilesAndRunDirectories) {
  testing::TempDir dir;
  save(dir / "pretrained.safetensors", pretrained());
  const std::vector<PreloadSpec> from_file{
      {.name = "file", .source = dir / "pretrained.safetensors", .prefix = {{"enc.", "encoder."}}}};
  const PreloadReport report = apply_preloads(target(), from_file);
  EXPECT_EQ(report.preloads[0].source, dir / "pretrained.safetensors");
  EXPECT_EQ(report.state.at("encoder.layer1.w"), pretrained().at("enc.layer1.w"));

  // A RETURNN run directory: its latest epoch.
  std::filesystem::create_directories(dir / "run");
  Tree older = pretrained();
  older.set("enc.layer1.w", filled(-1));
  Tree wrapped = Tree::map();
  wrapped.set("model", older);
  save(dir / "run" / "epoch.001.pt", wrapped);
  wrapped.set("model", pretrained());
  save(dir / "run" / "epoch.002.pt", wrapped);
  const std::vector<PreloadSpec> from_run{{.name = "run", .source = dir / "run", .prefix = {{"enc.", "encoder."}},
                                           .checkpoint_key = "model"}};
  const PreloadReport run = apply_preloads(target(), from_run);
  EXPECT_EQ(run.preloads[0].source, dir / "run" / "epoch.002.pt");
  EXPECT_EQ(first(run.state.at("encoder.layer1.w")), 3.0f);

  const std::vector<PreloadSpec> absent{{.name = "absent", .source = dir / "nope.pt"}};
  EXPECT_EQ(error_of([&] { apply_preloads(target(), absent); }).code(), ErrorCode::kNotFound);
  std::filesystem::create_directories(dir / "empty_run");
  const std::vector<PreloadSpec> empty{{.name = "empty", .source = dir / "empty_run"}};
  EXPECT_EQ(error_of([&] { apply_preloads(target(), empty); }).code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ckpt
