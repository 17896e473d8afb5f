#pragma once
// What the crash-consistency, disk-full and concurrency harnesses share:
// running a child process (optionally killing it), and the checks that a
// target holds one whole committed checkpoint and nothing half-written is
// visible.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "crash/crash_states.h"
#include "io/atomic_directory.h"

namespace ckpt::testing {

// How a child process ended.
struct ChildEnd {
  bool exited = false;  // exited by itself (else killed by a signal)
  int status = 0;       // exit status, or the signal
};

// Runs `argv` (argv[0] a path) with stdout and stderr to /dev/null. With
// `kill_after`, sends SIGKILL that long after the start unless it ended
// first. Waits for the end.
inline ChildEnd run_child(const std::vector<std::string>& argv,
                          std::optional<std::chrono::microseconds> kill_after = std::nullopt) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    // In the sanitizer build: LeakSanitizer cannot run under strace's ptrace
    // (it exits with an error), and a writer killed by design leaks anyway.
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  if (kill_after) {
    const auto deadline = std::chrono::steady_clock::now() + *kill_after;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid) return {WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)};
      const timespec pause{0, 200'000};
      ::nanosleep(&pause, nullptr);
    }
    ::kill(pid, SIGKILL);
  }
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)};
}

// The names a committed checkpoint of `target` has in its directory: the
// file or directory itself; a TF bundle's index and its one data shard.
inline std::vector<std::string> committed_names(const CrashTarget& target) {
  if (target.format == "tf") return {target.name + ".data-00000-of-00001", target.name + ".index"};
  return {target.name};
}

// The entries of `directory` that are not temporaries, sorted.
inline std::vector<std::string> visible_names(const std::filesystem::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (!detail::AtomicDirectory::is_temporary(entry.path())) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every temporary under `directory`, at any depth (inside a committed Orbax
// directory too).
inline std::vector<std::string> temporaries_under(const std::filesystem::path& directory) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory)) {
    if (detail::AtomicDirectory::is_temporary(entry.path())) found.push_back(entry.path().string());
  }
  return found;
}

// The environment variable `name` as a number, or `fallback`.
inline int env_number(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

}  // namespace ckpt::testing
