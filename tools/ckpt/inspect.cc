// ckpt inspect PATH [--json]: what a checkpoint holds, without reading the
// tensors' bytes (ckpt::open maps the file lazily).

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/document.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct InspectArguments {
  std::string path;
  bool json = false;
};

uint64_t total_nbytes(const Contents& contents) {
  uint64_t total = 0;
  for (const EntryInfo& entry : contents.entries) total += entry.nbytes;
  return total;
}

void print_table(const std::string& path, const Contents& contents) {
  std::cout << "file:      " << path << '\n';
  std::cout << "format:    " << contents.format;
  if (contents.format_version > 0) std::cout << " (ckpt extras v" << contents.format_version << ")";
  std::cout << '\n';
  std::cout << "checksums: " << checksum_name(contents.checksum);
  if (contents.checksum != ChecksumKind::kNone) {
    const auto stored = std::count_if(contents.entries.begin(), contents.entries.end(),
                                      [](const EntryInfo& entry) { return !entry.checksum.empty(); });
    std::cout << " (" << stored << " stored; 'ckpt verify' checks them)";
  }
  std::cout << '\n';

  if (!contents.metadata.empty()) {
    std::cout << "\nmetadata (" << contents.metadata.size() << "):\n";
    Table table;
    for (const auto& [key, value] : contents.metadata) table.add({key, "= " + one_line(value)});
    table.print(std::cout);
  }

  std::cout << "\ntensors (" << contents.entries.size() << "):\n";
  if (!contents.entries.empty()) {
    Table table;
    table.add({"name", "dtype", "shape", "size"});
    for (const EntryInfo& entry : contents.entries) {
      table.add({entry.name, std::string(dtype_name(entry.dtype)), shape_text(entry.shape),
                 size_text(entry.nbytes)});
    }
    table.print(std::cout);
  }

  Table values;
  size_t value_count = 0;
  for (const Tree::Leaf& leaf : contents.tree.leaves()) {
    if (leaf.value->is_tensor()) continue;
    values.add({leaf.name, std::string(tree_kind_name(leaf.value->kind())),
                one_line(leaf_text(*leaf.value))});
    ++value_count;
  }
  if (value_count > 0) {
    std::cout << "\nvalues (" << value_count << "):\n";
    values.print(std::cout);
  }

  const uint64_t total = total_nbytes(contents);
  std::cout << "\ntotal: " << count_text(contents.entries.size(), "tensor") << ", "
            << size_text(total);
  if (total >= 1024) std::cout << " (" << total << " bytes)";
  std::cout << ", " << count_text(value_count, "value") << '\n';
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto arguments = std::make_shared<InspectArguments>();
  CLI::App* command = app.add_subcommand(
      "inspect", "Show a checkpoint's format, metadata, tensors (name, dtype, shape, size) "
                 "and non-tensor values");
  command->add_option("path", arguments->path, "The checkpoint file")->required();
  command->add_flag("--json", arguments->json, "Print one JSON object instead of a table");
  return {command,
          [arguments] {
            const Contents contents = open(arguments->path);
            if (arguments->json) {
              write_contents_json(std::cout, arguments->path, contents);
              std::cout << '\n';
            } else {
              print_table(arguments->path, contents);
            }
            return kExitOk;
          },
          "ckpt inspect PATH [--json]"};
}

}  // namespace ckpt::tool
