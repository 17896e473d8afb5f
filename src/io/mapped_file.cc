#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ckpt/error.h"

namespace ckpt::detail {
namespace {

[[noreturn]] void throw_errno(const std::filesystem::path& path, std::string_view what, int error) {
  const ErrorCode code = (error == ENOENT || error == ENOTDIR) ? ErrorCode::kNotFound : ErrorCode::kIo;
  throw Error(code, std::string(what) + ": " + std::strerror(error), {.path = path});
}

int open_regular(const std::filesystem::path& path, uint64_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(path, "cannot open", errno);
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    throw_errno(path, "cannot stat", error);
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::kInvalidArgument, "is a directory, not a file", {.path = path});
  }
  size = static_cast<uint64_t>(info.st_size);
  return fd;
}

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->fd_ = open_regular(path, file->size_);
  if (file->size_ > 0) {
    // Private and writable, copy on write: a caller that writes into a loaded
    // tensor (a torch tensor from the Python package) changes its own copy
    // of the page, never the file. MAP_NORESERVE: no commit charge for pages
    // that are only read.
    void* address = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, file->fd_, 0);
    if (address == MAP_FAILED) throw_errno(path, "cannot map", errno);
    file->data_ = static_cast<const std::byte*>(address);
  }
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  if (alone_fd_ >= 0) ::close(alone_fd_);
}

void MappedFile::copy_out(const std::byte* src, std::span<std::byte> dst) const {
  read_range(fd_, src, dst);
}

int MappedFile::alone_fd() const {
  std::call_once(alone_once_, [this] {
    // The same open file, not the path again (which may name another file
    // by now); a descriptor of its own, so that its advice is not the
    // mapping's.
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    const int fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    alone_fd_ = fd;
  });
  return alone_fd_ >= 0 ? alone_fd_ : fd_;
}

void MappedFile::copy_out_alone(const std::byte* src, std::span<std::byte> dst) const {
  read_range(alone_fd(), src, dst);
}

void MappedFile::prefetch_alone(uint64_t offset, uint64_t size) const {
  if (offset >= size_ || size == 0) return;
  ::posix_fadvise(alone_fd(), static_cast<off_t>(offset), static_cast<off_t>(std::min(size, size_ - offset)),
                  POSIX_FADV_WILLNEED);
}

void MappedFile::read_range(int fd, const std::byte* src, std::span<std::byte> dst) const {
  uint64_t offset = static_cast<uint64_t>(src - data_);
  size_t done = 0;
  while (done < dst.size()) {
    const size_t chunk = std::min<size_t>(dst.size() - done, size_t{1} << 30);
    const ssize_t n = ::pread(fd, dst.data() + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The file shrank under us, or the read failed: fall back to the mapping
      // only when the bytes are still there; otherwise report.
      throw Error(ErrorCode::kIo, n < 0 ? std::string("read failed: ") + std::strerror(errno)
                                         : std::string("file shrank while reading"),
                  {.path = path_, .offset = offset + done});
    }
    done += static_cast<size_t>(n);
  }
}

Buffer MappedFile::slice(uint64_t offset, uint64_t size) const {
  if (offset > size_ || size > size_ - offset) {
    throw Error(ErrorCode::kCorrupt,
                "range of " + std::to_string(size) + " bytes extends past the end of the file (" +
                    std::to_string(size_) + " bytes)",
                {.path = path_, .offset = offset});
  }
  return Buffer::view(shared_from_this(), {data_ + offset, static_cast<size_t>(size)});
}

FileHead read_head(const std::filesystem::path& path, size_t limit) {
  FileHead result;
  const int fd = open_regular(path, result.size);
  result.head.resize(std::min<uint64_t>(limit, result.size));
  size_t done = 0;
  while (done < result.head.size()) {
    const ssize_t n = ::pread(fd, result.head.data() + done, result.head.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  result.head.resize(done);
  return result;
}

}  // namespace ckpt::detail
