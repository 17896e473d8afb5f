#pragma once
// A one-line progress bar on stderr (bytes, rate, ETA) for downloads and
// long conversions, redrawn at most ten times a second. Knows no format.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "ckpt/url.h"

namespace ckpt::detail {

// Whether `mode` draws: kAlways / kNever as they say; kAuto: the
// environment's CKPT_PROGRESS ("1"/"true"/"on" draw, "0"/"false"/"off" do
// not), else only when stderr is a terminal.
bool progress_enabled(Progress mode);

class ProgressBar {
 public:
  // `label`: what is moving (a file name). Draws nothing unless `enabled`.
  ProgressBar(std::string label, bool enabled);
  // Ends the line if one was drawn.
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` bytes of `total` (0: unknown); redraws if 100 ms have passed.
  void update(uint64_t done, uint64_t total);
  // Draws the final state and ends the line.
  void finish();

 private:
  void draw(uint64_t done, uint64_t total);
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  uint64_t first_ = 0;  // `done` at the first update: the rate counts what moved here
  bool started_ = false;
  uint64_t done_ = 0;
  uint64_t total_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

// A ProgressBar redrawn by a thread of its own from `done()` (bytes so far)
// while the owner works (a conversion, whose writers report nothing): from
// construction to destruction, which draws the final state.
class ProgressWatch {
 public:
  ProgressWatch(std::string label, bool enabled, uint64_t total, std::function<uint64_t()> done);
  ~ProgressWatch();
  ProgressWatch(const ProgressWatch&) = delete;
  ProgressWatch& operator=(const ProgressWatch&) = delete;

 private:
  ProgressBar bar_;
  uint64_t total_;
  std::function<uint64_t()> done_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// "12.3 MiB": `bytes` in binary units, three significant digits.
std::string human_bytes(double bytes);

}  // namespace ckpt::detail
