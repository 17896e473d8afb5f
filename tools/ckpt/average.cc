// ckpt average OUT CKPT... | OUT RUN_DIR (--last N | --best K --metric M [--mode min|max]) [--to FORMAT]:
// the per-tensor mean of several checkpoints (ckpt::average_checkpoints,
// ckpt/average.h), saved to OUT with the merged checkpoints recorded in its
// metadata where OUT's format keeps metadata. A progress line goes to
// stderr while it works when stderr is a terminal.

#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/average.h"
#include "ckpt/checkpoint.h"
#include "ckpt/run_directory.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct AverageArguments {
  std::string output;
  std::vector<std::string> sources;
  size_t last = 0;
  size_t best = 0;
  std::string metric;
  std::string mode = "min";
  std::string to;
};

std::string input_text(const AverageInput& input) {
  std::string text = input.path.string();
  if (input.step || input.epoch) {
    text += " (";
    if (input.step) text += "step " + std::to_string(*input.step);
    if (input.step && input.epoch) text += ", ";
    if (input.epoch) text += "epoch " + std::to_string(*input.epoch);
    text += ")";
  }
  return text;
}

int run_average(const AverageArguments& arguments) {
  std::vector<AverageInput> inputs;
  if (arguments.last > 0 || arguments.best > 0) {
    if (arguments.sources.size() != 1) {
      throw Error(ErrorCode::kInvalidArgument, "--last and --best take one RUN_DIR, not a list of checkpoints");
    }
    if (arguments.mode != "min" && arguments.mode != "max") {
      throw Error(ErrorCode::kInvalidArgument, "--mode must be min or max, not '" + arguments.mode + "'");
    }
    const RunListing listing = list_run_directory(arguments.sources.front());
    inputs = select_for_average(listing, {.last = arguments.last,
                                          .best = arguments.best,
                                          .metric = arguments.metric,
                                          .maximize = arguments.mode == "max"});
  } else {
    if (!arguments.metric.empty()) throw Error(ErrorCode::kInvalidArgument, "--metric goes with --best K");
    for (const std::string& source : arguments.sources) inputs.push_back({.path = source});
  }

  AverageOptions options;
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  if (terminal) {
    options.progress = [](size_t done, size_t total) {
      if (done % 16 == 0 || done == total) std::cerr << "\raveraging: tensor " << done << " of " << total << std::flush;
    };
  }
  const AverageResult result = average_checkpoints(inputs, options);
  if (terminal) std::cerr << '\n';

  SaveOptions save_options{.format = arguments.to};
  const Format& format = save_format(arguments.output, save_options);
  const bool records = format.capabilities().metadata;
  if (records) save_options.metadata = result.metadata;
  save(arguments.output, result.tree, save_options);

  size_t tensors = 0;
  result.tree.for_each_tensor_leaf([&](std::string_view, const Tree&) { ++tensors; });
  std::cout << "averaged " << count_text(inputs.size(), "checkpoint") << " -> " << arguments.output << " ("
            << format.id() << "): " << count_text(tensors, "tensor") << '\n';
  for (const AverageInput& input : inputs) std::cout << "  " << input_text(input) << '\n';
  if (!records) {
    std::cout << "(format '" << format.id() << "' keeps no metadata: the merged checkpoints are not recorded in "
              << arguments.output << ")\n";
  }
  return kExitOk;
}

}  // namespace

Command add_average_command(CLI::App& app) {
  auto arguments = std::make_shared<AverageArguments>();
  CLI::App* command = app.add_subcommand(
      "average", "Write the per-tensor mean of several checkpoints (float tensors averaged in float64; "
                 "integer and non-tensor values from the newest, the last given)");
  command->add_option("out", arguments->output, "The checkpoint to write (replaced atomically)")->required();
  command->add_option("sources", arguments->sources,
                      "The checkpoints, oldest first; or one run directory with --last or --best")
      ->required();
  command->add_option("--last", arguments->last, "Average the run directory's newest N checkpoints")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  command->add_option("--best", arguments->best, "Average the run directory's best K checkpoints by --metric")
      ->type_name("K")
      ->check(CLI::PositiveNumber);
  command->add_option("--metric", arguments->metric, "The metric that ranks checkpoints for --best");
  command->add_option("--mode", arguments->mode, "min (lower is better, the default) or max");
  command->add_option("--to", arguments->to, "Target format id (see 'ckpt formats'); default: from OUT's extension");
  return {command, [arguments] { return run_average(*arguments); },
          "ckpt average OUT CKPT... | ckpt average OUT RUN_DIR (--last N | --best K --metric M [--mode min|max])\n"
          "         [--to FORMAT]"};
}

}  // namespace ckpt::tool
