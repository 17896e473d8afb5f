// ckpt inspect PATH [--json]: what a checkpoint holds, without reading the
// tensors' bytes (ckpt::open maps the file lazily).

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/diff.h"
#include "commands.h"
#include "core/json_writer.h"
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

void print_json(const std::string& path, const Contents& contents) {
  detail::JsonWriter json;
  json.begin_object();
  json.key("path");
  json.string(path);
  json.key("format");
  json.string(contents.format);
  json.key("format_version");
  json.integer(contents.format_version);
  json.key("checksum");
  if (contents.checksum == ChecksumKind::kNone) {
    json.null();
  } else {
    json.string(checksum_text(contents.checksum));
  }
  json.key("tensors");
  json.begin_array();
  for (const EntryInfo& entry : contents.entries) {
    json.begin_object();
    json.key("name");
    json.string(entry.name);
    json.key("dtype");
    json.string(dtype_name(entry.dtype));
    json.key("shape");
    write_shape_json(json, entry.shape);
    json.key("nbytes");
    json.unsigned_integer(entry.nbytes);
    json.key("offset");
    json.unsigned_integer(entry.offset);
    json.end_object();
  }
  json.end_array();
  json.key("values");
  json.begin_object();
  for (const Tree::Leaf& leaf : contents.tree.leaves()) {
    if (leaf.value->is_tensor()) continue;
    json.key(leaf.name);
    write_leaf_json(json, *leaf.value);
  }
  json.end_object();
  json.key("metadata");
  json.begin_object();
  for (const auto& [key, value] : contents.metadata) {
    json.key(key);
    json.string(value);
  }
  json.end_object();
  json.key("total_nbytes");
  json.unsigned_integer(total_nbytes(contents));
  json.end_object();
  std::cout << json.text() << '\n';
}

void print_table(const std::string& path, const Contents& contents) {
  std::cout << "file:      " << path << '\n';
  std::cout << "format:    " << contents.format;
  if (contents.format_version > 0) std::cout << " (ckpt extras v" << contents.format_version << ")";
  std::cout << '\n';
  std::cout << "checksums: " << checksum_text(contents.checksum);
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
            const Contents contents =
                naming_file(arguments->path, [&] { return open(arguments->path); });
            if (arguments->json) {
              print_json(arguments->path, contents);
            } else {
              print_table(arguments->path, contents);
            }
            return kExitOk;
          },
          "ckpt inspect PATH [--json]"};
}

}  // namespace ckpt::tool
