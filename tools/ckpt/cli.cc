// ckpt: the command-line tool's entry (cli_main, shared by the `ckpt`
// executable and `python3 -m ckpt`). Builds the CLI11 app from the subcommands in
// commands.h, runs the one that was named, and maps every failure to an exit
// code and one line on stderr (docs/cli.md):
//   ckpt::Error kCorrupt, kMismatch                        → 1
//   ckpt::Error kNotFound, kInvalidArgument, kUnsupported, kIo → 2
//   usage errors (CLI11), std::bad_alloc, any std::exception → 2
// No exception leaves cli_main() and SIGPIPE is ignored, so the tool never ends
// by a signal of its own making.

#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "ckpt/error.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

// The project version (CMakeLists.txt: project(ckpt VERSION ...)).
#ifdef CKPT_VERSION
constexpr const char* kVersion = CKPT_VERSION;
#else
constexpr const char* kVersion = "0.1.0";
#endif

constexpr const char* kUsage =
    "usage: ckpt [--help] [--version] <inspect|convert|verify|diff|formats|example|ls|prune|average|fetch|cache> ...";

int exit_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kCorrupt:
    case ErrorCode::kMismatch: return kExitCorrupt;
    case ErrorCode::kNotFound:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupported:
    case ErrorCode::kIo:
    case ErrorCode::kRemote: return kExitUsage;
  }
  return kExitUsage;
}

void print_error(const std::string& message) { std::cerr << "ckpt: " << one_line(message) << '\n'; }

// A usage error: the problem, then the synopsis of the subcommand it
// concerns (or of the tool), on stderr.
int usage_error(const CLI::ParseError& error, const std::vector<Command>& commands,
                const CLI::App& app) {
  std::string usage = kUsage;
  for (const CLI::App* selected : app.get_subcommands()) {
    for (const Command& command : commands) {
      if (command.app == selected) usage = "usage: " + command.usage;
    }
  }
  print_error(error.what());
  std::cerr << usage << "\n      (run 'ckpt --help' or 'ckpt <command> --help' for more)\n";
  return kExitUsage;
}

int run(int argc, char** argv) {
  CLI::App app("ckpt: inspect, convert, verify and compare neural-network checkpoints", "ckpt");
  app.set_version_flag("--version", std::string("ckpt ") + kVersion);
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok (diff: identical), 1 corrupt checkpoint (diff: they differ), "
      "2 usage error, missing file or unsupported format.");

  // Downloads of URLs draw a progress bar on stderr when it is a terminal
  // (ckpt/url.h); these force it off or on, for every command.
  bool quiet = false;
  bool progress = false;
  app.add_flag("-q,--quiet", quiet, "No progress bar on stderr for downloads");
  app.add_flag("--progress", progress, "A progress bar on stderr for downloads even when it is not a terminal");
  app.fallthrough();  // (subcommands made after this inherit it: the flags may follow the command)

  std::vector<Command> commands = {
      add_inspect_command(app), add_convert_command(app), add_verify_command(app),
      add_diff_command(app),    add_formats_command(app), add_example_command(app),
      add_ls_command(app),      add_average_command(app),
      add_prune_command(app),   add_fetch_command(app),   add_cache_command(app),
  };

  // CLI11 reports an unknown first word as "a subcommand is required"; say
  // what is wrong instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    bool known = false;
    for (const Command& command : commands) known = known || command.app->check_name(word);
    if (!known) {
      print_error("unknown command '" + word + "'");
      std::cerr << kUsage << '\n';
      return kExitUsage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {  // --help, --version
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    return usage_error(error, commands, app);
  }

  if (quiet || progress) ::setenv("CKPT_PROGRESS", quiet ? "0" : "1", 1);
  for (const Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  print_error("no command given");
  std::cerr << kUsage << '\n';
  return kExitUsage;
}

}  // namespace
}  // namespace ckpt::tool

namespace ckpt {

using namespace ckpt::tool;

int cli_main(int argc, char** argv) {
  // A closed pipe (`ckpt inspect x | head`) turns into a failed write, not a signal.
  std::signal(SIGPIPE, SIG_IGN);
  int code;
  try {
    code = run(argc, argv);
  } catch (const ckpt::Error& error) {
    print_error(error.what());
    code = exit_code(error.code());
  } catch (const std::bad_alloc&) {
    print_error("out of memory");
    code = kExitUsage;
  } catch (const std::exception& error) {
    print_error(error.what());
    code = kExitUsage;
  } catch (...) {
    print_error("unknown internal error");
    code = kExitUsage;
  }
  std::cout.flush();
  if (!std::cout) {
    // The output went nowhere (a closed pipe, a full disk): not a success.
    print_error("cannot write to standard output");
    if (code == kExitOk) code = kExitUsage;
  }
  return code;
}

}  // namespace ckpt
