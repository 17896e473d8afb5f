#include "manager/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "ckpt/error.h"
#include "core/text.h"
#include "io/file_system.h"
#include "manager/run_config.h"

namespace ckpt::detail {
namespace {

// What the lock file says about its holder (capped: the file is anyone's to write).
std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  std::string holder = got > 0 ? std::string(text, static_cast<size_t>(got)) : std::string();
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder.empty() ? std::string("an unknown writer") : detail::quoted(holder);
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& run_dir) {
  const std::filesystem::path path = run_dir / kRunLockName;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw_io(path, "cannot open the run directory's lock file", errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      const std::string holder = holder_of(fd_);
      ::close(fd_);
      fd_ = -1;
      throw Error(ErrorCode::kIo, "the run directory has another writer: " + holder, {.path = path});
    }
    // ENOLCK, EOPNOTSUPP: a file system without locks; proceed unlocked.
    if (error != ENOLCK && error != EOPNOTSUPP && error != ENOSYS) {
      ::close(fd_);
      fd_ = -1;
      throw_io(path, "cannot lock the run directory", error);
    }
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const std::string text = "pid " + std::to_string(::getpid()) + " host " + host + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw_io(path, "cannot write the run directory's lock file", error);
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ckpt::detail
