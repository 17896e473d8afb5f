// ckpt convert SRC DST [--to FORMAT] [--no-extras] [--drop-unsupported]
//              [--max-shard-size SIZE] [--rename OLD=NEW] [--rename-regex PATTERN=REPLACEMENT]
//              [--rename-table FILE] [--drop GLOB] [--add-prefix P] [--strip-prefix P]
//              [--fold-weight-norm | --unfold-weight-norm DIM] [--weight-norm-names old|new|returnn_common]:
// rewrites a checkpoint in another format: ckpt::convert (ckpt/convert.h),
// which says what goes along and what is refused. Here: the options as
// ConvertOptions, and the summary. The naming options (ckpt::Transforms,
// each repeatable) apply in the order they appear on the command line.
// --max-shard-size splits a target written in data shards (the shards
// capability: tf; safetensors, which then writes Hugging Face's sharded
// directory, hf_sharded) into shards of at most SIZE bytes each. The weight-norm
// options rewrite the tree after the naming options (ckpt/weight_norm.h):
// fold g, v into w; split w into g, v (in the naming --weight-norm-names
// gives, "new" by default); or, alone, rename g and v to that naming.

#include <simdjson.h>

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/convert.h"
#include "ckpt/transform.h"
#include "ckpt/weight_norm.h"
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
  uint64_t max_shard_size = 0;  // bytes; 0: not given
  CLI::Option* max_shard_size_option = nullptr;
  // The naming options: each occurrence's value lands in its option's
  // results(); the subcommand's parse_order() says in which order they came.
  CLI::App* command = nullptr;
  std::vector<std::string> rename, rename_regex, rename_table, drop, add_prefix, strip_prefix;
  struct {
    CLI::Option *rename, *rename_regex, *rename_table, *drop, *add_prefix, *strip_prefix;
  } options{};
  // The weight-norm options.
  bool fold_weight_norm = false;
  std::string unfold_weight_norm;  // DIM: an integer, or "none"
  CLI::Option* unfold_weight_norm_option = nullptr;
  std::string weight_norm_names;
  CLI::Option* weight_norm_names_option = nullptr;
};

// --unfold-weight-norm's DIM: an integer as torch takes it (-1 and "none":
// one norm over the whole weight). Throws Error{kInvalidArgument} otherwise.
int64_t unfold_dim(const std::string& value) {
  if (value == "none" || value == "None") return kWeightNormAllDims;
  size_t used = 0;
  int64_t dim = 0;
  try {
    dim = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "--unfold-weight-norm expects DIM, an integer or 'none', got '" + value + "'");
  }
  return dim;
}

// The rewrite the weight-norm options ask for (null: none), and what its
// summary says; `count` receives the number of parameters rewritten.
std::function<Tree(const Tree&)> weight_norm_rewrite(const ConvertArguments& arguments,
                                                     std::shared_ptr<size_t> count) {
  const bool unfold = arguments.unfold_weight_norm_option->count() > 0;
  const bool rename = arguments.weight_norm_names_option->count() > 0;
  if (arguments.fold_weight_norm && unfold) {
    throw Error(ErrorCode::kInvalidArgument, "--fold-weight-norm and --unfold-weight-norm exclude each other");
  }
  // Parsed before SRC is read, so that a bad value is a usage error.
  const WeightNormNames names =
      rename ? weight_norm_names_from_id(arguments.weight_norm_names) : WeightNormNames::kTorchNew;
  if (arguments.fold_weight_norm) {
    return [count](const Tree& tree) {
      *count = find_weight_norms(tree).size();
      return fold_weight_norm(tree);
    };
  }
  if (unfold) {
    const int64_t dim = unfold_dim(arguments.unfold_weight_norm);
    return [count, dim, names](const Tree& tree) {
      const UnfoldWeightNormOptions options{.names = names};
      *count = weight_norm_targets(tree, options).size();
      return unfold_weight_norm(tree, dim, options);
    };
  }
  if (rename) {
    return [count, names](const Tree& tree) {
      size_t renamed = 0;
      for (const WeightNormParameter& parameter : find_weight_norms(tree)) renamed += parameter.names != names;
      *count = renamed;
      return convert_weight_norm_names(tree, std::nullopt, names);
    };
  }
  return nullptr;
}

// A --rename-table FILE: a JSON object of old name -> new name.
std::map<std::string, std::string> read_rename_table(const std::string& path) {
  simdjson::padded_string text;
  if (simdjson::padded_string::load(path).get(text)) {
    throw Error(std::filesystem::exists(path) ? ErrorCode::kIo : ErrorCode::kNotFound,
                "cannot read the rename table")
        .with_path(path);
  }
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object object;
  if (const auto error = parser.parse(text).get(root)) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("rename table is not valid JSON: ") + simdjson::error_message(error))
        .with_path(path);
  }
  if (root.get_object().get(object)) {
    throw Error(ErrorCode::kInvalidArgument, "rename table must be a JSON object of old name to new name")
        .with_path(path);
  }
  std::map<std::string, std::string> table;
  for (const simdjson::dom::key_value_pair field : object) {
    std::string_view name;
    if (field.value.get_string().get(name)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "rename table: the new name of '" + std::string(field.key) + "' is not a string")
          .with_path(path);
    }
    table[std::string(field.key)] = std::string(name);
  }
  return table;
}

// "OLD=NEW" split at the first '=' (--rename) or the last (--rename-regex,
// whose pattern may hold '=' but whose replacement then may not).
std::pair<std::string, std::string> split_pair(const std::string& flag, const std::string& value, bool at_last,
                                               const std::string& left, const std::string& right,
                                               const std::string& hint = "") {
  const size_t equals = at_last ? value.rfind('=') : value.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw Error(ErrorCode::kInvalidArgument, flag + " expects " + left + "=" + right + " with a non-empty " + left +
                                                 ", got '" + value + "'" + hint);
  }
  return {value.substr(0, equals), value.substr(equals + 1)};
}

// The naming options as Transforms, in command-line order. Throws
// Error{kInvalidArgument} for a malformed value (before SRC is read).
Transforms naming_transforms(const ConvertArguments& arguments) {
  Transforms transforms;
  std::map<const CLI::Option*, size_t> taken;  // values used so far, per option
  const auto& options = arguments.options;
  for (const CLI::Option* option : arguments.command->parse_order()) {
    if (option != options.rename && option != options.rename_regex && option != options.rename_table &&
        option != options.drop && option != options.add_prefix && option != options.strip_prefix) {
      continue;
    }
    const std::string& value = option->results().at(taken[option]++);
    if (option == options.rename) {
      auto [from, to] = split_pair("--rename", value, false, "OLD", "NEW", " (--add-prefix adds a prefix)");
      transforms.rename_prefix(std::move(from), std::move(to));
    } else if (option == options.rename_regex) {
      auto [pattern, replacement] = split_pair("--rename-regex", value, true, "PATTERN", "REPLACEMENT");
      transforms.rename_regex(pattern, std::move(replacement));
    } else if (option == options.rename_table) {
      transforms.rename(read_rename_table(value));
    } else if (option == options.drop) {
      transforms.drop(value);
    } else {
      if (value.empty()) throw Error(ErrorCode::kInvalidArgument, option->get_name() + " needs a non-empty prefix");
      if (option == options.add_prefix) {
        transforms.add_prefix(value);
      } else {
        transforms.strip_prefix(value);
      }
    }
  }
  return transforms;
}

int run_convert(const ConvertArguments& arguments) {
  if (arguments.max_shard_size_option != nullptr && arguments.max_shard_size_option->count() > 0 &&
      arguments.max_shard_size == 0) {
    throw Error(ErrorCode::kInvalidArgument, "--max-shard-size must be at least 1 byte");
  }
  ConvertOptions options;
  options.save.format = arguments.to;
  options.save.extras = !arguments.no_extras;
  options.save.max_shard_bytes = arguments.max_shard_size;
  options.rename = naming_transforms(arguments);
  options.drop_unsupported = arguments.drop_unsupported;
  const auto rewritten = std::make_shared<size_t>(0);
  options.rewrite = weight_norm_rewrite(arguments, rewritten);
  const ConvertReport report = convert(arguments.source, arguments.destination, options);

  std::cout << "converted " << arguments.source << " (" << report.source_format << ") -> "
            << arguments.destination << " (" << report.target_format
            << "): " << count_text(report.tensors, "tensor") << ", " << size_text(report.nbytes);
  if (!options.rename.empty()) {
    auto leaves = [](size_t count) { return std::to_string(count) + (count == 1 ? " leaf" : " leaves"); };
    std::cout << "; renamed " << leaves(report.renamed) << ", dropped " << leaves(report.removed);
  }
  if (options.rewrite) {
    const char* done = arguments.fold_weight_norm ? "folded"
                       : arguments.unfold_weight_norm_option->count() > 0 ? "unfolded"
                                                                           : "renamed";
    std::cout << "; " << done << " weight norm of " << count_text(*rewritten, "parameter");
  }
  std::cout << '\n';
  if (!report.dropped.empty()) {
    std::cout << "dropped " << count_text(report.dropped.size(), "non-tensor value") << " ("
              << report.target_format << " holds tensors only):";
    for (const std::string& name : report.dropped) std::cout << ' ' << name;
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
  arguments->max_shard_size_option =
      command->add_option("--max-shard-size", arguments->max_shard_size,
                          "Split a target written in data shards (tf; safetensors and hf_sharded: Hugging Face's "
                          "model-0000K-of-0000N.safetensors + model.safetensors.index.json in the directory DST) "
                          "into shards of at most SIZE bytes "
                          "(a larger tensor gets a shard of its own): a number of bytes, or with a suffix "
                          "K, M, G, T (powers of 1024): 100M, 2G")
          ->type_name("SIZE")
          ->check(CLI::Validator(
              [](std::string& value) -> std::string {
                // strtoull, under AsSizeValue, would wrap "-5" around.
                const size_t first = value.find_first_not_of(" \t");
                return first != std::string::npos && value[first] == '-' ? "SIZE must not be negative" : "";
              },
              "", "non-negative"))
          ->transform(CLI::AsSizeValue(false).description(""));
  // Naming options: one value per occurrence, repeatable, applied in order.
  auto naming = [&](const char* name, const char* value, std::vector<std::string>& values, const char* help) {
    return command->add_option(name, values, help)->type_name(value)->allow_extra_args(false);
  };
  arguments->command = command;
  arguments->options.rename = naming("--rename", "OLD=NEW", arguments->rename,
                                     "Rename the leaves named OLD or under OLD (split at the first '=')");
  arguments->options.rename_regex =
      naming("--rename-regex", "PATTERN=REPLACEMENT", arguments->rename_regex,
             "Replace every match of an ECMAScript regex in every name; $1 or \\1 for a group "
             "(split at the last '=')");
  arguments->options.rename_table = naming("--rename-table", "FILE", arguments->rename_table,
                                           "Rename by a JSON object of old name -> new name (exact names)");
  arguments->options.drop =
      naming("--drop", "GLOB", arguments->drop, "Leave out the leaves whose name matches (fnmatch: * ? [...])");
  arguments->options.add_prefix = naming("--add-prefix", "P", arguments->add_prefix, "Put 'P.' before every name");
  arguments->options.strip_prefix =
      naming("--strip-prefix", "P", arguments->strip_prefix, "Remove 'P.' where a name starts with it");
  command->add_flag("--fold-weight-norm", arguments->fold_weight_norm,
                    "Fold every weight-normed parameter's g and v into its weight w = g * v / ||v|| "
                    "(torch's old and new names, returnn_common's)");
  arguments->unfold_weight_norm_option =
      command->add_option("--unfold-weight-norm", arguments->unfold_weight_norm,
                          "Split every floating-point '*.weight' of ndim >= 2 into g = ||w|| over all dims but "
                          "DIM and v = w (DIM as torch takes it: -1 or 'none' is one norm over all of w)")
          ->type_name("DIM")
          ->allow_extra_args(false);
  arguments->weight_norm_names_option =
      command->add_option("--weight-norm-names", arguments->weight_norm_names,
                          "The naming of weight norm's g and v to write: old (weight_g/weight_v), new "
                          "(parametrizations.weight.original0/1; the default), returnn_common "
                          "(weight_normalized.g/v); alone, renames them")
          ->type_name("old|new|returnn_common");
  return {command, [arguments] { return run_convert(*arguments); },
          "ckpt convert SRC DST [--to FORMAT] [--no-extras] [--drop-unsupported] [--max-shard-size SIZE]\n"
          "         [--rename OLD=NEW] [--rename-regex PATTERN=REPLACEMENT] [--rename-table FILE]\n"
          "         [--drop GLOB] [--add-prefix P] [--strip-prefix P]\n"
          "         [--fold-weight-norm | --unfold-weight-norm DIM] [--weight-norm-names old|new|returnn_common]"};
}

}  // namespace ckpt::tool
