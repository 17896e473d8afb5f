// The checkpoint manager's costs to a training loop (issue 16), run by hand:
//
//   build/ckpt_bench manager [--dir DIR] [--mib N] [--repeats N] [--steps N] [--work W]
//
// 1. The caller's wait: an asynchronous save (the snapshot of the state)
//    against a blocking save against one memcpy of the state's bytes.
// 2. Dedup: re-saving a state that is byte for byte the previous one (the
//    file is hard-linked) and one that is 90 % unchanged against a full
//    save (dedup off): the frozen 90 % in the same file (dedup works on
//    whole files, so this is a full save plus the digest), and in a part of
//    its own (Manager::save with StateParts, as per-module files do: only
//    the trained part is written, the frozen one linked).
// 3. A loop of N steps, each touching every weight W times (a stand-in for
//    a training step; W = 1 makes the step far shorter than a save, so the
//    loop waits for the writer; the default W = 16 makes it a little longer
//    than one) and saving asynchronously, against the same loop with no
//    saves.
//    The full save compared with is the faster of the two full writes (dedup
//    off, and the 90 %-frozen state in one file). In the same run, the
//    limits of the part's re-save, as ratios to it: a plain write() + fsync
//    of the trained part's bytes to a new file, and ckpt's own save of the
//    trained part alone (the re-save cannot be cheaper than writing what
//    changed).
// 4. The loop again with a step as training has it: compute in cache, then
//    one update of every weight.
// Best of --repeats (default 3); fsync on, as the manager's default.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/manager.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& body) {
  const auto start = Clock::now();
  body();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A state of `tensors` float32 tensors, `bytes` in all.
ckpt::Tree make_state(size_t bytes, int tensors) {
  ckpt::Tree tree = ckpt::Tree::map();
  const int64_t elements = static_cast<int64_t>(bytes / 4 / static_cast<size_t>(tensors));
  for (int t = 0; t < tensors; ++t) {
    ckpt::Tensor tensor = ckpt::Tensor::empty(ckpt::DType::kFloat32, {elements});
    auto out = tensor.mutable_bytes();
    for (size_t i = 0; i < out.size(); i += 4) {
      const float value = static_cast<float>(t) + static_cast<float>(i % 4093) * 1e-3f;
      std::memcpy(out.data() + i, &value, 4);
    }
    tree.set("layer" + std::to_string(t) + ".weight", tensor);
  }
  return tree;
}

// Adds `delta` to every weight of the tensors from `first` on: a training step.
void touch(ckpt::Tree& state, float delta, size_t first = 0) {
  size_t index = 0;
  state.for_each_tensor([&](ckpt::Tensor& tensor) {
    if (index++ < first) return;
    auto bytes = tensor.mutable_bytes();
    float* values = reinterpret_cast<float*>(bytes.data());
    for (size_t i = 0; i < bytes.size() / 4; ++i) values[i] += delta;
  });
}

// The state as two parts: "frozen" (the tensors before `first`) and
// "trained" (the rest), sharing the state's tensors.
std::vector<ckpt::StatePart> split(const ckpt::Tree& state, size_t first) {
  ckpt::Tree frozen = ckpt::Tree::map(), trained = ckpt::Tree::map();
  size_t index = 0;
  state.for_each_tensor_leaf([&](std::string_view name, const ckpt::Tree& leaf) {
    (index++ < first ? frozen : trained).set(std::string(name), leaf);
  });
  return {{.name = "frozen", .state = std::move(frozen)}, {.name = "trained", .state = std::move(trained)}};
}

// Writes the bytes of the tensors from `first` on to a new file at `path`
// with plain write() calls, then fsync: what a durable write of them costs
// with no format, no checksum and no commit. Throws on failure.
void plain_durable_write(const ckpt::Tree& state, size_t first, const fs::path& path) {
  fs::remove(path);
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw ckpt::Error(ckpt::ErrorCode::kIo, "cannot create " + path.string());
  bool ok = true;
  size_t index = 0;
  state.for_each_tensor_leaf([&](std::string_view, const ckpt::Tree& leaf) {
    if (index++ < first || !ok) return;
    const auto bytes = leaf.tensor().bytes();
    for (size_t at = 0; at < bytes.size() && ok;) {
      const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
      ok = n > 0;
      at += ok ? static_cast<size_t>(n) : 0;
    }
  });
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw ckpt::Error(ckpt::ErrorCode::kIo, "plain write failed: " + path.string());
}

// Removes `path` and syncs, so that the blocks it freed (discarded on a file
// system mounted with `discard`, at its next journal commit) are not the
// next timed save's to wait for.
void settle_removal(const fs::path& path) {
  fs::remove_all(path);
  ::sync();
}

size_t state_bytes(const ckpt::Tree& state) {
  size_t total = 0;
  state.for_each_tensor_leaf([&](std::string_view, const ckpt::Tree& leaf) { total += leaf.tensor().nbytes(); });
  return total;
}

}  // namespace

int bench_manager_main(int argc, char** argv) {
  fs::path dir = fs::temp_directory_path() / "ckpt-bench-manager";
  double mib = 64;
  int repeats = 3;
  int steps = 8;
  int work = 16;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--mib") mib = std::atof(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--steps") steps = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--work") work = std::max(1, std::atoi(argv[i + 1]));
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int kTensors = 20;
  ckpt::Tree state = make_state(static_cast<size_t>(mib * (1 << 20)), kTensors);
  const size_t bytes = state_bytes(state);
  std::printf("ckpt bench manager: %.1f MiB state (%d tensors), best of %d, in %s\n", bytes / 1048576.0, kTensors,
              repeats, dir.c_str());
  try {
    int64_t step = 0;
    // 1. The caller's wait.
    {
      ckpt::Manager manager(dir / "wait", {.keep_last = 1});
      std::vector<std::byte> copy(bytes);
      double async_wait = 1e100, blocking = 1e100, memcpy_time = 1e100;
      for (int r = 0; r < repeats; ++r) {
        memcpy_time = std::min(memcpy_time, seconds_of([&] {
          size_t at = 0;
          state.for_each_tensor_leaf([&](std::string_view, const ckpt::Tree& leaf) {
            std::memcpy(copy.data() + at, leaf.tensor().bytes().data(), leaf.tensor().nbytes());
            at += leaf.tensor().nbytes();
          });
        }));
        touch(state, 1e-3f);
        async_wait = std::min(async_wait, seconds_of([&] { manager.save(++step, state, {.blocking = false}); }));
        manager.wait();
        touch(state, 1e-3f);
        blocking = std::min(blocking, seconds_of([&] { manager.save(++step, state); }));
        manager.wait();
      }
      manager.close();
      std::printf("  caller's wait: async %.4f s, blocking %.4f s, memcpy %.4f s\n", async_wait, blocking, memcpy_time);
      std::printf("    async / memcpy = %.2f, blocking / async = %.1f\n", async_wait / memcpy_time, blocking / async_wait);
    }
    // 2. Dedup.
    {
      double full = 1e100, unchanged = 1e100, frozen = 1e100, frozen_part = 1e100, plain_trained = 1e100,
             trained_alone = 1e100;
      for (int r = 0; r < repeats; ++r) {
        settle_removal(dir / "trained");
        ckpt::Manager alone(dir / "trained", {.keep_last = 1, .dedup = false});
        const ckpt::Tree trained = split(state, kTensors - kTensors / 10)[1].state;
        alone.save(++step, trained);
        trained_alone = std::min(trained_alone, seconds_of([&] { alone.save(++step, trained); }));
        alone.close();
        settle_removal(dir / "trained");
        plain_trained = std::min(plain_trained, seconds_of([&] {
          plain_durable_write(state, kTensors - kTensors / 10, dir / "plain-trained");
        }));
        fs::remove(dir / "plain-trained");
        settle_removal(dir / "dedup");
        ckpt::Manager plain(dir / "dedup", {.keep_last = 1, .dedup = false});
        plain.save(++step, state);
        full = std::min(full, seconds_of([&] { plain.save(++step, state); }));
        plain.close();
        settle_removal(dir / "dedup");
        ckpt::Manager linking(dir / "dedup", {.keep_last = 1});
        linking.save(++step, state);
        unchanged = std::min(unchanged, seconds_of([&] { linking.save(++step, state); }));
        touch(state, 1e-3f, kTensors - kTensors / 10);  // the last 10 % trained, the rest frozen
        frozen = std::min(frozen, seconds_of([&] { linking.save(++step, state); }));
        linking.close();
        // The same state in two parts (per-module files): the frozen 90 %
        // part is linked, only the trained 10 % written.
        settle_removal(dir / "dedup");
        ckpt::Manager parted(dir / "dedup", {.keep_last = 1});
        parted.save(++step, split(state, kTensors - kTensors / 10));
        touch(state, 1e-3f, kTensors - kTensors / 10);
        frozen_part = std::min(frozen_part, seconds_of([&] { parted.save(++step, split(state, kTensors - kTensors / 10)); }));
        parted.close();
      }
      // Both are full writes of the state (the second also digests it, with
      // dedup on): the faster of the two is the full save compared with.
      const double full_write = std::min(full, frozen);
      std::printf("  re-save: full %.4f s, unchanged (hard link) %.4f s, 90 %% frozen in one file %.4f s, "
                  "in a part of its own %.4f s\n", full, unchanged, frozen, frozen_part);
      std::printf("    full / unchanged = %.1f, 90%%-frozen one file / full = %.2f, 90%%-frozen part / full = %.3f\n",
                  full / unchanged, frozen / full, frozen_part / full_write);
      std::printf("    limits: the trained 10 %% alone: plain write() + fsync %.4f s (/ full = %.3f), ckpt's save "
                  "%.4f s (/ full = %.3f)\n",
                  plain_trained, plain_trained / full_write, trained_alone, trained_alone / full_write);
    }
    // 3. A loop saving every step, asynchronously, against no saves.
    {
      double without = 1e100, with = 1e100;
      for (int r = 0; r < repeats; ++r) {
        without = std::min(without, seconds_of([&] {
          for (int s = 0; s < steps; ++s) {
            for (int w = 0; w < work; ++w) touch(state, 1e-3f);
          }
        }));
        fs::remove_all(dir / "loop");
        ckpt::Manager manager(dir / "loop", {.keep_last = 2});
        with = std::min(with, seconds_of([&] {
          for (int s = 0; s < steps; ++s) {
            for (int w = 0; w < work; ++w) touch(state, 1e-3f);
            manager.save(++step, state, {.blocking = false});
          }
          manager.wait();
        }));
        manager.close();
      }
      std::printf("  %d steps of %d touches: no saves %.4f s, async save every step %.4f s (ratio %.2f)\n", steps,
                  work, without, with, with / without);
    }
    // 4. The same with a step as training has it: compute in cache (a small
    //    matrix product, repeated), then one update of every weight (the
    //    optimizer's pass over the state). The touches above stream the
    //    whole state through memory W times, competing with the writer for
    //    memory bandwidth; this step leaves the bandwidth to the writer.
    {
      const auto compute = [](int products) {
        constexpr int n = 64;
        static std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
        for (int p = 0; p < products; ++p) {
          for (int i = 0; i < n; ++i) {
            for (int k = 0; k < n; ++k) {
              const float x = a[i * n + k];
              for (int j = 0; j < n; ++j) c[i * n + j] += x * b[k * n + j];
            }
          }
          a[p % (n * n)] = c[p % (n * n)] * 1e-6f;
        }
        return c[0];
      };
      // As many products as make the compute ~2 blocking saves' time.
      const double one = std::max(1e-7, seconds_of([&] { compute(200); }) / 200);
      const int products = static_cast<int>(std::max(1.0, 2 * 0.15 / one));
      double without = 1e100, with = 1e100;
      float sink = 0;
      for (int r = 0; r < repeats; ++r) {
        without = std::min(without, seconds_of([&] {
          for (int s = 0; s < steps; ++s) {
            sink += compute(products);
            touch(state, 1e-3f);
          }
        }));
        fs::remove_all(dir / "loop");
        ckpt::Manager manager(dir / "loop", {.keep_last = 2});
        with = std::min(with, seconds_of([&] {
          for (int s = 0; s < steps; ++s) {
            sink += compute(products);
            touch(state, 1e-3f);
            manager.save(++step, state, {.blocking = false});
          }
          manager.wait();
        }));
        manager.close();
      }
      std::printf("  %d steps of compute (%d 64x64 products) + one update: no saves %.4f s, async save every step "
                  "%.4f s (ratio %.2f)%s\n",
                  steps, products, without, with, with / without, sink == 12345 ? " " : "");
    }
  } catch (const ckpt::Error& error) {
    std::fprintf(stderr, "bench: %s\n", error.what());
    return 1;
  }
  fs::remove_all(dir);
  return 0;
}
