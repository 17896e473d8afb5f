#pragma once
// The subcommands of the `ckpt` tool, one file each. cli.cc (cli_main,
// ckpt/cli.h) builds the CLI11 app from these and owns the single mapping
// from errors to exit codes:
//   0  success (diff: the checkpoints are identical)
//   1  a checkpoint is corrupt (verify, and any read), or diff found differences
//   2  usage error, missing file, unsupported format, I/O error
// A subcommand reports failure by throwing (ckpt::Error, whose message names
// the file); it returns 0 or 1 only for a result (diff).

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "ckpt/cli.h"
#include "ckpt/error.h"

namespace ckpt::tool {

// Exit codes, as documented in docs/cli.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitDiffers = 1;  // also: corrupt
inline constexpr int kExitCorrupt = 1;
inline constexpr int kExitUsage = 2;

// A registered subcommand: `run` is called after a successful parse and
// returns the exit code; `usage` is the one-line synopsis printed with usage
// errors ("ckpt inspect PATH [--json]").
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
  std::string usage;
};

// Each adds its subcommand (options bound to state owned by the returned
// `run`) to `app`.
Command add_inspect_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_verify_command(CLI::App& app);
Command add_diff_command(CLI::App& app);
Command add_formats_command(CLI::App& app);
Command add_example_command(CLI::App& app);
Command add_ls_command(CLI::App& app);
Command add_average_command(CLI::App& app);
Command add_prune_command(CLI::App& app);
Command add_fetch_command(CLI::App& app);
Command add_cache_command(CLI::App& app);

}  // namespace ckpt::tool
