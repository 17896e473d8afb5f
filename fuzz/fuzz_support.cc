#include "fuzz_support.h"

#include <fcntl.h>
#include <sanitizer/allocator_interface.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/document.h"
#include "ckpt/error.h"
#include "ckpt/tree.h"

namespace ckpt::fuzz {
namespace {

// Live heap bytes since the hooks were installed, and the peak since
// begin_input. Threads (materialize's) allocate too: atomics.
std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};
int64_t baseline_bytes = 0;
uint64_t bound_bytes = 0;
size_t input_bytes = 0;

void on_malloc(const volatile void* pointer, size_t size) {
  int64_t now = live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed) + static_cast<int64_t>(size);
  int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void on_free(const volatile void* pointer) {
  if (pointer == nullptr) return;
  size_t size = __sanitizer_get_allocated_size(const_cast<const void*>(pointer));
  live_bytes.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
}

void install_hooks() {
  static bool installed = [] {
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
    return true;
  }();
  (void)installed;
}

void remove_scratch() {
  std::error_code ignored;
  std::filesystem::remove_all(scratch(), ignored);
}

void empty_path(const std::filesystem::path& path) {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

bool valid_component(std::string_view part) {
  if (part.empty() || part == "." || part == ".." || part.size() > 100) return false;
  for (char c : part) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

uint64_t memory_bound(size_t input_size) { return kMemoryFactor * input_size + kMemorySlack; }

const std::filesystem::path& scratch() {
  static const std::filesystem::path path = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                                     : std::filesystem::temp_directory_path();
    std::filesystem::path dir = base / ("ckpt-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::atexit(remove_scratch);
    return dir;
  }();
  return path;
}

std::filesystem::path write_file(std::string_view name, std::span<const uint8_t> data) {
  std::filesystem::path path = scratch() / std::string(name);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

std::vector<PackedFile> packed_files(std::string_view data) {
  constexpr std::string_view kMarker = "\n@@";
  std::vector<PackedFile> files;
  for (size_t at = data.find(kMarker); at != std::string_view::npos;) {
    const size_t name_begin = at + kMarker.size();
    const size_t name_end = data.find('\n', name_begin);
    if (name_end == std::string_view::npos) break;
    const size_t next = data.find(kMarker, name_end);
    const size_t end = next == std::string_view::npos ? data.size() : next;
    files.push_back({data.substr(name_begin, name_end - name_begin), data.substr(name_end + 1, end - name_end - 1)});
    at = next;
  }
  return files;
}

std::filesystem::path unpack_directory(std::string_view root, std::span<const uint8_t> data) {
  std::filesystem::path dir = scratch() / std::string(root);
  empty_path(dir);
  std::filesystem::create_directories(dir);
  const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  int files = 0;
  for (const auto& [name, contents] : packed_files(text)) {
    if (files >= 64) break;
    // The path: components checked one by one.
    std::filesystem::path relative;
    bool ok = !name.empty();
    int depth = 0;
    for (size_t begin = 0; ok && begin <= name.size();) {
      size_t slash = name.find('/', begin);
      if (slash == std::string_view::npos) slash = name.size();
      std::string_view part = name.substr(begin, slash - begin);
      ok = valid_component(part) && ++depth <= 8;
      relative /= std::string(part);
      begin = slash + 1;
    }
    if (!ok) continue;
    std::filesystem::path target = dir / relative;
    std::error_code error;
    std::filesystem::create_directories(target.parent_path(), error);
    if (error || std::filesystem::is_directory(target)) continue;
    int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) continue;  // e.g. a component that is already a file
    size_t done = 0;
    while (done < contents.size()) {
      ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    ++files;
  }
  return dir;
}

void walk_contents(const std::filesystem::path& path, Contents& contents, size_t input_size) {
  // inspect --json
  std::string json = to_json(contents_document(path, contents));
  (void)json;
  // Every tensor's bytes, as a lazy load's user touches them.
  uint64_t bound = memory_bound(input_size);
  std::vector<std::byte> bytes;
  for (const Tree::Leaf& leaf : contents.tree.tensor_leaves()) {
    const Tensor& tensor = leaf.value->tensor();
    if (tensor.nbytes() > bound) continue;
    bytes.assign(tensor.nbytes(), std::byte{0});
    tensor.read_into(bytes);
    bytes.clear();
    bytes.shrink_to_fit();
  }
}

void walk_checkpoint(const std::filesystem::path& path, const std::string& format, size_t input_size) {
  uint64_t total = 0;
  try {
    Contents contents = ckpt::open(path, {.format = format});
    walk_contents(path, contents, input_size);
    for (const Tree::Leaf& leaf : contents.tree.tensor_leaves()) total += leaf.value->tensor().nbytes();
  } catch (const Error&) {
    return;
  }
  // A non-lazy load, where what it reads is within the bound.
  if (total <= memory_bound(input_size)) {
    try {
      Contents loaded = ckpt::open(path, {.format = format, .lazy = false, .threads = 1});
      (void)loaded;
    } catch (const Error&) {
    }
  }
  try {
    Contents verified = ckpt::open(path, {.format = format, .verify = true});
    (void)verified;
  } catch (const Error&) {
  }
}

void begin_input(size_t input_size) {
  install_hooks();
  input_bytes = input_size;
  bound_bytes = memory_bound(input_size);
  baseline_bytes = live_bytes.load(std::memory_order_relaxed);
  peak_bytes.store(baseline_bytes, std::memory_order_relaxed);
}

void check_memory() {
  int64_t grown = peak_bytes.load(std::memory_order_relaxed) - baseline_bytes;
  if (grown > 0 && static_cast<uint64_t>(grown) > bound_bytes) {
    std::fprintf(stderr,
                 "==ckpt-fuzz== MEMORY BOUND: the heap grew by %lld bytes for an input of %zu bytes "
                 "(bound %llu = %llu x input + %llu)\n",
                 static_cast<long long>(grown), input_bytes, static_cast<unsigned long long>(bound_bytes),
                 static_cast<unsigned long long>(kMemoryFactor), static_cast<unsigned long long>(kMemorySlack));
    std::abort();
  }
}

}  // namespace ckpt::fuzz
