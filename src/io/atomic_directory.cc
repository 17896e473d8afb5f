#include "io/atomic_directory.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <system_error>

#include "ckpt/error.h"
#include "io/deferred_release.h"
#include "io/file_system.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;

// Removes `path` and everything under it; errors are ignored.
void remove_quietly(const fs::path& path) noexcept {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

// Opens the directory `path` (never through a symbolic link); -1 if it
// cannot.
int open_directory(const fs::path& path) {
  return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

// Closes `fd` if open; never throws.
void close_quietly(int& fd) noexcept {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// A descriptor closed on scope exit.
struct Descriptor {
  int fd = -1;
  Descriptor() = default;
  explicit Descriptor(int opened) : fd(opened) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() { close_quietly(fd); }
};

}  // namespace

AtomicDirectory::AtomicDirectory(fs::path final_path, AtomicDirectoryOptions options)
    : final_path_(std::move(final_path)), options_(options) {
  if (final_path_.filename().empty()) {
    throw Error(ErrorCode::kInvalidArgument, "not a directory path (it has no name)", {.path = final_path_});
  }
  remove_abandoned_temporaries(final_path_);
  for (int attempt = 0; attempt < 16; ++attempt) {
    const fs::path candidate = temporary_sibling(final_path_);
    if (::mkdir(candidate.c_str(), 0755) == 0) {
      const int fd = open_directory(candidate);
      if (fd < 0 && errno == ENOENT) continue;  // a cleaner took it before the lock: draw another name
      if (fd < 0) {
        const int failure = errno;
        ::rmdir(candidate.c_str());
        throw_io(final_path_, "cannot open the temporary directory", failure);
      }
      if (claim_temporary(fd, candidate) == Claim::kLost) {
        ::close(fd);  // a cleaner removes (or removed) it
        continue;
      }
      temp_path_ = candidate;
      lock_fd_ = fd;
      return;
    }
    if (errno == ENOENT) {
      throw Error(ErrorCode::kNotFound, "the parent directory does not exist", {.path = final_path_});
    }
    if (errno != EEXIST) throw_io(final_path_, "cannot create the temporary directory", errno);
  }
  throw Error(ErrorCode::kIo, "cannot create a unique temporary directory", {.path = final_path_});
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_ && !temp_path_.empty()) remove_quietly(temp_path_);
  close_quietly(lock_fd_);  // after the removal: a cleaner never takes one in use
}

void AtomicDirectory::sync_contents() const {
  if (!options_.files_synced) return sync_file_system(temp_path_, final_path_);
  // Every directory under the temporary, deepest first, then itself: each
  // entry of a file or subdirectory is durable once its parent is synced.
  std::vector<fs::path> directories;
  std::error_code error;
  for (fs::recursive_directory_iterator it(temp_path_, error), end; !error && it != end; it.increment(error)) {
    std::error_code status_error;
    if (it->is_directory(status_error) && !it->is_symlink(status_error)) directories.push_back(it->path());
  }
  if (error) throw_io(final_path_, "cannot list the new directory to sync it", error.value());
  std::sort(directories.begin(), directories.end(), std::greater<>());
  for (const fs::path& directory : directories) sync_directory(directory, final_path_);
  sync_directory(temp_path_, final_path_);
}

fs::path AtomicDirectory::install() {
  struct stat status;
  if (::lstat(final_path_.c_str(), &status) != 0) {
    if (errno != ENOENT) throw_io(final_path_, "cannot look at the old directory", errno);
    if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
      throw_io(final_path_, "cannot rename the new directory into place", errno);
    }
    return {};
  }
  if (!S_ISDIR(status.st_mode)) {
    throw Error(ErrorCode::kInvalidArgument, "refusing to replace something that is not a directory",
                {.path = final_path_});
  }
  if (::syscall(SYS_renameat2, AT_FDCWD, temp_path_.c_str(), AT_FDCWD, final_path_.c_str(), RENAME_EXCHANGE) == 0) {
    return temp_path_;  // now the old directory
  }
  if (errno != EINVAL && errno != ENOSYS) {
    throw_io(final_path_, "cannot exchange the new directory with the old", errno);
  }
  // No RENAME_EXCHANGE on this file system: the old directory is moved
  // aside under its aside name, then the new one renamed into place.
  const fs::path aside = aside_sibling(final_path_);
  if (::rename(final_path_.c_str(), aside.c_str()) != 0) {
    throw_io(final_path_, "cannot move the old directory aside", errno);
  }
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    const int failure = errno;
    ::rename(aside.c_str(), final_path_.c_str());
    throw_io(final_path_, "cannot rename the new directory into place", failure);
  }
  return aside;
}

void AtomicDirectory::commit() {
  if (committed_) throw Error(ErrorCode::kInvalidArgument, "directory already committed", {.path = final_path_});
  if (options_.fsync) sync_contents();
  // The old directory (if any) stays locked until it is removed, wherever
  // the renames put it; best effort (a concurrent commit may hold it).
  const Descriptor old_lock(open_directory(final_path_));
  if (old_lock.fd >= 0) ::flock(old_lock.fd, LOCK_EX | LOCK_NB);
  const fs::path old = install();
  committed_ = true;
  // The old directory goes only once the rename is durable: a crash before
  // then may leave the old entry in place, which must still hold its files.
  // (A failed sync throws here and leaves the old one under its temporary
  // name, for remove_abandoned_temporaries() to remove.)
  if (options_.fsync) sync_directory(final_path_.parent_path(), final_path_);
  if (!old.empty()) remove_later(old, false);  // freed off this thread (io/deferred_release.h)
  close_quietly(lock_fd_);
}

bool AtomicDirectory::is_temporary(const fs::path& path) {
  return is_temporary_name(path.filename().string());
}

std::vector<fs::path> AtomicDirectory::leftover_temporaries(const fs::path& directory) noexcept {
  std::vector<fs::path> found;
  try {
    std::error_code error;
    for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
      if (is_temporary(it->path())) found.push_back(it->path());
    }
    std::sort(found.begin(), found.end());
  } catch (...) {
    found.clear();
  }
  return found;
}

}  // namespace ckpt::detail
