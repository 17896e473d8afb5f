#pragma once
// MappedFile: a whole file mapped privately (copy on write: writes through
// the mapping never reach the file), kept alive by the Buffers that view it.
// ckpt itself only reads it. Knows no format.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "ckpt/buffer.h"

namespace ckpt::detail {

class MappedFile : public Storage, public std::enable_shared_from_this<MappedFile> {
 public:
  // Opens and maps `path` (an empty file maps to an empty span).
  // Throws Error{kNotFound} if it does not exist, {kIo} if it cannot be
  // opened or mapped, {kInvalidArgument} if it is a directory.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
  ~MappedFile() override;

  StorageKind kind() const override { return StorageKind::kMapped; }
  // Reads with pread() from the open descriptor (no page faults).
  void copy_out(const std::byte* src, std::span<std::byte> dst) const override;
  // Reads with pread() from a second descriptor of the same file, opened on
  // first use and advised POSIX_FADV_RANDOM, so that the kernel reads these
  // bytes and no readahead window past them (the mapping and copy_out keep
  // theirs). Falls back to copy_out where the file cannot be reopened.
  void copy_out_alone(const std::byte* src, std::span<std::byte> dst) const override;
  // Starts reading [offset, offset + size) (clipped to the file) into the
  // page cache through that descriptor, so that faults in the range through
  // the mapping find the pages there and read no window around them. A
  // hint: errors are ignored.
  void prefetch_alone(uint64_t offset, uint64_t size) const;

  const std::filesystem::path& path() const { return path_; }
  uint64_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

  // A Buffer over [offset, offset + size). Throws Error{kCorrupt} naming the
  // file and offset if the range does not lie inside the file.
  Buffer slice(uint64_t offset, uint64_t size) const;

 private:
  MappedFile() = default;
  // copy_out_alone's descriptor (fd_ where it could not be opened).
  int alone_fd() const;
  // pread() of dst.size() bytes at `src` (inside the mapping) from `fd`.
  void read_range(int fd, const std::byte* src, std::span<std::byte> dst) const;
  std::filesystem::path path_;
  int fd_ = -1;
  mutable std::once_flag alone_once_;
  mutable int alone_fd_ = -1;  // copy_out_alone's, -1 until then (or if it cannot be opened)
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

// Reads the first min(limit, file size) bytes of `path`; also returns the size.
struct FileHead {
  std::vector<std::byte> head;
  uint64_t size = 0;
};
FileHead read_head(const std::filesystem::path& path, size_t limit = 4096);

}  // namespace ckpt::detail
