// The `ckpt` tool, run as a subprocess (CKPT_TOOL_PATH) in a temporary
// directory: exit codes, stdout (JSON parsed with simdjson and checked field
// by field against trees the tests build with ckpt::save), and stderr being
// exactly one line that names the file.


#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/registry.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "support/tool_run.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

using testing::read_file;
using testing::run_tool;
using testing::ToolRun;

// stderr of a failed run: exactly one line, "ckpt: ...", mentioning `needle`.
void expect_one_error_line(const ToolRun& run, const std::string& needle) {
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << "stderr: " << run.err;
  EXPECT_TRUE(run.err.ends_with('\n')) << "stderr: " << run.err;
  EXPECT_TRUE(run.err.starts_with("ckpt: ")) << "stderr: " << run.err;
  EXPECT_NE(run.err.find(needle), std::string::npos) << "stderr lacks '" << needle << "': " << run.err;
}

template <class T>
Tensor tensor_of(DType dtype, Shape shape, std::vector<T> values) {
  return Tensor::from_values<T>(dtype, std::move(shape), values);
}

// A training-like state with every kind of leaf, nested maps, integer keys
// and a list.
Tree sample_state() {
  Tree model = Tree::map();
  model.set("encoder.weight", tensor_of<float>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}));
  model.set("encoder.bias", tensor_of<uint16_t>(DType::kBFloat16, {2}, {0x3F80, 0xC000}));
  model.set("steps", tensor_of<int64_t>(DType::kInt64, {}, {42}));
  Tree slot = Tree::map();
  slot.set("exp_avg", tensor_of<float>(DType::kFloat32, {3}, {0.5f, 0.25f, 0.125f}));
  Tree optimizer_state = Tree::map();
  optimizer_state.set(int64_t{0}, slot);
  Tree betas = Tree::list();
  betas.push_back(0.9);
  betas.push_back(0.999);
  Tree state = Tree::map();
  state.set("model", model);
  state.set("optimizer", Tree::map());
  state.find("optimizer")->set("state", optimizer_state);
  state.find("optimizer")->set("betas", betas);
  state.set("epoch", int64_t{7});
  state.set("loss", 0.75);
  state.set("finished", false);
  state.set("run", "unit-test");
  state.set("rng", Bytes{std::string("\x00\x01\xff", 3)});
  state.set("nothing", Tree(nullptr));
  return state;
}

// Only the tensors of sample_state(), all in dtypes that npz holds.
Tree npz_friendly_state() {
  Tree state = Tree::map();
  state.set("w", tensor_of<float>(DType::kFloat32, {2, 2}, {1, -2, 3.5f, 0}));
  state.set("ids", tensor_of<int64_t>(DType::kInt64, {3}, {1, 2, 3}));
  state.set("mask", tensor_of<uint8_t>(DType::kBool, {2}, {1, 0}));
  return state;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    save(dir_ / "state.safetensors", sample_state(), {.metadata = {{"author", "cli_test"}}});
  }
  ToolRun ckpt(const std::vector<std::string>& arguments) {
    ToolRun run = run_tool(dir_.path(), arguments);
    EXPECT_EQ(run.signal, 0) << "ended by a signal";
    return run;
  }
  fs::path path(const std::string& name) const { return dir_ / name; }

  simdjson::dom::parser parser_;
  testing::TempDir dir_;
};

// ---- version, help, usage ----

TEST_F(CliTest, VersionAndHelp) {
  const ToolRun version = ckpt({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_TRUE(version.out.starts_with("ckpt ")) << version.out;
  EXPECT_TRUE(version.err.empty());

  const ToolRun help = ckpt({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* command : {"inspect", "convert", "verify", "diff", "formats", "example"}) {
    EXPECT_NE(help.out.find(command), std::string::npos) << command;
  }
  const ToolRun command_help = ckpt({"diff", "--help"});
  EXPECT_EQ(command_help.exit_code, 0);
  EXPECT_NE(command_help.out.find("--atol"), std::string::npos);
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& arguments : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"--bogus"},
           {"inspect"},
           {"inspect", "state.safetensors", "--bogus"},
           {"diff", "state.safetensors"},
           {"convert", "state.safetensors"},
           {"diff", "state.safetensors", "state.safetensors", "--atol", "-1"},
           {"diff", "state.safetensors", "state.safetensors", "--atol", "abc"},
       }) {
    const ToolRun run = ckpt(arguments);
    std::string joined;
    for (const auto& argument : arguments) joined += argument + " ";
    EXPECT_EQ(run.exit_code, 2) << joined;
    EXPECT_TRUE(run.err.starts_with("ckpt: ")) << joined << ": " << run.err;
    EXPECT_TRUE(run.out.empty()) << joined;
  }
  EXPECT_NE(ckpt({"frobnicate"}).err.find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_NE(ckpt({"inspect", "x", "--bogus"}).err.find("usage: ckpt inspect"), std::string::npos);
}

// ---- inspect ----

TEST_F(CliTest, InspectTable) {
  const ToolRun run = ckpt({"inspect", "state.safetensors"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.err.empty());
  for (const char* text : {"safetensors", "model.encoder.weight", "bfloat16", "[2, 3]", "24 B",
                           "optimizer.state.0.exp_avg", "optimizer.betas.1", "\"unit-test\"",
                           "author", "cli_test", "4 tensors"}) {
    EXPECT_NE(run.out.find(text), std::string::npos) << "missing " << text << " in\n" << run.out;
  }
}

TEST_F(CliTest, InspectJsonMatchesTheSavedTree) {
  const ToolRun run = ckpt({"inspect", "state.safetensors", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << "one line of JSON";
  simdjson::dom::element root;
  ASSERT_EQ(parser_.parse(run.out).get(root), simdjson::SUCCESS) << run.out;

  EXPECT_EQ(std::string_view(root["path"]), "state.safetensors");
  EXPECT_EQ(std::string_view(root["format"]), "safetensors");
  EXPECT_EQ(std::string_view(root["checksum"]), "xxh3");
  EXPECT_EQ(std::string_view(root["metadata"]["author"]), "cli_test");

  // Tensors: in file order, as ckpt::open lists them, each as the tree has it.
  const Contents contents = open(path("state.safetensors"));
  const Tree expected = sample_state();
  simdjson::dom::array tensors = root["tensors"];
  ASSERT_EQ(tensors.size(), contents.entries.size());
  ASSERT_EQ(tensors.size(), expected.tensor_leaves().size());
  size_t i = 0;
  for (simdjson::dom::element tensor : tensors) {
    const std::string name{std::string_view(tensor["name"])};
    EXPECT_EQ(name, contents.entries[i++].name);
    const Tree* leaf = expected.find_path(name);
    ASSERT_NE(leaf, nullptr) << name;
    ASSERT_TRUE(leaf->is_tensor()) << name;
    EXPECT_EQ(std::string_view(tensor["dtype"]), dtype_name(leaf->tensor().dtype())) << name;
    Shape shape;
    for (simdjson::dom::element dim : simdjson::dom::array(tensor["shape"])) {
      shape.push_back(int64_t(dim));
    }
    EXPECT_EQ(shape, leaf->tensor().shape()) << name;
    EXPECT_EQ(uint64_t(tensor["nbytes"]), leaf->tensor().nbytes()) << name;
  }

  // Values: every non-tensor leaf, by dotted name.
  simdjson::dom::object values = root["values"];
  EXPECT_EQ(values.size(), 8u);
  EXPECT_EQ(int64_t(values["epoch"]), 7);
  EXPECT_EQ(double(values["loss"]), 0.75);
  EXPECT_EQ(bool(values["finished"]), false);
  EXPECT_EQ(std::string_view(values["run"]), "unit-test");
  EXPECT_EQ(std::string_view(values["rng"]["bytes_base64"]), "AAH/");
  EXPECT_TRUE(values["nothing"].is_null());
  EXPECT_EQ(double(values["optimizer.betas.0"]), 0.9);
  EXPECT_EQ(double(values["optimizer.betas.1"]), 0.999);
}

TEST_F(CliTest, InspectPlainFileHasNoChecksum) {
  save(path("plain.safetensors"), npz_friendly_state(), {.extras = false});
  const ToolRun run = ckpt({"inspect", "plain.safetensors", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  simdjson::dom::element root;
  ASSERT_EQ(parser_.parse(run.out).get(root), simdjson::SUCCESS);
  EXPECT_TRUE(root["checksum"].is_null());
  EXPECT_EQ(simdjson::dom::object(root["values"]).size(), 0u);
}

TEST_F(CliTest, MissingFileExitsTwoNamingIt) {
  for (const char* command : {"inspect", "verify"}) {
    const ToolRun run = ckpt({command, "no-such-file.safetensors"});
    EXPECT_EQ(run.exit_code, 2) << command;
    expect_one_error_line(run, "no-such-file.safetensors");
    EXPECT_TRUE(run.out.empty());
  }
}

TEST_F(CliTest, UnsupportedFormatExitsTwoNamingIt) {
  std::ofstream(path("notes.txt")) << "not a checkpoint\n";
  const ToolRun run = ckpt({"inspect", "notes.txt"});
  EXPECT_EQ(run.exit_code, 2);
  expect_one_error_line(run, "notes.txt");
}

TEST_F(CliTest, TruncatedFileIsCorruptExitOne) {
  const std::string bytes = read_file(path("state.safetensors"));
  std::ofstream(path("short.safetensors"), std::ios::binary) << bytes.substr(0, bytes.size() - 4);
  for (const char* command : {"inspect", "verify"}) {
    const ToolRun run = ckpt({command, "short.safetensors"});
    EXPECT_EQ(run.exit_code, 1) << command;
    expect_one_error_line(run, "short.safetensors");
  }
}

// ---- verify ----

TEST_F(CliTest, VerifyOk) {
  const ToolRun run = ckpt({"verify", "state.safetensors"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  uint64_t total = 0;
  const Contents contents = open(path("state.safetensors"));
  for (const EntryInfo& entry : contents.entries) total += entry.nbytes;
  EXPECT_EQ(run.out, "OK state.safetensors (4 tensors, " + std::to_string(total) +
                         " bytes, checksums: xxh3 verified)\n");
  EXPECT_TRUE(run.err.empty());
}

TEST_F(CliTest, VerifyFindsAFlippedByteNamingTheTensor) {
  const Contents contents = open(path("state.safetensors"));
  const EntryInfo& victim = contents.entries.back();
  std::string bytes = read_file(path("state.safetensors"));
  ASSERT_LT(victim.offset, bytes.size());
  bytes[victim.offset] = static_cast<char>(bytes[victim.offset] ^ 0x40);
  std::ofstream(path("flipped.safetensors"), std::ios::binary) << bytes;

  const ToolRun run = ckpt({"verify", "flipped.safetensors"});
  EXPECT_EQ(run.exit_code, 1);
  expect_one_error_line(run, "flipped.safetensors");
  EXPECT_NE(run.err.find(victim.name), std::string::npos) << run.err;
  EXPECT_TRUE(run.out.empty());
  // Without checksums the header alone is fine: inspect still works.
  EXPECT_EQ(ckpt({"inspect", "flipped.safetensors"}).exit_code, 0);
}

// ---- convert ----

TEST_F(CliTest, ConvertKeepsTensorsBitExactAndTheTree) {
  const ToolRun run = ckpt({"convert", "state.safetensors", "copy.safetensors"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("copy.safetensors"), std::string::npos);
  EXPECT_TRUE(load(path("copy.safetensors")) == sample_state());
  EXPECT_EQ(open(path("copy.safetensors")).metadata.at("author"), "cli_test");
}

TEST_F(CliTest, ConvertToNpzAndBack) {
  save(path("small.safetensors"), npz_friendly_state());
  ToolRun run = ckpt({"convert", "small.safetensors", "small.npz"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(open(path("small.npz")).format, "npz");
  run = ckpt({"convert", "small.npz", "back.safetensors"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(load(path("back.safetensors")) == npz_friendly_state());
}

TEST_F(CliTest, ConvertToTensorsOnlyFormatKeepsTheTensorsAndSaysWhatItLeft) {
  Tree state = npz_friendly_state();
  state.set("epoch", int64_t{3});
  state.set("nested", Tree::map());
  state.find("nested")->set("t", tensor_of<double>(DType::kFloat64, {1}, {2.5}));
  save(path("mixed.safetensors"), state);
  // Refused without the flag: nothing is lost silently, nothing is written.
  const ToolRun refused = ckpt({"convert", "mixed.safetensors", "out.bin", "--to", "npz"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("'epoch'"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--drop-unsupported"), std::string::npos) << refused.err;
  EXPECT_FALSE(std::filesystem::exists(path("out.bin")));
  const ToolRun run = ckpt({"convert", "mixed.safetensors", "out.bin", "--to", "npz", "--drop-unsupported"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("dropped 1 non-tensor value (npz holds tensors only): epoch"), std::string::npos) << run.out;
  const Tree back = load(path("out.bin"));
  EXPECT_EQ(back.tensor_leaves().size(), 4u);
  ASSERT_NE(back.find_path("nested.t"), nullptr);
  EXPECT_TRUE(back.at("nested.t").tensor().equals(state.at("nested.t").tensor()));
  EXPECT_EQ(back.find_path("epoch"), nullptr);
}

TEST_F(CliTest, ConvertNoExtrasWritesAPlainFile) {
  // A plain safetensors file holds the tensors only, under their dotted names.
  EXPECT_EQ(ckpt({"convert", "state.safetensors", "plain.safetensors", "--no-extras"}).exit_code, 2);
  const ToolRun run =
      ckpt({"convert", "state.safetensors", "plain.safetensors", "--no-extras", "--drop-unsupported"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("dropped 8 non-tensor values"), std::string::npos) << run.out;
  const Contents plain = open(path("plain.safetensors"));
  EXPECT_EQ(plain.format_version, 0);
  EXPECT_EQ(plain.checksum, ChecksumKind::kNone);
  ASSERT_EQ(plain.entries.size(), 4u);
  const Tree state = sample_state();
  for (const Tree::Leaf& leaf : state.tensor_leaves()) {
    ASSERT_NE(plain.tree.find_path(leaf.name), nullptr) << leaf.name;
    EXPECT_TRUE(plain.tree.at(leaf.name).tensor().equals(leaf.value->tensor())) << leaf.name;
  }
  // A tensors-only tree converts without loss, and then diff finds nothing.
  save(path("tensors.safetensors"), npz_friendly_state());
  ASSERT_EQ(ckpt({"convert", "tensors.safetensors", "tensors-plain.safetensors", "--no-extras"})
                .exit_code,
            0);
  EXPECT_EQ(ckpt({"diff", "tensors.safetensors", "tensors-plain.safetensors"}).exit_code, 0);
}

TEST_F(CliTest, ConvertErrors) {
  // A dtype the target lacks: an error naming the output and the tensor, no file.
  ToolRun run = ckpt({"convert", "state.safetensors", "out.npz", "--drop-unsupported"});
  EXPECT_EQ(run.exit_code, 2);
  expect_one_error_line(run, "out.npz");
  EXPECT_NE(run.err.find("model.encoder.bias"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(path("out.npz")));

  run = ckpt({"convert", "state.safetensors", "out.weird"});
  EXPECT_EQ(run.exit_code, 2);
  expect_one_error_line(run, "out.weird");
  EXPECT_NE(run.err.find("--to"), std::string::npos);

  run = ckpt({"convert", "state.safetensors", "out.bin", "--to", "pickle-jar"});
  EXPECT_EQ(run.exit_code, 2);
  expect_one_error_line(run, "pickle-jar");

  run = ckpt({"convert", "absent.safetensors", "out.safetensors"});
  EXPECT_EQ(run.exit_code, 2);
  expect_one_error_line(run, "absent.safetensors");
  EXPECT_FALSE(fs::exists(path("out.safetensors")));
}

// ---- diff ----

TEST_F(CliTest, DiffOfIdenticalFilesExitsZero) {
  ASSERT_EQ(ckpt({"convert", "state.safetensors", "copy.safetensors"}).exit_code, 0);
  ToolRun run = ckpt({"diff", "state.safetensors", "copy.safetensors"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("identical"), std::string::npos);

  run = ckpt({"diff", "state.safetensors", "copy.safetensors", "--json"});
  EXPECT_EQ(run.exit_code, 0);
  simdjson::dom::element root;
  ASSERT_EQ(parser_.parse(run.out).get(root), simdjson::SUCCESS) << run.out;
  EXPECT_TRUE(bool(root["identical"]));
  EXPECT_EQ(uint64_t(root["compared"]), sample_state().leaves().size());
  for (const char* list : {"only_in_a", "only_in_b", "dtype_mismatched", "shape_mismatched",
                           "value_differences", "kind_mismatched", "leaf_differences"}) {
    EXPECT_EQ(simdjson::dom::array(root[list]).size(), 0u) << list;
  }
}

TEST_F(CliTest, DiffReportsEveryKindOfDifference) {
  Tree b = sample_state();
  Tree& model = *b.find("model");
  model.set("encoder.weight",  // one element changed by 0.5
            tensor_of<float>(DType::kFloat32, {2, 3}, {1, 2, 3.5f, 4, 5, 6}));
  model.set("encoder.bias", tensor_of<float>(DType::kFloat32, {2}, {1, -2}));  // dtype
  model.set("steps", tensor_of<int64_t>(DType::kInt64, {1}, {42}));           // shape
  b.set("epoch", int64_t{8});                                                  // value
  b.set("loss", "n/a");                                                        // kind
  b.set("new_thing", int64_t{1});                                              // only in b
  Tree a = sample_state();
  a.set("old_thing", 1.5);                                                     // only in a
  save(path("a.safetensors"), a);
  save(path("b.safetensors"), b);

  const ToolRun text = ckpt({"diff", "a.safetensors", "b.safetensors"});
  EXPECT_EQ(text.exit_code, 1) << text.err;
  EXPECT_TRUE(text.err.empty()) << text.err;
  for (const char* needle : {"old_thing", "new_thing", "encoder.bias", "steps", "epoch", "loss",
                             "max abs diff 0.5"}) {
    EXPECT_NE(text.out.find(needle), std::string::npos) << needle << " in\n" << text.out;
  }

  const ToolRun run = ckpt({"diff", "a.safetensors", "b.safetensors", "--json"});
  EXPECT_EQ(run.exit_code, 1);
  simdjson::dom::element root;
  ASSERT_EQ(parser_.parse(run.out).get(root), simdjson::SUCCESS) << run.out;
  EXPECT_FALSE(bool(root["identical"]));
  simdjson::dom::array only_a = root["only_in_a"], only_b = root["only_in_b"];
  ASSERT_EQ(only_a.size(), 1u);
  EXPECT_EQ(std::string_view(only_a.at(0)), "old_thing");
  ASSERT_EQ(only_b.size(), 1u);
  EXPECT_EQ(std::string_view(only_b.at(0)), "new_thing");

  simdjson::dom::array dtypes = root["dtype_mismatched"];
  ASSERT_EQ(dtypes.size(), 1u);
  EXPECT_EQ(std::string_view(dtypes.at(0)["name"]), "model.encoder.bias");
  EXPECT_EQ(std::string_view(dtypes.at(0)["a"]), "bfloat16");
  EXPECT_EQ(std::string_view(dtypes.at(0)["b"]), "float32");

  simdjson::dom::array shapes = root["shape_mismatched"];
  ASSERT_EQ(shapes.size(), 1u);
  EXPECT_EQ(std::string_view(shapes.at(0)["name"]), "model.steps");
  EXPECT_EQ(simdjson::dom::array(shapes.at(0)["a"]).size(), 0u);
  EXPECT_EQ(int64_t(shapes.at(0)["b"].at(0)), 1);

  simdjson::dom::array values = root["value_differences"];
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(std::string_view(values.at(0)["name"]), "model.encoder.weight");
  EXPECT_EQ(double(values.at(0)["max_abs_diff"]), 0.5);
  EXPECT_EQ(uint64_t(values.at(0)["differing_elements"]), 1u);

  simdjson::dom::array kinds = root["kind_mismatched"];
  ASSERT_EQ(kinds.size(), 1u);
  EXPECT_EQ(std::string_view(kinds.at(0)["name"]), "loss");
  EXPECT_EQ(std::string_view(kinds.at(0)["a"]), "float");
  EXPECT_EQ(std::string_view(kinds.at(0)["b"]), "string");

  simdjson::dom::array leaves = root["leaf_differences"];
  ASSERT_EQ(leaves.size(), 1u);
  EXPECT_EQ(std::string_view(leaves.at(0)["name"]), "epoch");
  EXPECT_EQ(int64_t(leaves.at(0)["a"]), 7);
  EXPECT_EQ(int64_t(leaves.at(0)["b"]), 8);
}

TEST_F(CliTest, DiffAtolAcceptsSmallDifferences) {
  Tree b = sample_state();
  b.find("model")->set("encoder.weight",
                       tensor_of<float>(DType::kFloat32, {2, 3}, {1, 2, 3.001f, 4, 5, 6}));
  save(path("b.safetensors"), b);
  EXPECT_EQ(ckpt({"diff", "state.safetensors", "b.safetensors"}).exit_code, 1);
  const ToolRun run = ckpt({"diff", "state.safetensors", "b.safetensors", "--atol", "0.01", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.out;
  simdjson::dom::element root;
  ASSERT_EQ(parser_.parse(run.out).get(root), simdjson::SUCCESS);
  EXPECT_TRUE(bool(root["identical"]));
  EXPECT_EQ(simdjson::dom::array(root["within_tolerance"]).size(), 1u);
}

TEST_F(CliTest, DiffNanAgainstNumberIsReported) {
  Tree a = npz_friendly_state();
  Tree b = npz_friendly_state();
  b.set("w", tensor_of<float>(DType::kFloat32, {2, 2}, {1, -2, std::nanf(""), 0}));
  save(path("a.safetensors"), a);
  save(path("b.safetensors"), b);
  const ToolRun run = ckpt({"diff", "a.safetensors", "b.safetensors", "--json"});
  EXPECT_EQ(run.exit_code, 1);
  simdjson::dom::element root;
  ASSERT_EQ(parser_.parse(run.out).get(root), simdjson::SUCCESS) << run.out;
  simdjson::dom::array values = root["value_differences"];
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(std::string_view(values.at(0)["max_abs_diff"]), "nan");  // JSON has no NaN
}

TEST_F(CliTest, DiffAcrossFormats) {
  save(path("small.safetensors"), npz_friendly_state());
  save(path("small.npz"), npz_friendly_state());
  EXPECT_EQ(ckpt({"diff", "small.safetensors", "small.npz"}).exit_code, 0);
}

TEST_F(CliTest, DiffErrorsNameTheFile) {
  ToolRun run = ckpt({"diff", "state.safetensors", "missing.safetensors"});
  EXPECT_EQ(run.exit_code, 2);
  expect_one_error_line(run, "missing.safetensors");
  EXPECT_TRUE(run.out.empty());

  const std::string bytes = read_file(path("state.safetensors"));
  // Cut inside the tensor data (the header intact, so it is still recognized).
  std::ofstream(path("short.safetensors"), std::ios::binary) << bytes.substr(0, bytes.size() - 8);
  run = ckpt({"diff", "short.safetensors", "state.safetensors"});
  EXPECT_EQ(run.exit_code, 1);
  expect_one_error_line(run, "short.safetensors");
}

// ---- formats ----

TEST_F(CliTest, FormatsListsTheRegistry) {
  const ToolRun text = ckpt({"formats"});
  ASSERT_EQ(text.exit_code, 0);
  for (const Format* format : formats()) {
    EXPECT_NE(text.out.find(std::string(format->id())), std::string::npos) << format->id();
  }

  const ToolRun run = ckpt({"formats", "--json"});
  ASSERT_EQ(run.exit_code, 0);
  simdjson::dom::element root;
  ASSERT_EQ(parser_.parse(run.out).get(root), simdjson::SUCCESS) << run.out;
  simdjson::dom::array listed = root["formats"];
  ASSERT_EQ(listed.size(), formats().size());
  size_t i = 0;
  for (simdjson::dom::element entry : listed) {
    const Format& format = *formats()[i++];
    EXPECT_EQ(std::string_view(entry["id"]), format.id());
    EXPECT_EQ(std::string_view(entry["description"]), format.description());
    const FormatCapabilities capabilities = format.capabilities();
    EXPECT_EQ(bool(entry["read"]), capabilities.read);
    EXPECT_EQ(bool(entry["write"]), capabilities.write);
    EXPECT_EQ(bool(entry["nested_tree"]), capabilities.nested_tree);
    EXPECT_EQ(bool(entry["lists_and_int_keys"]), capabilities.lists_and_int_keys);
    EXPECT_EQ(bool(entry["checksums"]), capabilities.checksums);
    std::vector<std::string> extensions, dtypes;
    for (simdjson::dom::element e : simdjson::dom::array(entry["extensions"])) {
      extensions.emplace_back(std::string_view(e));
    }
    for (simdjson::dom::element d : simdjson::dom::array(entry["dtypes"])) {
      dtypes.emplace_back(std::string_view(d));
    }
    std::vector<std::string> expected_extensions, expected_dtypes;
    for (std::string_view e : format.extensions()) expected_extensions.emplace_back(e);
    for (DType d : format.dtypes()) expected_dtypes.emplace_back(dtype_name(d));
    EXPECT_EQ(extensions, expected_extensions) << format.id();
    EXPECT_EQ(dtypes, expected_dtypes) << format.id();
  }
  // The native format is there and can do everything.
  const Format& native = format_by_id("safetensors");
  EXPECT_TRUE(native.capabilities().nested_tree);
}

// ---- example ----

TEST_F(CliTest, ExampleWritesARealisticTrainingState) {
  const ToolRun run = ckpt({"example", "ex.safetensors"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Tree state = load(path("ex.safetensors"));
  EXPECT_EQ(state.at("model.encoder.weight").tensor().dtype(), DType::kFloat32);
  EXPECT_EQ(state.at("model.encoder.weight").tensor().shape(), (Shape{16, 8}));
  EXPECT_EQ(state.at("model.head.weight").tensor().dtype(), DType::kBFloat16);
  EXPECT_EQ(state.at("model.position_ids").tensor().dtype(), DType::kInt64);
  EXPECT_TRUE(state.at("model.norm.num_batches_tracked").tensor().shape().empty());
  EXPECT_TRUE(state.at("optimizer.state").find(int64_t{0}) != nullptr) << "integer keys";
  EXPECT_TRUE(state.at("optimizer.param_groups").is_list());
  EXPECT_EQ(state.at("step").integer(), 1000);
  EXPECT_EQ(state.at("optimizer.state.0.step").tensor().values<float>()[0], 1000.0f);
  EXPECT_EQ(state.at("run_name").kind(), Tree::Kind::kString);
  EXPECT_EQ(ckpt({"verify", "ex.safetensors"}).exit_code, 0);

  // Deterministic: the same step gives the same state; another step differs.
  ASSERT_EQ(ckpt({"example", "same.safetensors"}).exit_code, 0);
  EXPECT_EQ(ckpt({"diff", "ex.safetensors", "same.safetensors"}).exit_code, 0);
  ASSERT_EQ(ckpt({"example", "later.safetensors", "--step", "1100"}).exit_code, 0);
  EXPECT_EQ(ckpt({"diff", "ex.safetensors", "later.safetensors"}).exit_code, 1);
}

TEST_F(CliTest, ExampleAdaptsToTensorsOnlyFormats) {
  const ToolRun run = ckpt({"example", "ex.npz"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Tree state = load(path("ex.npz"));
  EXPECT_EQ(state.at("model.head.weight").tensor().dtype(), DType::kFloat32);
  EXPECT_EQ(state.find_path("step"), nullptr);

  const ToolRun bad = ckpt({"example", "ex.bin", "--format", "nope"});
  EXPECT_EQ(bad.exit_code, 2);
  expect_one_error_line(bad, "ex.bin");
}

}  // namespace
}  // namespace ckpt
