#pragma once
// The process's peak resident memory, for tests that bound what an
// operation costs: reset the peak, run it, compare the peak with the
// resident memory before.

#include <cstdint>
#include <fstream>
#include <string>

namespace ckpt::testing {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// One "VmHWM:" / "VmRSS:" line of /proc/self/status, in bytes (0 if absent).
inline uint64_t proc_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;  // "  123 kB"
  }
  return 0;
}

// Resets the peak to the current resident memory (Linux: "5" into
// /proc/self/clear_refs), so that an earlier test's peak hides nothing, and
// returns the resident memory now.
inline uint64_t reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
  return proc_status_bytes("VmRSS");
}

// The peak resident memory since the last reset_peak_rss() (or the start).
inline uint64_t peak_rss_bytes() { return proc_status_bytes("VmHWM"); }

}  // namespace ckpt::testing
