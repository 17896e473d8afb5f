#include "io/file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "ckpt/error.h"
#include "core/text.h"

namespace ckpt::detail {
namespace {

constexpr std::string_view kTemporaryMarker = ".ckpt-tmp-";
constexpr size_t kSuffixDigits = 16;

std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  const uint64_t value = (uint64_t{device()} << 32) ^ device() ^ (counter++ << 8) ^ static_cast<uint64_t>(::getpid());
  return hex_digits(value, kSuffixDigits);
}

enum class Sync { kDirectory, kFileSystem };

void sync(const std::filesystem::path& directory, const std::filesystem::path& for_path, Sync what) {
  const int fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io(for_path, "cannot open directory to sync it", errno);
  const int result = what == Sync::kFileSystem ? ::syncfs(fd) : ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0 && error != EINVAL) throw_io(for_path, "cannot sync directory", error);
}

}  // namespace

void throw_io(const std::filesystem::path& path, std::string_view what, int error, std::optional<uint64_t> offset) {
  const ErrorCode code = (error == ENOENT || error == ENOTDIR) ? ErrorCode::kNotFound : ErrorCode::kIo;
  throw Error(code, std::string(what) + ": " + std::strerror(error), {.path = path, .offset = offset});
}

void sync_directory(const std::filesystem::path& directory, const std::filesystem::path& for_path) {
  sync(directory, for_path, Sync::kDirectory);
}

void sync_file_system(const std::filesystem::path& directory, const std::filesystem::path& for_path) {
  sync(directory, for_path, Sync::kFileSystem);
}

std::filesystem::path temporary_sibling(const std::filesystem::path& final_path) {
  // Built by appending: GCC 12 warns falsely (-Wrestrict) on "." + string.
  std::string name = ".";
  name += final_path.filename().string();
  name += kTemporaryMarker;
  name += random_suffix();
  return final_path.parent_path() / name;
}

bool is_temporary_name(std::string_view file_name) {
  if (file_name.size() < 1 + kTemporaryMarker.size() + kSuffixDigits || file_name.front() != '.') return false;
  const std::string_view suffix = file_name.substr(file_name.size() - kSuffixDigits);
  const std::string_view marker =
      file_name.substr(file_name.size() - kSuffixDigits - kTemporaryMarker.size(), kTemporaryMarker.size());
  return marker == kTemporaryMarker && suffix.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace ckpt::detail
