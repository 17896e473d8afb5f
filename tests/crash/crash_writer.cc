// ckpt_crash_writer FORMAT TARGET FIRST COUNT ELEMENTS [THREADS]
//
// The child process of the crash-consistency harness (crash_consistency_test):
// saves crash_state(FIRST), crash_state(FIRST + 1), ... to TARGET in FORMAT,
// COUNT saves (0: until killed), each with ELEMENTS float32 weights, through
// ckpt::save with its defaults (fsync on) and THREADS write threads (0, the
// default: ckpt's choice; 1: every system call on the main thread, which
// strace's per-thread injection counters need). Prints "saved N" after each.
// Exits 0 when done, 2 if a save throws (the message on stderr).

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "ckpt/checkpoint.h"
#include "crash/crash_states.h"

int main(int argc, char** argv) {
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
