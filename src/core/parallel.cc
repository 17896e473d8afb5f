#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ckpt::detail {

unsigned default_threads() { return std::clamp(std::thread::hardware_concurrency(), 1u, 4u); }

void parallel_for(size_t count, unsigned threads, const std::function<void(size_t, unsigned)>& body) {
  if (threads == 0) threads = default_threads();
  threads = static_cast<unsigned>(std::min<size_t>(threads, count));
  if (threads <= 1) {
    for (size_t i = 0; i < count; ++i) body(i, 0);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto worker = [&](unsigned index) {
    for (size_t i = next++; i < count; i = next++) {
      try {
        body(i, index);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        next = count;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (std::thread& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace ckpt::detail
