#pragma once
// MappedFile: a whole file mapped privately (copy on write: writes through
// the mapping never reach the file), kept alive by the Buffers that view it.
// ckpt itself only reads it. Knows no format.

#include <cstdint>
#include <filesystem>
#include <memory>
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

  const std::filesystem::path& path() const { return path_; }
  uint64_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

  // A Buffer over [offset, offset + size). Throws Error{kCorrupt} naming the
  // file and offset if the range does not lie inside the file.
  Buffer slice(uint64_t offset, uint64_t size) const;

 private:
  MappedFile() = default;
  std::filesystem::path path_;
  int fd_ = -1;
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
