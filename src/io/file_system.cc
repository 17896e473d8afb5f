#include "io/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <system_error>

#include "ckpt/error.h"
#include "core/text.h"

namespace ckpt::detail {
namespace {

constexpr std::string_view kTemporaryMarker = ".ckpt-tmp-";
constexpr std::string_view kAsideMarker = ".ckpt-old-";
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

bool regular_file_exists(const std::filesystem::path& path) noexcept {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

void throw_io(const std::filesystem::path& path, std::string_view what, int error, std::optional<uint64_t> offset) {
  const ErrorCode code = (error == ENOENT || error == ENOTDIR) ? ErrorCode::kNotFound : ErrorCode::kIo;
  throw Error(code, std::string(what) + ": " + std::strerror(error), {.path = path, .offset = offset});
}

void sync_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io(path, "cannot open the file to sync it", errno);
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0) throw_io(path, "cannot sync the file", error);
}

void sync_directory(const std::filesystem::path& directory, const std::filesystem::path& for_path) {
  sync(directory, for_path, Sync::kDirectory);
}

void sync_file_system(const std::filesystem::path& directory, const std::filesystem::path& for_path) {
  sync(directory, for_path, Sync::kFileSystem);
}

namespace {

std::filesystem::path sibling(const std::filesystem::path& final_path, std::string_view marker) {
  // Built by appending: GCC 12 warns falsely (-Wrestrict) on "." + string.
  std::string name = ".";
  name += final_path.filename().string();
  name += marker;
  name += random_suffix();
  return final_path.parent_path() / name;
}

// The marker of `file_name` if it has the form sibling() gives, else empty.
std::string_view marker_of(std::string_view file_name) {
  const size_t marker_size = kTemporaryMarker.size();
  if (file_name.size() < 1 + marker_size + kSuffixDigits || file_name.front() != '.') return {};
  const std::string_view suffix = file_name.substr(file_name.size() - kSuffixDigits);
  if (suffix.find_first_not_of("0123456789abcdef") != std::string_view::npos) return {};
  const std::string_view marker = file_name.substr(file_name.size() - kSuffixDigits - marker_size, marker_size);
  if (marker == kTemporaryMarker) return kTemporaryMarker;
  if (marker == kAsideMarker) return kAsideMarker;
  return {};
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Opens `path` to lock it: for writing where it can (NFS turns flock into a
// POSIX lock, which needs a descriptor open for writing), a directory for
// reading. Never follows a symbolic link. -1 if it cannot be opened.
int open_to_lock(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd >= 0 || (errno != EISDIR && errno != EACCES)) return fd;
  return ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
}

// Removes the entry `path` if no live writer holds it (see
// remove_abandoned_temporaries); true if it did.
bool remove_if_abandoned(const std::filesystem::path& path, const std::filesystem::path& final_path, bool aside) {
  const int fd = open_to_lock(path);
  if (fd < 0) return false;
  bool removed = false;
  struct stat locked;
  struct stat named;
  struct stat target;
  if (::fstat(fd, &locked) == 0 && (S_ISREG(locked.st_mode) || S_ISDIR(locked.st_mode)) &&
      ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::lstat(path.c_str(), &named) == 0 && same_file(locked, named) &&
      (!aside || ::lstat(final_path.c_str(), &target) == 0)) {
    std::error_code ignored;
    if (S_ISDIR(locked.st_mode)) {
      removed = std::filesystem::remove_all(path, ignored) != static_cast<std::uintmax_t>(-1) && !ignored;
    } else {
      removed = ::unlink(path.c_str()) == 0;
    }
  }
  ::close(fd);  // drops the lock, after the removal
  return removed;
}

}  // namespace

std::filesystem::path temporary_sibling(const std::filesystem::path& final_path) {
  return sibling(final_path, kTemporaryMarker);
}

std::filesystem::path aside_sibling(const std::filesystem::path& final_path) {
  return sibling(final_path, kAsideMarker);
}

bool is_temporary_name(std::string_view file_name) { return !marker_of(file_name).empty(); }

std::optional<std::filesystem::path> temporary_target(const std::filesystem::path& temporary) {
  const std::string file_name = temporary.filename().string();
  const std::string_view marker = marker_of(file_name);
  if (marker.empty()) return std::nullopt;
  const size_t name_size = file_name.size() - 1 - marker.size() - kSuffixDigits;
  if (name_size == 0) return std::nullopt;
  return temporary.parent_path() / file_name.substr(1, name_size);
}

Claim claim_temporary(int fd, const std::filesystem::path& path) noexcept {
  int result;
  do {
    result = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (result != 0 && errno == EINTR);
  if (result != 0) return errno == EWOULDBLOCK ? Claim::kLost : Claim::kUnlocked;
  struct stat opened;
  struct stat named;
  if (::fstat(fd, &opened) != 0 || ::lstat(path.c_str(), &named) != 0 || !same_file(opened, named)) {
    return Claim::kLost;
  }
  return Claim::kLocked;
}

size_t remove_abandoned_temporaries(const std::filesystem::path& final_path) noexcept {
  try {
    const std::string name = final_path.filename().string();
    if (name.empty()) return 0;
    const std::filesystem::path directory = final_path.parent_path();
    if (is_temporary_name(directory.filename().string())) return 0;
    DIR* listing = ::opendir(directory.empty() ? "." : directory.c_str());
    if (listing == nullptr) return 0;
    std::vector<std::string> candidates;
    while (const dirent* entry = ::readdir(listing)) {
      const std::string_view entry_name = entry->d_name;
      // ".<name><marker><16 hex>" for this exact name: the length pins it.
      if (entry_name.size() == 1 + name.size() + kTemporaryMarker.size() + kSuffixDigits &&
          entry_name.substr(1, name.size()) == name && !marker_of(entry_name).empty()) {
        candidates.emplace_back(entry_name);
      }
    }
    ::closedir(listing);
    size_t removed = 0;
    for (const std::string& candidate : candidates) {
      const bool aside = marker_of(candidate) == kAsideMarker;
      if (remove_if_abandoned(directory / candidate, final_path, aside)) ++removed;
    }
    return removed;
  } catch (...) {
    return 0;
  }
}

}  // namespace ckpt::detail
