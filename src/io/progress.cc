#include "io/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace ckpt::detail {

bool progress_enabled(Progress mode) {
  if (mode == Progress::kAlways) return true;
  if (mode == Progress::kNever) return false;
  if (const char* value = std::getenv("CKPT_PROGRESS"); value != nullptr && *value != '\0') {
    const std::string_view text(value);
    if (text == "1" || text == "true" || text == "on" || text == "yes") return true;
    if (text == "0" || text == "false" || text == "off" || text == "no") return false;
  }
  return ::isatty(STDERR_FILENO) == 1;
}

std::string human_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  while (bytes >= 1024 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%.0f %s", bytes, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, bytes < 10 ? "%.2f %s" : bytes < 100 ? "%.1f %s" : "%.0f %s", bytes, kUnits[unit]);
  }
  return text;
}

ProgressBar::ProgressBar(std::string label, bool enabled) : label_(std::move(label)), enabled_(enabled) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputc('\n', stderr);
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    first_ = done;
    start_ = now;
    last_ = now - std::chrono::seconds(1);
  }
  done_ = done;
  total_ = total;
  if (now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  draw(done, total);
}

void ProgressBar::finish() {
  if (!enabled_ || !started_) return;
  draw(done_, total_);
  std::fputc('\n', stderr);
  drawn_ = false;
  enabled_ = false;
}

void ProgressBar::draw(uint64_t done, uint64_t total) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done - first_) / seconds : 0;
  std::string line = "\r" + label_ + "  " + human_bytes(static_cast<double>(done));
  if (total > 0) {
    line += " / " + human_bytes(static_cast<double>(total));
    char percent[16];
    std::snprintf(percent, sizeof percent, "  %3.0f%%", 100.0 * static_cast<double>(done) / static_cast<double>(total));
    line += percent;
  }
  line += "  " + human_bytes(rate) + "/s";
  if (total > done && rate > 0) {
    char eta[32];
    std::snprintf(eta, sizeof eta, "  ETA %.0f s", static_cast<double>(total - done) / rate);
    line += eta;
  }
  line += "    ";  // covers the tail of a longer line before
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

ProgressWatch::ProgressWatch(std::string label, bool enabled, uint64_t total, std::function<uint64_t()> done)
    : bar_(std::move(label), enabled), total_(total), done_(std::move(done)) {
  if (!enabled) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      bar_.update(std::min(done_(), total_), total_);
      wake_.wait_for(lock, std::chrono::milliseconds(100));
    }
    bar_.update(std::min(done_(), total_), total_);
    bar_.finish();
  });
}

ProgressWatch::~ProgressWatch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard guard(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

}  // namespace ckpt::detail
