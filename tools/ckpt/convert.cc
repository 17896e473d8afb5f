// ckpt convert SRC DST [--to FORMAT] [--no-extras] [--drop-unsupported]:
// rewrites a checkpoint in another format. Tensors are copied bit-exact (a
// dtype the target lacks is an error, never a cast). The tree goes along
// where the target can hold it; a tensors-only target (npz, or --no-extras: a
// plain file) gets the tensors under their dotted names. Non-tensor values
// that the target cannot hold are never lost silently: the conversion is
// refused unless --drop-unsupported asks to leave them behind, and then the
// summary names them.

#include <iostream>
#include <memory>
#include <string>
#include <vector>

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
  bool drop_unsupported = false;
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
  // Metadata goes along where the target keeps it (npz and npy do not).
  if (format.capabilities().metadata) options.metadata = contents.metadata;
  std::vector<std::string> dropped;
  if (format.capabilities().nested_tree && options.extras) {
    naming_file(arguments.destination, [&] { save(arguments.destination, contents.tree, options); });
  } else {
    // A tensors-only target keeps every tensor under its dotted name and
    // cannot keep the rest.
    for (const Tree::Leaf& leaf : contents.tree.leaves()) {
      if (!leaf.value->is_tensor()) dropped.push_back(leaf.name);
    }
    if (!dropped.empty() && !arguments.drop_unsupported) {
      throw Error(ErrorCode::kUnsupported,
                  std::string(format.id()) + (options.extras ? "" : " without extras") + " holds tensors only; " +
                      count_text(dropped.size(), "non-tensor value") + " (first: '" + dropped.front() +
                      "') would be lost; pass --drop-unsupported to write the tensors alone")
          .with_path(arguments.destination);
    }
    const Tree flat = tensors_only(contents.tree);
    naming_file(arguments.destination, [&] { save(arguments.destination, flat, options); });
  }

  uint64_t total = 0;
  for (const EntryInfo& entry : contents.entries) total += entry.nbytes;
  std::cout << "converted " << arguments.source << " (" << contents.format << ") -> "
            << arguments.destination << " (" << format.id()
            << "): " << count_text(contents.entries.size(), "tensor") << ", " << size_text(total);
  std::cout << '\n';
  if (!dropped.empty()) {
    std::cout << "dropped " << count_text(dropped.size(), "non-tensor value") << " (" << format.id()
              << " holds tensors only):";
    for (const std::string& name : dropped) std::cout << ' ' << name;
    std::cout << '\n';
  }
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
  command->add_flag("--drop-unsupported", arguments->drop_unsupported,
                    "Leave behind (and list) the non-tensor values that the target cannot hold, "
                    "instead of refusing the conversion");
  return {command, [arguments] { return run_convert(*arguments); },
          "ckpt convert SRC DST [--to FORMAT] [--no-extras] [--drop-unsupported]"};
}

}  // namespace ckpt::tool
