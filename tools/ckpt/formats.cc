// ckpt formats [--json]: the registered formats and what each can hold.

#include <iostream>
#include <memory>
#include <string>

#include "ckpt/document.h"
#include "ckpt/registry.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct FormatsArguments {
  bool json = false;
};

std::string_view yes_no(bool value) { return value ? "yes" : "no"; }

// One row per format (what it can do), then one row per format of dtypes.
void print_text() {
  Table table;
  table.add({"id", "read", "write", "tree", "checksums", "extensions", "description"});
  Table dtypes;
  for (const Format* format : formats()) {
    const FormatCapabilities capabilities = format->capabilities();
    std::string extensions;
    for (std::string_view extension : format->extensions()) {
      if (!extensions.empty()) extensions += " ";
      extensions += extension;
    }
    std::string tree(yes_no(capabilities.nested_tree));
    if (capabilities.single_tensor) tree = "one tensor";
    table.add({std::string(format->id()), std::string(yes_no(capabilities.read)),
               std::string(yes_no(capabilities.write)), tree,
               std::string(yes_no(capabilities.checksums)),
               extensions.empty() ? "-" : extensions, std::string(format->description())});
    std::string names;
    for (DType dtype : format->dtypes()) {
      if (!names.empty()) names += " ";
      names += dtype_name(dtype);
    }
    dtypes.add({std::string(format->id()), names});
  }
  table.print(std::cout, 0);
  std::cout << "\ndtypes:\n";
  dtypes.print(std::cout);
}

}  // namespace

Command add_formats_command(CLI::App& app) {
  auto arguments = std::make_shared<FormatsArguments>();
  CLI::App* command = app.add_subcommand("formats", "List the checkpoint formats ckpt knows");
  command->add_flag("--json", arguments->json, "Print one JSON object instead of text");
  return {command,
          [arguments] {
            if (arguments->json) {
              std::cout << to_json(formats_document()) << '\n';
            } else {
              print_text();
            }
            return kExitOk;
          },
          "ckpt formats [--json]"};
}

}  // namespace ckpt::tool
