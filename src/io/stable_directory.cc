#include "io/stable_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "ckpt/error.h"
#include "io/file_system.h"

namespace ckpt::detail {
namespace {

// The directory a path names, held open for as long as this lives.
class Pin {
 public:
  explicit Pin(const std::filesystem::path& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) throw_io(path, "cannot open the directory", errno);
    struct stat status {};
    if (::fstat(fd_, &status) != 0) {
      const int error = errno;
      ::close(fd_);
      throw_io(path, "cannot stat the directory", error);
    }
    device_ = status.st_dev;
    inode_ = status.st_ino;
  }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  ~Pin() { ::close(fd_); }

  // True if `path` names the pinned directory now.
  bool still_at(const std::filesystem::path& path) const {
    struct stat status {};
    return ::stat(path.c_str(), &status) == 0 && status.st_dev == device_ && status.st_ino == inode_;
  }

 private:
  int fd_ = -1;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace

void read_stable_directory(const std::filesystem::path& path, const std::function<void()>& read, int attempts) {
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, 1 << std::min(attempt - 1, 7))));
    const Pin pin(path);
    try {
      read();
    } catch (const Error&) {
      if (pin.still_at(path)) throw;
      continue;
    }
    if (pin.still_at(path)) return;
  }
  throw Error(ErrorCode::kIo,
              "the directory was replaced by another save while it was read, " + std::to_string(attempts) +
                  " times in a row",
              {.path = path});
}

}  // namespace ckpt::detail
