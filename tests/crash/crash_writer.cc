// ckpt_crash_writer FORMAT TARGET FIRST COUNT ELEMENTS [THREADS]
//
// The child process of the crash-consistency harness (crash_consistency_test):
// saves crash_state(FIRST), crash_state(FIRST + 1), ... to TARGET in FORMAT,
// COUNT saves (0: until killed), each with ELEMENTS float32 weights, through
// ckpt::save with its defaults (fsync on) and THREADS write threads (0, the
// default: ckpt's choice; 1: every system call on the main thread, which
// strace's per-thread injection counters need). Prints "saved N" after each.
// Exits 0 when done, 2 if a save throws (the message on stderr).
//
// ckpt_crash_writer manager FORMAT RUN_DIR COUNT ELEMENTS
//
// The child of the manager's crash harness (manager_crash_test) and of the
// TF interop test: a ckpt::Manager on RUN_DIR ({.keep_last = 2}, FORMAT)
// saves crash_state(N) as step N, from the run's latest step + 1, COUNT
// saves (0: until killed), asynchronous and blocking by turns, then closes.

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "ckpt/checkpoint.h"
#include "ckpt/manager.h"
#include "crash/crash_states.h"

namespace {

int run_manager(const std::string& format, const std::filesystem::path& run_dir, int64_t count, int64_t elements) {
  try {
    ckpt::Manager manager(run_dir, {.keep_last = 2, .format = format});
    const std::optional<ckpt::CheckpointEntry> latest = manager.latest();
    const int64_t first = latest ? *latest->step + 1 : 1;
    for (int64_t step = first; count == 0 || step < first + count; ++step) {
      manager.save(step, ckpt::testing::crash_state(step, elements),
                   {.metrics = {{"loss", 1.0 / static_cast<double>(step)}}, .blocking = step % 2 == 0});
      std::printf("saved %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
    }
    manager.close();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "manager") {
    return run_manager(argv[2], argv[3], std::atoll(argv[4]), std::atoll(argv[5]));
  }
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: %s FORMAT TARGET FIRST COUNT ELEMENTS [THREADS]\n", argv[0]);
    return 1;
  }
  const std::string format = argv[1];
  const std::filesystem::path target = argv[2];
  const int64_t first = std::atoll(argv[3]);
  const int64_t count = std::atoll(argv[4]);
  const int64_t elements = std::atoll(argv[5]);
  const unsigned threads = argc == 7 ? static_cast<unsigned>(std::atoi(argv[6])) : 0;
  try {
    for (int64_t step = first; count == 0 || step < first + count; ++step) {
      ckpt::save(target, ckpt::testing::crash_state(step, elements), {.format = format, .threads = threads});
      std::printf("saved %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
  return 0;
}
