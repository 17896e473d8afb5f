#pragma once
// A one-line progress bar on stderr (bytes, rate, ETA) for downloads and
// long conversions, redrawn at most ten times a second. Knows no format.

#include <chrono>
#include <cstdint>
#include <string>

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

// "12.3 MiB": `bytes` in binary units, three significant digits.
std::string human_bytes(double bytes);

}  // namespace ckpt::detail
