// `ckpt_bench file PATH`: times ckpt on one existing checkpoint (any format)
// and prints the figures as one JSON object, for bench/bench_torch.py to set
// beside the peer framework's figures measured in the same run:
//   open_s      lazy open (ckpt::open: index and tree, no tensor data read)
//   load_s      open with lazy=false: every tensor read into fresh heap memory
//   save_s      write the materialized tree to DIR/ckpt-save.<ext> (no fsync)
//   save_fsync_s  the same with fsync (ckpt's default)
//   save_no_checksum_s  save_s without per-tensor checksums
//               (SaveOptions::checksum = kNone), in the same turns: what the
//               checksums' pass over the bytes costs a save
//   plain_s     write() of every tensor's bytes from the same memory into a
//               new file (no fsync): the limit under save_s, timed in turns
//               with the saves
//   plain_fsync_s the same, then fsync: the limit under a durable save
//   plain_layout_s  pwrite() of the same bytes at the offsets ckpt's saved
//               file holds them (its header's bytes too; no fsync), in the
//               same turns: the limit for this file's layout (null for a
//               checkpoint of several files)
//   flush_early_off_fsync_s  the durable save without its early writeback
//               (AtomicFile's sync_file_range as it writes), in the same turns
//   load_cpu_s  CPU seconds of the load, all threads (the least of the runs)
//   read_s      plain read() of every file of the checkpoint (the file, a TF
//               prefix's files, or everything under an Orbax directory) into
//               one buffer: what the bytes cost without any format
//   decode_s    Orbax OCDBT only (else null): libzstd decoding every zstd
//               value of the database into reused per-thread memory, on the
//               load's threads: the floor under any reader of the checkpoint,
//               with no page faults and no format work
// Each is the best of --repeats runs; "turns_s" holds every turn's time of
// each save contender, in order (for medians and the spread beside the
// bests), and --only NAME times only that save contender (for a profile:
// `perf record -g build/ckpt_bench file PATH --only save`). Before each timed load, read and
// save, the process touches and frees memory the size of the checkpoint
// (untimed; see touch_and_free): without it a save or a plain write of 1 GiB
// took 0.2 s or 1.1-1.8 s by the luck of the pages it got, and the best of
// three compared luck.
//
//   build/ckpt_bench file PATH [--repeats N] [--dir DIR] [--threads N] [--only CONTENDER]
//   build/ckpt_bench file PATH --serve OUT [--threads N]
//
// --serve: loads PATH, saves it once to OUT (.pt etc., no fsync), prints
// "ready", then for each line "overwrite" on stdin saves it onto OUT again
// (replacing the existing file, as a training loop does) and prints the
// seconds that took, each after touching and freeing memory the size of
// PATH, untimed (touch_and_free; bench_torch.py does the same before each
// torch.save it pairs with these); the releases it deferred (io/deferred_release.h) are
// then drained and the page cache synced, untimed, so that they never fall
// into the next contender's timing. bench_torch.py alternates these with
// torch.save onto an existing file, in pairs.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <iostream>

#include "ckpt/ckpt.h"
#include "formats/orbax/compression.h"
#include "formats/orbax/ocdbt_reader.h"
#include "core/parallel.h"
#include "io/atomic_file.h"
#include "io/deferred_release.h"

namespace {

using Clock = std::chrono::steady_clock;

// Best of `repeats` timings of body(); before() runs untimed ahead of each.
template <class Body, class Before = void (*)()>
double best_seconds(int repeats, Body body, Before before = [] {}) {
  double best = 1e100;
  for (int i = 0; i < repeats; ++i) {
    before();
    const auto start = Clock::now();
    body();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

// The files of the checkpoint at `path`: the file itself, the files of a TF
// prefix (PATH.index, PATH.data-*), or every file under a directory.
std::vector<std::filesystem::path> checkpoint_files(const std::filesystem::path& path) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
  } else if (std::filesystem::is_regular_file(path)) {
    files.push_back(path);
  } else {
    const std::string stem = path.filename().string() + ".";
    for (const auto& entry : std::filesystem::directory_iterator(path.parent_path().empty() ? "." : path.parent_path())) {
      if (entry.is_regular_file() && entry.path().filename().string().starts_with(stem)) files.push_back(entry.path());
    }
  }
  return files;
}

// The size of all of `files`.
uint64_t total_size(const std::vector<std::filesystem::path>& files) {
  uint64_t total = 0;
  for (const auto& file : files) total += std::filesystem::file_size(file);
  return total;
}

// Reads every file of the checkpoint into one heap buffer with read().
void read_all(const std::filesystem::path& path) {
  const auto files = checkpoint_files(path);
  const uint64_t total = total_size(files);
  // The same kind of memory as ckpt's loads (huge pages advised), untouched.
  ckpt::Buffer buffer = ckpt::Buffer::allocate(total);
  char* const into = reinterpret_cast<char*>(buffer.mutable_bytes().data());
  size_t at = 0;
  for (const auto& file : files) {
    std::FILE* in = std::fopen(file.c_str(), "rb");
    if (in == nullptr) continue;
    at += std::fread(into + at, 1, total - at, in);
    std::fclose(in);
  }
  if (at != total) std::fprintf(stderr, "bench: short read\n");
}

// Writes every page of `bytes` of fresh memory, then frees it. On a VM that
// reports free pages to its host (Firecracker, as this project's machines),
// memory left free for a few seconds goes back to the host and costs about a
// CPU-second per GiB to touch again, on top of the kernel's zeroing; after
// this the load gets pages the host still backs, as on an ordinary machine.
// bench_formats.py does the same in the framework's process.
void touch_and_free(uint64_t bytes) {
  // ckpt's own heap blocks (huge pages advised, as numpy's): the load wants
  // large free blocks, which are the ones the VM hands back.
  ckpt::Buffer block = ckpt::Buffer::allocate(bytes);
  const std::span<std::byte> data = block.mutable_bytes();
  std::memset(data.data(), 1, data.size());
}

// Writes every tensor's bytes of `tree` into the new file `path` with
// write() from the tensors' own memory, then fsyncs it if `fsync`: what a
// save of the same bytes costs without any format.
void plain_write(const std::filesystem::path& path, ckpt::Tree& tree, bool fsync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("bench: cannot create " + path.string());
  tree.for_each_tensor([&](ckpt::Tensor& tensor) {
    const std::span<const std::byte> bytes = tensor.bytes();
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) throw std::runtime_error("bench: write failed");
      done += static_cast<size_t>(n);
    }
  });
  if (fsync && ::fsync(fd) != 0) throw std::runtime_error("bench: fsync failed");
  ::close(fd);
}

// The layout of the file ckpt's save of `tree` writes at `probe` (written
// once here, untimed): each tensor's bytes and the offset the file holds
// them at, in file order, and the bytes before the first (the header).
// Empty when a tensor's offset is unknown (a format of several files).
struct FileLayout {
  std::vector<std::pair<std::span<const std::byte>, uint64_t>> pieces;
  std::vector<std::byte> head;
};
FileLayout file_layout(const std::filesystem::path& probe, const ckpt::Tree& tree, const ckpt::SaveOptions& options) {
  ckpt::save(probe, tree, options);
  const ckpt::Contents contents = ckpt::open(probe);
  std::unordered_map<std::string, std::span<const std::byte>> bytes;
  tree.for_each_tensor_leaf([&](std::string_view name, const ckpt::Tree& leaf) { bytes[std::string(name)] = leaf.tensor().bytes(); });
  FileLayout layout;
  uint64_t first = UINT64_MAX;
  for (const ckpt::EntryInfo& entry : contents.entries) {
    const auto found = bytes.find(entry.name);
    if (entry.nbytes == 0) continue;
    if (found == bytes.end() || entry.offset == 0 || found->second.size() != entry.nbytes) return {};
    layout.pieces.emplace_back(found->second, entry.offset);
    first = std::min(first, entry.offset);
  }
  if (layout.pieces.empty() || !std::filesystem::is_regular_file(probe)) return {};
  layout.head.resize(first);
  std::FILE* in = std::fopen(probe.c_str(), "rb");
  const bool read = in != nullptr && std::fread(layout.head.data(), 1, first, in) == first;
  if (in != nullptr) std::fclose(in);
  std::filesystem::remove(probe);
  if (!read) return {};
  return layout;
}

// pwrite() of the same bytes at the offsets ckpt's file holds them (the
// header's bytes first, then every tensor in file order, each with one call
// from its own memory) into the new file `path`: the limit under a save of
// this layout. The copy into the page cache is slower when the page offsets
// of source and file differ (0.194 s from offset 0 against 0.207 s at
// safetensors' offsets for the same 1 GiB), which a plain write from
// offset 0 never pays.
void plain_layout_write(const std::filesystem::path& path, const FileLayout& layout) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("bench: cannot create " + path.string());
  const auto put = [&](std::span<const std::byte> bytes, uint64_t at) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at + done));
      if (n <= 0) throw std::runtime_error("bench: write failed");
      done += static_cast<size_t>(n);
    }
  };
  put(layout.head, 0);
  for (const auto& [bytes, at] : layout.pieces) put(bytes, at);
  ::close(fd);
}

// The --serve loop (see the top of this file).
int serve(const std::filesystem::path& path, const std::filesystem::path& out, unsigned threads) {
  ckpt::Tree loaded = ckpt::open(path, {.lazy = false, .threads = threads}).tree;
  const ckpt::SaveOptions options{.format = std::string(ckpt::open(path).format), .fsync = false, .threads = threads};
  ckpt::save(out, loaded, options);
  ckpt::detail::drain_deferred_releases();
  ::sync();
  std::printf("ready\n");
  std::fflush(stdout);
  std::string command;
  const uint64_t state_bytes = std::filesystem::file_size(path);
  while (std::getline(std::cin, command) && command == "overwrite") {
    touch_and_free(state_bytes);
    const auto start = Clock::now();
    ckpt::save(out, loaded, options);
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    ckpt::detail::drain_deferred_releases();
    ::sync();
    std::printf("%.9f\n", t);
    std::fflush(stdout);
  }
  return 0;
}

// CPU seconds this process has used, all threads.
double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Best time of decoding every zstd value of the OCDBT database at `path`
// into per-thread scratch memory that earlier values already touched; a
// negative number when `path` holds no OCDBT database (merged at the root).
double decode_floor_seconds(const std::filesystem::path& path, int repeats, unsigned threads) {
  if (!std::filesystem::is_regular_file(path / "manifest.ocdbt")) return -1;
  using ckpt::orbax_detail::OcdbtStore;
  const OcdbtStore store = OcdbtStore::open(path);
  std::vector<ckpt::Buffer> frames;
  std::vector<size_t> sizes;
  for (const std::string& key : store.keys()) {
    ckpt::Buffer bytes = store.read(*store.find(key));
    static constexpr unsigned char kMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};
    if (bytes.size() < 4 || std::memcmp(bytes.data(), kMagic, 4) != 0) continue;
    const auto size = ckpt::orbax_detail::zstd_frames_size(bytes.bytes(), {.path = path, .entry = key});
    if (!size) continue;
    sizes.push_back(*size);
    frames.push_back(std::move(bytes));
  }
  if (frames.empty()) return -1;
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  const unsigned workers = threads == 0 ? ckpt::detail::default_threads() : threads;
  std::vector<std::vector<std::byte>> scratch(workers, std::vector<std::byte>(largest));  // touched here, untimed
  const auto decode_all = [&] {
    ckpt::detail::parallel_for(frames.size(), workers, [&](size_t i, unsigned worker) {
      ckpt::orbax_detail::zstd_decode_exact(frames[i].bytes(), std::span(scratch[worker]).first(sizes[i]), {.path = path});
    });
  };
  decode_all();  // the compressed bytes into the page cache mapping, untimed
  return best_seconds(repeats, decode_all);
}

// The save contenders, timed in turns (see the top of this file).
enum Contender { kSave, kPlain, kSaveFsync, kPlainFsync, kSaveFsyncNoFlush, kSaveNoChecksum, kPlainLayout, kContenders };
constexpr const char* kNames[kContenders] = {"save", "plain", "save_fsync", "plain_fsync",
                                             "flush_early_off_fsync", "save_no_checksum", "plain_layout"};

}  // namespace

int bench_file_main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckpt_bench file PATH [--repeats N] [--dir DIR] [--threads N] [--only CONTENDER]\n");
    return 2;
  }
  const std::filesystem::path path = argv[2];
  int repeats = 3;
  unsigned threads = 0;
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  std::filesystem::path serve_out;
  std::string only;  // --only NAME: of the save contenders, time only NAME (for a profile)
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--threads") threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
    else if (flag == "--serve") serve_out = argv[i + 1];
    else if (flag == "--only") only = argv[i + 1];
  }
  // Checked before the load: a misspelt name fails at once.
  if (!only.empty() && std::find(std::begin(kNames), std::end(kNames), only) == std::end(kNames)) {
    std::fprintf(stderr, "ckpt_bench: --only: no save contender named %s\n", only.c_str());
    return 2;
  }
  try {
    if (!serve_out.empty()) return serve(path, serve_out, threads);
    size_t tensors = 0;
    uint64_t bytes = 0;
    const double open_s = best_seconds(repeats, [&] {
      const ckpt::Contents contents = ckpt::open(path);
      tensors = contents.entries.size();
      bytes = 0;
      for (const ckpt::EntryInfo& entry : contents.entries) bytes += entry.nbytes;
    });
    const uint64_t warm_bytes = total_size(checkpoint_files(path)) / 4 * 5 + (uint64_t{64} << 20);  // decoded may be larger
    ckpt::Tree loaded;
    // The previous run's tree is freed before the timer starts, as the
    // Python peers drop theirs between runs.
    double load_cpu_s = 1e100;
    const double load_s = best_seconds(
        repeats,
        [&] {
          const double cpu = cpu_seconds();
          loaded = ckpt::open(path, {.lazy = false, .threads = threads}).tree;
          load_cpu_s = std::min(load_cpu_s, cpu_seconds() - cpu);
        },
        [&] {
          loaded = ckpt::Tree();
          touch_and_free(warm_bytes);
        });
    // Every tensor in heap memory, as torch.load leaves them.
    loaded.for_each_tensor([](ckpt::Tensor& tensor) {
      if (tensor.buffer().kind() == ckpt::StorageKind::kMapped) std::abort();
    });
    // Each save into a fresh folder: a checkpoint may be several files (a TF
    // prefix) or a directory (Orbax).
    const std::filesystem::path out_dir = dir / "ckpt-save";
    const std::filesystem::path out = out_dir / ("state" + path.extension().string());
    const ckpt::SaveOptions options{.format = std::string(ckpt::open(path).format), .fsync = false, .threads = threads};
    // In turns, each into a fresh folder after a sync (untimed): no
    // contender inherits another's dirty pages or blocks to free.
    const FileLayout layout = file_layout(dir / ("ckpt-layout-probe" + path.extension().string()), loaded, options);
    double best[kContenders];
    std::fill(std::begin(best), std::end(best), 1e100);
    std::vector<double> turns[kContenders];  // every turn's time, in order
    for (int i = 0; i < repeats; ++i) {
      for (int c = 0; c < kContenders; ++c) {
        if (c == kPlainLayout && layout.pieces.empty()) continue;
        if (!only.empty() && only != kNames[c]) continue;
        std::filesystem::remove_all(out_dir);  // deleting the last copy is not part of a save
        ckpt::detail::drain_deferred_releases();
        std::filesystem::create_directories(out_dir);
        ::sync();
        touch_and_free(bytes);
        ckpt::SaveOptions o = options;
        o.fsync = c != kSave && c != kPlain && c != kSaveNoChecksum && c != kPlainLayout;
        if (c == kSaveNoChecksum) o.checksum = ckpt::ChecksumKind::kNone;
        const bool flush_early = ckpt::detail::set_flush_early(c != kSaveFsyncNoFlush);
        const auto start = Clock::now();
        if (c == kPlain || c == kPlainFsync) {
          plain_write(out_dir / "plain.bin", loaded, c == kPlainFsync);
        } else if (c == kPlainLayout) {
          plain_layout_write(out_dir / "plain-layout.bin", layout);
        } else {
          ckpt::save(out, loaded, o);
        }
        const double t = std::chrono::duration<double>(Clock::now() - start).count();
        ckpt::detail::set_flush_early(flush_early);
        best[c] = std::min(best[c], t);
        turns[c].push_back(t);
      }
    }
    // Every turn of every contender, for the medians and the spread beside the bests.
    std::string turns_json;
    for (int c = 0; c < kContenders; ++c) {
      if (turns[c].empty()) continue;
      turns_json += std::string(turns_json.empty() ? "" : ", ") + "\"" + kNames[c] + "\": [";
      for (size_t i = 0; i < turns[c].size(); ++i) turns_json += (i == 0 ? "" : ", ") + std::to_string(turns[c][i]);
      turns_json += "]";
    }
    const double save_s = best[kSave];
    const double save_fsync_s = best[kSaveFsync];
    std::filesystem::remove_all(out_dir);
    const double read_s = best_seconds(repeats, [&] { read_all(path); }, [&] { touch_and_free(warm_bytes); });
    loaded = ckpt::Tree();
    const double decode_s = decode_floor_seconds(path, repeats, threads);
    std::printf("{\"tensors\": %zu, \"bytes\": %llu, \"open_s\": %.9f, \"load_s\": %.9f, \"load_cpu_s\": %.9f, "
                "\"save_s\": %.9f, \"plain_s\": %.9f, \"save_fsync_s\": %.9f, \"plain_fsync_s\": %.9f, "
                "\"flush_early_off_fsync_s\": %.9f, \"save_no_checksum_s\": %.9f, \"plain_layout_s\": %s, \"read_s\": %.9f, "
                "\"decode_s\": %s, \"turns_s\": {%s}}\n",
                tensors, static_cast<unsigned long long>(bytes), open_s, load_s, load_cpu_s, save_s, best[kPlain], save_fsync_s,
                best[kPlainFsync], best[kSaveFsyncNoFlush], best[kSaveNoChecksum],
                layout.pieces.empty() ? "null" : std::to_string(best[kPlainLayout]).c_str(), read_s,
                decode_s < 0 ? "null" : std::to_string(decode_s).c_str(), turns_json.c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
