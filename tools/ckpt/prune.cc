// ckpt prune RUN_DIR [--keep-last N] [--keep-best K --metric NAME --mode min|max]
//                    [--keep-every-steps S] [--dry-run] [--foreign]
// One retention pass over a run directory (ckpt::prune_run_directory): the
// policies given, else those the run's manager recorded. Prints each path it
// removes (with --dry-run: would remove), one per line.

#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/manager.h"
#include "commands.h"

namespace ckpt::tool {
namespace {

struct PruneArguments {
  std::string run_dir;
  std::optional<int64_t> keep_last;
  std::optional<int64_t> keep_best;
  std::string metric;
  std::string mode = "min";
  std::optional<int64_t> keep_every_steps;
  bool dry_run = false;
  bool foreign = false;
};

int run_prune(const PruneArguments& arguments) {
  PruneOptions options{.policies = {}, .dry_run = arguments.dry_run, .foreign = arguments.foreign};
  if (arguments.keep_last) options.policies.push_back(KeepLast{.n = *arguments.keep_last});
  if (arguments.keep_best) {
    if (arguments.metric.empty()) throw Error(ErrorCode::kInvalidArgument, "--keep-best needs --metric NAME");
    options.policies.push_back(KeepBest{.n = *arguments.keep_best,
                                        .metric = arguments.metric,
                                        .mode = metric_mode_from_name(arguments.mode),
                                        .keep_missing_metric = true});
  } else if (!arguments.metric.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "--metric is only for --keep-best");
  }
  if (arguments.keep_every_steps) options.policies.push_back(KeepEverySteps{.steps = *arguments.keep_every_steps});
  const PruneReport report = prune_run_directory(arguments.run_dir, options);
  for (const std::filesystem::path& path : report.removed) {
    std::cout << (arguments.dry_run ? "would remove " : "removed ") << path.string() << "\n";
  }
  return kExitOk;
}

}  // namespace

Command add_prune_command(CLI::App& app) {
  auto arguments = std::make_shared<PruneArguments>();
  CLI::App* command = app.add_subcommand(
      "prune", "Remove the checkpoints of a run directory that no retention policy keeps");
  command->add_option("run_dir", arguments->run_dir, "The run directory")->required();
  command->add_option("--keep-last", arguments->keep_last, "Keep the N newest checkpoints");
  command->add_option("--keep-best", arguments->keep_best, "Keep the K best checkpoints by --metric");
  command->add_option("--metric", arguments->metric, "The metric --keep-best ranks by");
  command->add_option("--mode", arguments->mode, "min (lower is better, the default) or max")
      ->check(CLI::IsMember({"min", "max"}));
  command->add_option("--keep-every-steps", arguments->keep_every_steps, "Keep every checkpoint whose step is a multiple of S");
  command->add_flag("--dry-run", arguments->dry_run, "Print what would be removed, remove nothing");
  command->add_flag("--foreign", arguments->foreign, "Allow pruning another tool's run directory (RETURNN, TF, ...)");
  return {command, [arguments] { return run_prune(*arguments); },
          "ckpt prune RUN_DIR [--keep-last N] [--keep-best K --metric NAME --mode min|max] "
          "[--keep-every-steps S] [--dry-run] [--foreign]"};
}

}  // namespace ckpt::tool
