#pragma once
// Running the `ckpt` tool (CKPT_TOOL_PATH) as a subprocess, for the CLI tests.

#include <filesystem>
#include <string>
#include <vector>

namespace ckpt::testing {

struct ToolRun {
  int exit_code = -1;  // -1 if it did not exit normally
  int signal = 0;      // the signal that ended it, if one did
  std::string out;
  std::string err;
  long max_rss_kb = 0;  // the child's peak resident set size (getrusage's ru_maxrss)
};

// Runs the tool with `arguments` in `directory` (stdin /dev/null), stdout and
// stderr captured through files in `directory`. A tool that cannot start is
// a test failure (exit_code stays -1).
ToolRun run_tool(const std::filesystem::path& directory, const std::vector<std::string>& arguments);

}  // namespace ckpt::testing
