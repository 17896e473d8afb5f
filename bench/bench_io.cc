// ckpt's save/load against a plain C write()/read() of the same bytes into
// the same kind of memory, in one process. Run by hand (make bench); never
// part of pass/fail. Prints ratios: throughput of ckpt / throughput of plain
// I/O (higher is better; 1.0 = as fast as the plain calls).
//
//   build/ckpt_bench [--dir DIR] [--repeats N] [--gib X] [--threads N]
//   build/ckpt_bench file PATH ...   (one file, JSON figures: bench_file.cc)
//   build/ckpt_bench manager ...     (the checkpoint manager: bench_manager.cc)

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(const std::function<void()>& body) {
  const auto start = Clock::now();
  body();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Best of `repeats` runs: the least disturbed by other work on the machine.
double best_of(int repeats, const std::function<void()>& body) {
  double best = 1e100;
  for (int i = 0; i < repeats; ++i) best = std::min(best, seconds(body));
  return best;
}

// Best of `repeats` rounds for each contender, run in turns (a, b, c, a, b,
// c, ...), each after `prepare` and a sync(), outside the timing: no
// contender inherits the other's dirty pages waiting for writeback, and none
// gets the quiet start every time.
std::vector<double> best_in_turns(int repeats, const std::function<void()>& prepare,
                                  const std::vector<std::function<void()>>& contenders) {
  std::vector<double> best(contenders.size(), 1e100);
  for (int i = 0; i < repeats; ++i) {
    for (size_t c = 0; c < contenders.size(); ++c) {
      prepare();
      ::sync();
      best[c] = std::min(best[c], seconds(contenders[c]));
    }
  }
  return best;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::perror(what);
    std::exit(1);
  }
}

// Writes a new file, as a save of a new checkpoint does.
void plain_write(const std::filesystem::path& path, const std::vector<ckpt::Tensor>& tensors, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  check(fd >= 0, "open");
  for (const ckpt::Tensor& t : tensors) {
    const std::byte* data = t.bytes().data();
    size_t left = t.nbytes();
    while (left > 0) {
      const ssize_t n = ::write(fd, data, left);
      check(n > 0, "write");
      data += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (sync) check(::fsync(fd) == 0, "fsync");
  ::close(fd);
}

void plain_read(const std::filesystem::path& path, std::vector<std::vector<std::byte>>& into) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, "open");
  for (auto& block : into) {
    std::byte* data = block.data();
    size_t left = block.size();
    while (left > 0) {
      const ssize_t n = ::read(fd, data, left);
      check(n > 0, "read");
      data += n;
      left -= static_cast<size_t>(n);
    }
  }
  ::close(fd);
}

struct Workload {
  std::string label;
  std::vector<ckpt::Tensor> tensors;
  ckpt::Tree tree;
  uint64_t bytes = 0;
};

Workload make_workload(const std::string& label, size_t count, int64_t elements) {
  Workload w{label, {}, ckpt::Tree::map(), 0};
  for (size_t i = 0; i < count; ++i) {
    ckpt::Tensor t = ckpt::Tensor::empty(ckpt::DType::kFloat32, {elements});
    auto bytes = t.mutable_bytes();
    for (size_t j = 0; j < bytes.size(); j += 4096) bytes[j] = static_cast<std::byte>(i + j);  // touch every page
    std::memset(bytes.data(), static_cast<int>(i), std::min<size_t>(bytes.size(), 64));
    w.tree.set("layers." + std::to_string(i) + ".weight", t);
    w.tensors.push_back(t);
    w.bytes += t.nbytes();
  }
  return w;
}

void run(const Workload& w, const std::filesystem::path& dir, int repeats, unsigned threads) {
  const auto plain_path = dir / "plain.bin";
  const auto ckpt_path = dir / "state.safetensors";
  const double mib = static_cast<double>(w.bytes) / (1 << 20);
  const double n = static_cast<double>(w.tensors.size());
  std::printf("\n== %s: %zu float32 tensors, %.0f MiB ==\n", w.label.c_str(), w.tensors.size(), mib);

  for (bool sync : {false, true}) {
    // Both write a new file: removing the previous one (which can cost more
    // than the write on some file systems) is not part of either timing.
    const auto remove_previous = [&] {
      std::filesystem::remove(plain_path);
      std::filesystem::remove(ckpt_path);
    };
    const std::vector<double> t = best_in_turns(repeats, remove_previous, {
        [&] { plain_write(plain_path, w.tensors, sync); },
        [&] { ckpt::save(ckpt_path, w.tree, {.fsync = sync, .threads = threads}); },
        [&] {
          ckpt::save(ckpt_path, w.tree, {.checksum = ckpt::ChecksumKind::kNone, .fsync = sync, .threads = threads});
        },
    });
    const double t_plain = t[0], t_ckpt = t[1], t_nosum = t[2];
    std::printf("save%-11s plain write %7.0f MiB/s | ckpt.save %7.0f MiB/s  ratio %.2f | without checksums ratio %.2f"
                " | per-tensor overhead %.2f us\n",
                sync ? " (fsync)" : "", mib / t_plain, mib / t_ckpt, t_plain / t_ckpt, t_plain / t_nosum,
                std::max(0.0, (t_ckpt - t_plain) / n * 1e6));
  }
  plain_write(plain_path, w.tensors, false);
  ckpt::save(ckpt_path, w.tree, {.fsync = false});

  std::vector<std::vector<std::byte>> plain_memory;
  std::vector<std::vector<std::byte>> ckpt_memory;
  for (const ckpt::Tensor& t : w.tensors) {
    plain_memory.emplace_back(t.nbytes(), std::byte{1});  // pre-allocated and faulted in
    ckpt_memory.emplace_back(t.nbytes(), std::byte{1});
  }
  const double t_plain_read = best_of(repeats, [&] { plain_read(plain_path, plain_memory); });
  const double t_open = best_of(repeats, [&] { ckpt::Contents c = ckpt::open(ckpt_path); });
  const double t_load = best_of(repeats, [&] {
    ckpt::Contents contents = ckpt::open(ckpt_path);
    const std::vector<ckpt::Tree::Leaf> leaves = contents.tree.tensor_leaves();  // tree order = i
    for (size_t i = 0; i < leaves.size(); ++i) leaves[i].value->tensor().read_into(ckpt_memory[i]);
  });
  const double t_verify = best_of(repeats, [&] { ckpt::verify(ckpt_path); });
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    if (std::memcmp(ckpt_memory[i].data(), w.tensors[i].bytes().data(), w.tensors[i].nbytes()) != 0) {
      std::fprintf(stderr, "bench: loaded bytes differ for tensor %zu\n", i);
      std::exit(1);
    }
  }
  std::printf("load           plain read  %7.0f MiB/s | ckpt full load %7.0f MiB/s  ratio %.2f"
              " | per-tensor overhead %.2f us\n",
              mib / t_plain_read, mib / t_load, t_plain_read / t_load,
              std::max(0.0, (t_load - t_plain_read) / n * 1e6));
  std::printf("lazy open      %.2f ms (%.2f us per tensor); verify (all checksums) %7.0f MiB/s\n", t_open * 1e3,
              t_open / n * 1e6, mib / t_verify);
}

}  // namespace

int bench_file_main(int argc, char** argv);
int bench_manager_main(int argc, char** argv);
int bench_huge_pages_main(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "file") return bench_file_main(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "manager") return bench_manager_main(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "huge-pages") return bench_huge_pages_main(argc, argv);
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "ckpt-bench";
  int repeats = 3;
  double gib = 1.0;
  unsigned threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--repeats") repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--gib") gib = std::atof(argv[i + 1]);
    else if (flag == "--threads") threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
  }
  std::filesystem::create_directories(dir);
  std::printf("ckpt bench: ratios are ckpt / plain C I/O throughput (best of %d), in %s\n", repeats, dir.c_str());
  try {
    const auto big_elements = static_cast<int64_t>(gib * (1 << 30) / 100 / 4);
    run(make_workload("large state", 100, big_elements), dir, repeats, threads);
    run(make_workload("many tensors", 10000, 2560), dir, repeats, threads);
  } catch (const ckpt::Error& error) {
    std::fprintf(stderr, "bench: %s\n", error.what());
    return 1;
  }
  std::filesystem::remove_all(dir);
  return 0;
}
