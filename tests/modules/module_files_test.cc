// split_by_module / merge_module_files: which leaf goes to which file
// (deeper assignments, exclusion from the parent, several roots, component
// boundaries), init-only leaves, refused options, and the merge's round trip
// and checks. Expected placements are hand-written tables.

#include "ckpt/modules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "ckpt/error.h"

namespace ckpt {
namespace {

using Names = std::vector<std::string>;

Tensor vector_of(float value, int64_t size = 2) {
  std::vector<float> values(static_cast<size_t>(size), value);
  return Tensor::from_values<float>(DType::kFloat32, {size}, std::span<const float>(values));
}

// A flat torch-style state dict: two top-level models (a model and an LM).
Tree flat_state() {
  Tree state = Tree::map();
  for (const char* name : {"encoder.layers.0.weight", "encoder.layers.1.weight", "encoder.norm.bias",
                           "decoder.lm.weight", "decoder.lmx.weight", "decoder.out.bias", "dec.weight",
                           "lm.embed.weight", "pretrained_lm.w", "step_scale"}) {
    state.set(name, vector_of(static_cast<float>(state.size())));
  }
  return state;
}

// The file of each leaf, as split_by_module placed it.
std::map<std::string, std::string> placement(const std::vector<ModuleFile>& parts) {
  std::map<std::string, std::string> where;
  for (const ModuleFile& part : parts) {
    for (const Tree::Leaf& leaf : part.state.leaves()) {
      EXPECT_TRUE(where.emplace(leaf.name, part.file).second) << leaf.name << " in two parts";
    }
  }
  return where;
}

Names files_of(const std::vector<ModuleFile>& parts) {
  Names files;
  for (const ModuleFile& part : parts) files.push_back(part.file);
  return files;
}

std::set<std::string> leaf_names(const Tree& tree) {
  std::set<std::string> names;
  for (const Tree::Leaf& leaf : tree.leaves()) names.insert(leaf.name);
  return names;
}

TEST(ModuleFiles, DeeperAssignmentBeatsShallowerAndLeavesTheParent) {
  const ModuleFileOptions options{.files = {{"encoder", "encoder.safetensors"},
                                            {"encoder.layers.1", "layer1.safetensors"},
                                            {"decoder.lm", "lm.safetensors"}}};
  const std::vector<ModuleFile> parts = split_by_module(flat_state(), options);
  EXPECT_EQ(files_of(parts), (Names{"state", "encoder.safetensors", "layer1.safetensors", "lm.safetensors"}));
  const std::map<std::string, std::string> expected{
      {"encoder.layers.0.weight", "encoder.safetensors"},
      {"encoder.layers.1.weight", "layer1.safetensors"},
      {"encoder.norm.bias", "encoder.safetensors"},
      {"decoder.lm.weight", "lm.safetensors"},
      {"decoder.lmx.weight", "state"},  // component boundary: not under decoder.lm
      {"decoder.out.bias", "state"},
      {"dec.weight", "state"},
      {"lm.embed.weight", "state"},
      {"pretrained_lm.w", "state"},
      {"step_scale", "state"},
  };
  EXPECT_EQ(placement(parts), expected);
  EXPECT_EQ(parts[1].modules, (Names{"encoder"}));
  EXPECT_EQ(parts[2].modules, (Names{"encoder.layers.1"}));
  EXPECT_TRUE(parts[0].modules.empty());
  // The tensors are the state's own (shared buffers, same values).
  EXPECT_EQ(parts[3].state.at("decoder.lm.weight"), flat_state().at("decoder.lm.weight"));
}

TEST(ModuleFiles, SeveralRootsAndSharedFiles) {
  const ModuleFileOptions options{.files = {{"encoder", "model.safetensors"},
                                            {"decoder", "model.safetensors"},
                                            {"lm", "lm.safetensors"}},
                                  .main_file = "rest.safetensors"};
  const std::vector<ModuleFile> parts = split_by_module(flat_state(), options);
  EXPECT_EQ(files_of(parts), (Names{"rest.safetensors", "lm.safetensors", "model.safetensors"}));
  EXPECT_EQ(parts[2].modules, (Names{"decoder", "encoder"}));
  EXPECT_EQ(leaf_names(parts[1].state), (std::set<std::string>{"lm.embed.weight"}));
  EXPECT_EQ(leaf_names(parts[0].state), (std::set<std::string>{"dec.weight", "pretrained_lm.w", "step_scale"}));
  EXPECT_EQ(parts[2].state.size(), 6u);
}

TEST(ModuleFiles, ComponentBoundaries) {
  // "dec" owns "dec.weight" only, never "decoder.*".
  const std::vector<ModuleFile> parts = split_by_module(flat_state(), {.files = {{"dec", "dec.safetensors"}}});
  EXPECT_EQ(leaf_names(parts[1].state), (std::set<std::string>{"dec.weight"}));
  // A module that is a whole leaf name owns that leaf.
  const std::vector<ModuleFile> leaf = split_by_module(flat_state(), {.files = {{"step_scale", "s.safetensors"}}});
  EXPECT_EQ(leaf_names(leaf[1].state), (std::set<std::string>{"step_scale"}));
  // Something that is only a string prefix matches nothing.
  EXPECT_THROW(split_by_module(flat_state(), {.files = {{"encod", "e.safetensors"}}}), Error);
}

TEST(ModuleFiles, InitOnlyIsInNoPartAndBeatsAssignments) {
  const ModuleFileOptions options{.files = {{"encoder", "encoder.safetensors"}, {"pretrained_lm", "p.safetensors"}},
                                  .init_only = {"pretrained_lm", "encoder.norm.bias"}};
  const std::vector<ModuleFile> parts = split_by_module(flat_state(), options);
  const std::map<std::string, std::string> where = placement(parts);
  EXPECT_FALSE(where.contains("pretrained_lm.w"));
  EXPECT_FALSE(where.contains("encoder.norm.bias"));
  EXPECT_EQ(where.size(), flat_state().size() - 2);
  // Its file still exists, empty.
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].file, "p.safetensors");
  EXPECT_TRUE(parts[2].state.is_map());
  EXPECT_EQ(parts[2].state.size(), 0u);
  EXPECT_EQ(module_file_of("pretrained_lm.w", options), "");
  EXPECT_EQ(module_file_of("encoder.layers.0.weight", options), "encoder.safetensors");
  EXPECT_EQ(module_file_of("other", options), "state");
}

TEST(ModuleFiles, RefusedOptions) {
  const Tree state = flat_state();
  const auto refused = [&](const ModuleFileOptions& options, const std::string& needle) {
    try {
      split_by_module(state, options);
      ADD_FAILURE() << "accepted; expected an error mentioning " << needle;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  };
  refused({.files = {{"nothing", "n.safetensors"}}}, "nothing");
  refused({.files = {{"encoder.layers.7", "n.safetensors"}}}, "encoder.layers.7");
  refused({.init_only = {"no_such"}}, "no_such");
  refused({.files = {{"encoder", "sub/e.safetensors"}}}, "sub/e.safetensors");
  refused({.files = {{"encoder", ".."}}}, "..");
  refused({.files = {{"encoder", ""}}}, "plain file name");
  refused({.files = {{"", "all.safetensors"}}}, "empty");
  refused({.main_file = "a/b"}, "a/b");
  EXPECT_THROW(split_by_module(Tree(int64_t{3}), {}), Error);
}

// A nested (Flax-like) tree with a list, an empty map and non-tensor leaves.
Tree nested_state() {
  Tree state = Tree::map();
  Tree& params = state.set("params", Tree::map());
  Tree& encoder = params.set("encoder", Tree::map());
  encoder.set("kernel", vector_of(1));
  encoder.set("bias", vector_of(2));
  encoder.set("sub", Tree::map()).set("scale", vector_of(3));
  Tree& decoder = params.set("decoder", Tree::map());
  decoder.set("kernel", vector_of(4));
  Tree& blocks = decoder.set("blocks", Tree::list());
  blocks.push_back(vector_of(5));
  blocks.push_back(vector_of(6));
  state.set("step", int64_t{12});
  state.set("empty", Tree::map());
  state.set("note", "text");
  state.set("params_ema", Tree::map()).set("encoder", Tree::map()).set("kernel", vector_of(7));
  return state;
}

TEST(ModuleFiles, NestedTreesStayNested) {
  const ModuleFileOptions options{.files = {{"params.encoder", "encoder.safetensors"},
                                            {"params.encoder.sub", "state"},
                                            {"params.decoder.blocks", "blocks.safetensors"}}};
  const std::vector<ModuleFile> parts = split_by_module(nested_state(), options);
  ASSERT_EQ(files_of(parts), (Names{"state", "blocks.safetensors", "encoder.safetensors"}));
  // The encoder part is the same nest without the other leaves.
  Tree encoder_part = Tree::map();
  Tree& encoder = encoder_part.set("params", Tree::map()).set("encoder", Tree::map());
  encoder.set("kernel", vector_of(1));
  encoder.set("bias", vector_of(2));
  EXPECT_EQ(parts[2].state, encoder_part);
  // The list went whole, as a list.
  const Tree* blocks = parts[1].state.find_path("params.decoder.blocks");
  ASSERT_NE(blocks, nullptr);
  EXPECT_TRUE(blocks->is_list());
  EXPECT_EQ(*blocks, *nested_state().find_path("params.decoder.blocks"));
  // The main file kept the rest, "params.encoder.sub" (assigned back to it) included,
  // and the empty map.
  EXPECT_EQ(leaf_names(parts[0].state), (std::set<std::string>{"params.encoder.sub.scale", "params.decoder.kernel",
                                                                "step", "note", "params_ema.encoder.kernel"}));
  ASSERT_NE(parts[0].state.find("empty"), nullptr);
  EXPECT_TRUE(parts[0].state.find("empty")->is_map());
}

TEST(ModuleFiles, AListIsNeverDivided) {
  EXPECT_THROW(split_by_module(nested_state(), {.files = {{"params.decoder.blocks.1", "b.safetensors"}}}), Error);
  EXPECT_THROW(split_by_module(nested_state(), {.init_only = {"params.decoder.blocks.0"}}), Error);
  // A list that goes whole to init-only is fine.
  const std::vector<ModuleFile> parts = split_by_module(nested_state(), {.init_only = {"params.decoder.blocks"}});
  EXPECT_EQ(parts[0].state.find_path("params.decoder.blocks"), nullptr);
}

TEST(ModuleFiles, SplitThenMergeGivesTheOriginal) {
  const std::vector<std::pair<Tree, ModuleFileOptions>> cases = {
      {flat_state(), {.files = {{"encoder", "encoder.safetensors"}, {"encoder.layers.1", "l1.safetensors"},
                                {"lm", "lm.safetensors"}}}},
      {nested_state(), {.files = {{"params.encoder", "encoder.safetensors"}, {"params.encoder.sub", "state"},
                                  {"params.decoder.blocks", "blocks.safetensors"}, {"empty", "e.safetensors"}}}},
  };
  for (const auto& [state, options] : cases) {
    const std::vector<ModuleFile> parts = split_by_module(state, options);
    const ModuleFilesReport ordered = merge_module_files(parts, options, {.order_like = &state});
    EXPECT_TRUE(ordered.ok()) << ordered.summary();
    EXPECT_EQ(ordered.summary(), "");
    EXPECT_EQ(ordered.state, state);
    // Without a reference order: the same leaves with the same values (the parts' order).
    const ModuleFilesReport unordered = merge_module_files(parts, options);
    EXPECT_TRUE(unordered.ok()) << unordered.summary();
    const std::vector<Tree::Leaf> leaves = state.leaves();
    EXPECT_EQ(unordered.state.leaves().size(), leaves.size());
    for (const Tree::Leaf& leaf : leaves) {
      const Tree* found = unordered.state.find_path(leaf.name);
      ASSERT_NE(found, nullptr) << leaf.name;
      EXPECT_EQ(*found, *leaf.value) << leaf.name;
    }
    // The files in another order make the same union.
    std::vector<ModuleFile> reversed(parts.rbegin(), parts.rend());
    EXPECT_EQ(merge_module_files(reversed, options, {.order_like = &state}).state, state);
  }
}

TEST(ModuleFiles, MergeFindsALeafInTwoFiles) {
  const ModuleFileOptions options{.files = {{"encoder", "encoder.safetensors"}}};
  std::vector<ModuleFile> parts = split_by_module(flat_state(), options);
  parts[0].state.set("encoder.norm.bias", vector_of(99));  // also in the main file
  const ModuleFilesReport report = merge_module_files(parts, options);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.in_two_files, (Names{"encoder.norm.bias"}));
  // Found in the main file first, so also in the wrong file.
  EXPECT_EQ(report.wrong_file, (Names{"encoder.norm.bias"}));
  EXPECT_EQ(report.details, (Names{"encoder.norm.bias: in state and encoder.safetensors",
                                   "encoder.norm.bias: in state, assigned to encoder.safetensors"}));
  EXPECT_EQ(report.summary(),
            "module files found 2 problems: in two files (1): encoder.norm.bias: in state and encoder.safetensors; "
            "in the wrong file (1): encoder.norm.bias: in state, assigned to encoder.safetensors");
  // The first file's value is kept.
  EXPECT_EQ(report.state.at("encoder.norm.bias"), Tree(vector_of(99)));
}

TEST(ModuleFiles, MergeFindsNestedConflictsAndWrongFiles) {
  const ModuleFileOptions options{.files = {{"params.encoder", "encoder.safetensors"}}, .init_only = {"note"}};
  Tree main = Tree::map();
  main.set("params", Tree::map()).set("encoder", Tree::map()).set("kernel", vector_of(1));
  main.set("note", "saved although init-only");
  Tree encoder = Tree::map();
  Tree& params = encoder.set("params", Tree::map());
  params.set("encoder", Tree::map()).set("kernel", vector_of(2));
  params.set("decoder", Tree::map()).set("w", vector_of(3));
  const std::vector<ModuleFile> parts{{.file = "state", .state = main}, {.file = "encoder.safetensors", .state = encoder}};
  const ModuleFilesReport report = merge_module_files(parts, options);
  EXPECT_EQ(report.in_two_files, (Names{"params.encoder.kernel"}));
  EXPECT_EQ(report.wrong_file, (Names{"params.encoder.kernel", "note", "params.decoder.w"}));
  EXPECT_EQ(report.details[0], "params.encoder.kernel: in state and encoder.safetensors");
  EXPECT_EQ(report.details[2], "note: in state, init-only (in no file)");
  EXPECT_EQ(report.details[3], "params.decoder.w: in encoder.safetensors, assigned to state");
  EXPECT_TRUE(report.missing_files.empty());
  // Maps united: both files' params are there.
  EXPECT_NE(report.state.find_path("params.decoder.w"), nullptr);
}

TEST(ModuleFiles, MergeReportsMissingFilesAndRefusesBadParts) {
  const ModuleFileOptions options{.files = {{"encoder", "encoder.safetensors"}, {"lm", "lm.safetensors"}}};
  std::vector<ModuleFile> parts = split_by_module(flat_state(), options);
  parts.erase(parts.begin() + 2);  // lm.safetensors
  const ModuleFilesReport report = merge_module_files(parts, options);
  EXPECT_EQ(report.missing_files, (Names{"lm.safetensors"}));
  EXPECT_EQ(report.details, (Names{"lm.safetensors: no such file"}));
  EXPECT_EQ(report.state.find_path("lm.embed.weight"), nullptr);
  EXPECT_FALSE(report.ok());

  std::vector<ModuleFile> twice{parts[0], parts[0]};
  EXPECT_THROW(merge_module_files(twice, options), Error);
  std::vector<ModuleFile> leaf{{.file = "state", .state = Tree(1.5)}};
  EXPECT_THROW(merge_module_files(leaf, options), Error);
  std::vector<ModuleFile> bad_name{{.file = "../x", .state = Tree::map()}};
  EXPECT_THROW(merge_module_files(bad_name, options), Error);
}

TEST(ModuleFiles, EmptyContainersInTwoFilesAreFound) {
  const ModuleFileOptions options{};
  Tree a = Tree::map();
  a.set("empty", Tree::map());
  Tree b = Tree::map();
  b.set("empty", Tree::map()).set("x", vector_of(1));
  const std::vector<ModuleFile> parts{{.file = "state", .state = a}, {.file = "other", .state = b}};
  const ModuleFilesReport report = merge_module_files(parts, options);
  EXPECT_EQ(report.in_two_files, (Names{"empty"}));
}

}  // namespace
}  // namespace ckpt
