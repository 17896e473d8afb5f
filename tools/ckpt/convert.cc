// ckpt convert SRC DST [--to FORMAT] [--no-extras]: rewrites a checkpoint in
// another format. Tensors are copied bit-exact (a dtype the target lacks is
// an error, never a cast). The tree goes along where the target can hold it
// (ckpt::convert); a tensors-only target (npz, or --no-extras: a plain file)
// gets the tensors under their dotted names, and the summary line counts the
// values left behind.

#include <iostream>
#include <memory>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/registry.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct ConvertArguments {
  std::string source;
  std::string destination;
  std::string to;
  bool no_extras = false;
};

std::string known_format_ids() {
  std::string ids;
  for (const Format* format : formats()) {
    if (!format->capabilities().write) continue;
    if (!ids.empty()) ids += ", ";
    ids += format->id();
  }
  return ids;
}

// The target format: --to, else the one DST's extension names. Unlike
// ckpt::save, an extension that names no format is a usage error rather
// than a silent safetensors file.
const Format& target_format(const ConvertArguments& arguments) {
  if (!arguments.to.empty()) return format_by_id(arguments.to);
  if (const Format* format = format_for_extension(arguments.destination)) return *format;
  throw Error(ErrorCode::kInvalidArgument,
              "cannot tell the target format from the file name; use --to (one of: " +
                  known_format_ids() + ")")
      .with_path(arguments.destination);
}

// The tensor leaves of `tree` as one flat map, name → tensor, for formats
// that hold tensors only.
Tree tensors_only(const Tree& tree) {
  Tree flat = Tree::map();
  for (const Tree::Leaf& leaf : tree.tensor_leaves()) flat.set(leaf.name, *leaf.value);
  return flat;
}

int run_convert(const ConvertArguments& arguments) {
  const Format& format =
      naming_file(arguments.destination, [&]() -> const Format& { return target_format(arguments); });
  if (!format.capabilities().write) {
    throw Error(ErrorCode::kUnsupported,
                "ckpt cannot write format '" + std::string(format.id()) + "'")
        .with_path(arguments.destination);
  }
  SaveOptions options;
  options.format = std::string(format.id());
  options.extras = !arguments.no_extras;

  // Read errors name SRC, write errors DST. The write is atomic, so a
  // failure leaves any earlier DST untouched.
  const Contents contents = naming_file(arguments.source, [&] { return open(arguments.source); });
  size_t dropped = 0;
  if (format.capabilities().nested_tree && options.extras) {
    convert(arguments.source, arguments.destination, options);
  } else {
    // A tensors-only target (npz, or any format without ckpt's extras)
    // keeps every tensor under its dotted name and cannot keep the rest;
    // the summary says what was left behind.
    for (const Tree::Leaf& leaf : contents.tree.leaves()) dropped += !leaf.value->is_tensor();
    options.metadata = contents.metadata;
    const Tree flat = tensors_only(contents.tree);
    naming_file(arguments.destination, [&] { save(arguments.destination, flat, options); });
  }

  uint64_t total = 0;
  for (const EntryInfo& entry : contents.entries) total += entry.nbytes;
  std::cout << "converted " << arguments.source << " (" << contents.format << ") -> "
            << arguments.destination << " (" << format.id()
            << "): " << count_text(contents.entries.size(), "tensor") << ", " << size_text(total);
  if (dropped > 0) {
    std::cout << "; not kept: " << count_text(dropped, "non-tensor value") << " (" << format.id()
              << " holds tensors only)";
  }
  std::cout << '\n';
  return kExitOk;
}

}  // namespace

Command add_convert_command(CLI::App& app) {
  auto arguments = std::make_shared<ConvertArguments>();
  CLI::App* command = app.add_subcommand(
      "convert", "Write SRC's contents to DST in another format (tensors bit-exact)");
  command->add_option("src", arguments->source, "The checkpoint to read")->required();
  command->add_option("dst", arguments->destination, "The file to write (replaced atomically)")
      ->required();
  command->add_option("--to", arguments->to,
                      "Target format id (see 'ckpt formats'); default: from DST's extension");
  command->add_flag("--no-extras", arguments->no_extras,
                    "Write a plain file without ckpt's extras (tree, checksums, version), "
                    "as the format's reference writer would");
  return {command, [arguments] { return run_convert(*arguments); },
          "ckpt convert SRC DST [--to FORMAT] [--no-extras]"};
}

}  // namespace ckpt::tool
