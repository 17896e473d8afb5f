#pragma once
// The process's peak resident memory, for tests that bound what an
// operation costs: measure before and after and compare the growth.

#include <sys/resource.h>

#include <cstdint>

namespace ckpt::testing {

// Peak resident set size of this process so far, in bytes (getrusage:
// ru_maxrss, which Linux gives in KiB). It only grows: a test compares it
// before and after an operation, and a growth larger than the bound means
// the operation touched that much memory at once.
inline uint64_t peak_rss_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

constexpr uint64_t kMiB = uint64_t{1} << 20;

}  // namespace ckpt::testing
