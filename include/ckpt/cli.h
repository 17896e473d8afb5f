#pragma once
// The `ckpt` command line as one function, for programs that embed the tool
// (the Python package's `python3 -m ckpt`). It lives in the ckpt_cli library
// (tools/ckpt/), the top layer beside the Python package; docs/cli.md
// describes the commands.

namespace ckpt {

// Parses `argv` (argv[0] is the program's name), runs the subcommand it
// names, prints its result on stdout and any failure as one line on stderr,
// and returns the exit code: 0 success (diff: identical), 1 a corrupt
// checkpoint (or, for diff, differences), 2 a usage error, missing file,
// unsupported format or I/O error. Never throws; ignores SIGPIPE.
int cli_main(int argc, char** argv);

}  // namespace ckpt
