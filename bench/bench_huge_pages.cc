// Loads into fresh memory with and without transparent huge pages (issue 18,
// "first load after idle memory"; the policy: src/core/huge_pages.h), run by
// hand:
//
//   build/ckpt_bench huge-pages [--dir DIR] [--mib N] [--repeats N] [--fragment-gib G]
//
// A file of N MiB (default 1024) is written and read once (into the page
// cache); then, in turns, a fresh 2 MiB-aligned block is filled from it with
// positioned reads (what a full load does), once advised MADV_HUGEPAGE and
// once not, each timed with its page faults. --fragment-gib first takes G GiB
// of memory in 4 KiB pages and gives back every other page, so that free
// memory is in pieces of 4 KiB, as the page cache leaves it after an idle
// period: then an advised block's faults find no free 2 MiB block and the
// kernel compacts memory on the spot (THP defrag "madvise"). Prints the free
// huge-page memory (/proc/buddyinfo) before each fill and what ckpt's policy
// decides for such a block (CKPT_THP, else auto: core/huge_pages.h).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/huge_pages.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kChunk = size_t{8} << 20;

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

std::optional<uint64_t> free_huge_now() {
  std::ifstream in("/proc/buddyinfo");
  std::stringstream text;
  text << in.rdbuf();
  return ckpt::detail::free_huge_bytes(text.str());
}

// Seconds to fill a fresh block of `size` bytes from `fd`; its faults in `faults`.
double fill(int fd, size_t size, bool advise, long& faults) {
  void* block = std::aligned_alloc(kHuge, size);
  if (block == nullptr) std::exit(1);
  if (advise) ::madvise(block, size, MADV_HUGEPAGE);
  const long faults_before = minor_faults();
  const auto start = Clock::now();
  for (size_t at = 0; at < size; at += kChunk) {
    const size_t n = std::min(kChunk, size - at);
    if (::pread(fd, static_cast<char*>(block) + at, n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) std::exit(1);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  faults = minor_faults() - faults_before;
  std::free(block);
  return seconds;
}

}  // namespace

int bench_huge_pages_main(int argc, char** argv) {
  fs::path dir = fs::temp_directory_path();
  size_t mib = 1024;
  int repeats = 3;
  double fragment_gib = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--mib") mib = static_cast<size_t>(std::atol(argv[i + 1]));
    else if (flag == "--repeats") repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--fragment-gib") fragment_gib = std::atof(argv[i + 1]);
  }
  const size_t size = mib << 20;
  const fs::path path = dir / "ckpt_bench_huge_pages.bin";
  {
    std::vector<char> chunk(kChunk, 7);
    std::ofstream out(path, std::ios::binary);
    for (size_t at = 0; at < size; at += kChunk) out.write(chunk.data(), static_cast<std::streamsize>(std::min(kChunk, size - at)));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  long ignored = 0;
  fill(fd, size, false, ignored);  // into the page cache
  // Free memory in 4 KiB pieces: every other page of a large region given back.
  char* fragments = nullptr;
  const size_t fragment_bytes = static_cast<size_t>(fragment_gib * double(size_t{1} << 30));
  if (fragment_bytes > 0) {
    fragments = static_cast<char*>(::mmap(nullptr, fragment_bytes, PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ::madvise(fragments, fragment_bytes, MADV_NOHUGEPAGE);
    for (size_t at = 0; at < fragment_bytes; at += 4096) fragments[at] = 1;
    for (size_t at = 0; at < fragment_bytes; at += 8192) ::madvise(fragments + at, 4096, MADV_DONTNEED);
  }
  std::printf("huge pages: %zu MiB fills from the page cache, best of %d, %.1f GiB fragmented first\n", mib, repeats,
              fragment_gib);
  double advised = 1e100, plain = 1e100, advised_sum = 0, plain_sum = 0, first_advised = 0, first_plain = 0;
  for (int r = 0; r < repeats; ++r) {
    const std::optional<uint64_t> free_huge = free_huge_now();
    long faults_advised = 0, faults_plain = 0;
    const double a = fill(fd, size, true, faults_advised);
    const double p = fill(fd, size, false, faults_plain);
    advised = std::min(advised, a);
    plain = std::min(plain, p);
    advised_sum += a;
    plain_sum += p;
    if (r == 0) first_advised = a, first_plain = p;
    std::printf("  free in >= 2 MiB blocks %.0f MiB (ckpt would %s): advised %.3f s (%ld faults), 4 KiB pages %.3f s "
                "(%ld faults)\n",
                free_huge ? double(*free_huge) / double(1 << 20) : -1.0,
                ckpt::detail::advise_huge_pages_now(size) ? "advise" : "not advise",
                a, faults_advised, p, faults_plain);
  }
  std::printf("  advised / 4 KiB pages (above 1: huge pages slower): first fill %.2f, all %d fills %.2f, best %.2f\n",
              first_advised / first_plain, repeats, advised_sum / plain_sum, advised / plain);
  if (fragments != nullptr) ::munmap(fragments, fragment_bytes);
  ::close(fd);
  fs::remove(path);
  return 0;
}
