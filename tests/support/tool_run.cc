// run_tool (tool_run.h): posix_spawn with redirected stdout and stderr.

#include "support/tool_run.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstring>

#include "support/files.h"

extern char** environ;

namespace ckpt::testing {

ToolRun run_tool(const std::filesystem::path& directory, const std::vector<std::string>& arguments) {
  const std::string out_path = (directory / ".stdout").string();
  const std::string err_path = (directory / ".stderr").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addchdir_np(&actions, directory.c_str());

  std::vector<std::string> storage = {CKPT_TOOL_PATH};
  storage.insert(storage.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& argument : storage) argv.push_back(argument.data());
  argv.push_back(nullptr);

  ToolRun run;
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, CKPT_TOOL_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ADD_FAILURE() << "cannot start " << CKPT_TOOL_PATH << ": " << std::strerror(spawned);
    return run;
  }
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  run.max_rss_kb = usage.ru_maxrss;
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
  run.out = read_file(out_path);
  run.err = read_file(err_path);
  return run;
}

}  // namespace ckpt::testing
