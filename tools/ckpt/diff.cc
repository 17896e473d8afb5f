// ckpt diff A B [--json] [--atol X]: compares two checkpoints leaf by leaf
// (ckpt::diff); exit 0 if they are identical, 1 if they differ.

#include "ckpt/diff.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <set>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/document.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct DiffArguments {
  std::string a;
  std::string b;
  bool json = false;
  double atol = 0.0;
};

std::string number_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

void print_section(std::string_view title, const Table& table, size_t count) {
  if (count == 0) return;
  std::cout << title << " (" << count << "):\n";
  table.print(std::cout);
}

void print_names(std::string_view title, const std::vector<std::string>& names) {
  Table table;
  for (const std::string& name : names) table.add({name});
  print_section(title, table, names.size());
}

void print_text(const DiffArguments& arguments, const DiffReport& report) {
  std::cout << "A: " << arguments.a << "\nB: " << arguments.b << '\n';
  print_names("only in A", report.only_in_a);
  print_names("only in B", report.only_in_b);

  Table kinds;
  for (const KindMismatch& mismatch : report.kind_mismatched) {
    kinds.add({mismatch.name, std::string(tree_kind_name(mismatch.a)), "vs",
               std::string(tree_kind_name(mismatch.b))});
  }
  print_section("kind mismatched (A vs B)", kinds, report.kind_mismatched.size());

  Table dtypes;
  for (const DTypeMismatch& mismatch : report.dtype_mismatched) {
    dtypes.add({mismatch.name, std::string(dtype_name(mismatch.a)), "vs",
                std::string(dtype_name(mismatch.b))});
  }
  print_section("dtype mismatched (A vs B)", dtypes, report.dtype_mismatched.size());

  Table shapes;
  for (const ShapeMismatch& mismatch : report.shape_mismatched) {
    shapes.add({mismatch.name, shape_text(mismatch.a), "vs", shape_text(mismatch.b)});
  }
  print_section("shape mismatched (A vs B)", shapes, report.shape_mismatched.size());

  Table tensors;
  for (const TensorDifference& difference : report.value_differences) {
    tensors.add({difference.name, "max abs diff " + number_text(difference.max_abs_diff),
                 std::to_string(difference.differing_elements) + " of " +
                     std::to_string(difference.numel) + " elements differ"});
  }
  print_section("tensor values differ", tensors, report.value_differences.size());

  Table leaves;
  for (const LeafDifference& difference : report.leaf_differences) {
    leaves.add({difference.name, one_line(leaf_text(difference.a)), "vs",
                one_line(leaf_text(difference.b))});
  }
  print_section("values differ (A vs B)", leaves, report.leaf_differences.size());

  print_names("equal within tolerance, bytes differ", report.within_tolerance);

  if (report.identical()) {
    std::cout << "identical: " << report.compared
              << (report.compared == 1 ? " leaf compared\n" : " leaves compared\n");
  } else {
    // A name can be in more than one list (dtype and shape both differ).
    std::set<std::string_view> names(report.only_in_a.begin(), report.only_in_a.end());
    names.insert(report.only_in_b.begin(), report.only_in_b.end());
    for (const auto& entry : report.kind_mismatched) names.insert(entry.name);
    for (const auto& entry : report.dtype_mismatched) names.insert(entry.name);
    for (const auto& entry : report.shape_mismatched) names.insert(entry.name);
    for (const auto& entry : report.value_differences) names.insert(entry.name);
    for (const auto& entry : report.leaf_differences) names.insert(entry.name);
    const size_t differences = names.size();
    std::cout << "differ: " << differences
              << (differences == 1 ? " leaf differs; " : " leaves differ; ") << report.compared
              << (report.compared == 1 ? " name in both\n" : " names in both\n");
  }
}

int run_diff(const DiffArguments& arguments) {
  if (!(arguments.atol >= 0.0)) {
    throw Error(ErrorCode::kInvalidArgument, "--atol must be a number >= 0");
  }
  const Tree a = load(arguments.a);
  const Tree b = load(arguments.b);
  const DiffReport report = diff(a, b, {.atol = arguments.atol});
  if (arguments.json) {
    std::cout << to_json(diff_document(report, arguments.a, arguments.b, arguments.atol)) << '\n';
  } else {
    print_text(arguments, report);
  }
  return report.identical() ? kExitOk : kExitDiffers;
}

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto arguments = std::make_shared<DiffArguments>();
  CLI::App* command = app.add_subcommand(
      "diff", "Compare two checkpoints by leaf name: exit 0 if identical, 1 if they differ");
  command->add_option("a", arguments->a, "The first checkpoint")->required();
  command->add_option("b", arguments->b, "The second checkpoint")->required();
  command->add_flag("--json", arguments->json, "Print one JSON object instead of text");
  command->add_option("--atol", arguments->atol,
                      "Absolute tolerance: elements with |a - b| <= X are equal (default 0)");
  return {command, [arguments] { return run_diff(*arguments); },
          "ckpt diff A B [--json] [--atol X]"};
}

}  // namespace ckpt::tool
