#include "core/huge_pages.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <string>
#include <vector>

namespace ckpt::detail {
namespace {

constexpr int kHugeOrder = 9;  // 2 MiB in 4 KiB pages
constexpr uint64_t kPage = 4096;

std::string_view next_word(std::string_view& text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == ',')) text.remove_prefix(1);
  size_t end = 0;
  while (end < text.size() && text[end] != ' ' && text[end] != '\t' && text[end] != ',') ++end;
  const std::string_view word = text.substr(0, end);
  text.remove_prefix(end);
  return word;
}

}  // namespace

HugePagePolicy huge_page_policy_from(const char* value) {
  if (value == nullptr) return HugePagePolicy::kAuto;
  const std::string_view text(value);
  if (text == "1" || text == "always") return HugePagePolicy::kAlways;
  if (text == "0" || text == "never") return HugePagePolicy::kNever;
  return HugePagePolicy::kAuto;
}

std::optional<uint64_t> free_huge_bytes(std::string_view buddyinfo) {
  uint64_t total = 0;
  bool any = false;
  while (!buddyinfo.empty()) {
    const size_t end = buddyinfo.find('\n');
    std::string_view line = buddyinfo.substr(0, end);
    buddyinfo.remove_prefix(end == std::string_view::npos ? buddyinfo.size() : end + 1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    // "Node", the node, "zone", the zone's name, then a count per order.
    if (next_word(line) != "Node" || next_word(line).empty() || next_word(line) != "zone" ||
        next_word(line).empty()) {
      return std::nullopt;
    }
    for (int order = 0;; ++order) {
      const std::string_view word = next_word(line);
      if (word.empty()) break;
      uint64_t count = 0;
      const auto [rest, error] = std::from_chars(word.data(), word.data() + word.size(), count);
      if (error != std::errc() || rest != word.data() + word.size() || order > 20) return std::nullopt;
      if (order >= kHugeOrder) total += count * (kPage << order);
    }
    any = true;
  }
  if (!any) return std::nullopt;
  return total;
}

bool balloon_reports_free_pages(std::string_view features) {
  constexpr size_t kReportingBit = 5;
  return features.size() > kReportingBit && features[kReportingBit] == '1';
}

bool advise_huge_pages(HugePagePolicy policy, size_t size, bool free_pages_reported,
                       std::optional<uint64_t> free_huge) {
  switch (policy) {
    case HugePagePolicy::kAlways: return true;
    case HugePagePolicy::kNever: return false;
    case HugePagePolicy::kAuto: break;
  }
  if (free_pages_reported) return false;
  return !free_huge || *free_huge >= size;
}

namespace {

// Whether a balloon device of this machine reports free pages to its host.
bool machine_reports_free_pages() {
  std::error_code error;
  const std::filesystem::path drivers("/sys/bus/virtio/drivers/virtio_balloon");
  for (std::filesystem::directory_iterator it(drivers, error), end; !error && it != end; it.increment(error)) {
    if (!it->path().filename().string().starts_with("virtio")) continue;
    std::ifstream in(it->path() / "features");
    std::string features;
    if (std::getline(in, features) && balloon_reports_free_pages(features)) return true;
  }
  return false;
}

}  // namespace

bool advise_huge_pages_now(size_t size) {
  static const HugePagePolicy policy = huge_page_policy_from(std::getenv("CKPT_THP"));
  if (policy != HugePagePolicy::kAuto) return advise_huge_pages(policy, size, false, std::nullopt);
  static const bool reported = machine_reports_free_pages();
  if (reported) return false;
  // /proc/buddyinfo is a few hundred bytes; read with one read().
  std::optional<uint64_t> free_huge;
  const int fd = ::open("/proc/buddyinfo", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char text[4096];
    const ssize_t got = ::read(fd, text, sizeof text);
    ::close(fd);
    if (got > 0 && static_cast<size_t>(got) < sizeof text) free_huge = free_huge_bytes({text, static_cast<size_t>(got)});
  }
  return advise_huge_pages(policy, size, false, free_huge);
}

}  // namespace ckpt::detail
