#include "ckpt/buffer.h"

#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "ckpt/error.h"
#include "core/huge_pages.h"

namespace ckpt {
namespace {

constexpr size_t kHeapAlignment = 64;
// Blocks this large are 2 MiB aligned and, where huge pages are free (see
// core/huge_pages.h), asked to be backed by them: 512 times fewer page
// faults when a large tensor is first written.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeFrom = size_t{8} << 20;

// The machine's memory, RAM and swap (the most any allocation can be backed
// by); the largest size_t when the system does not say.
uint64_t machine_memory() {
  struct sysinfo info {};
  if (::sysinfo(&info) != 0) return std::numeric_limits<uint64_t>::max();
  return (static_cast<uint64_t>(info.totalram) + info.totalswap) * info.mem_unit;
}

std::string gib_text(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / double(uint64_t{1} << 30));
  return text;
}

[[noreturn]] void refuse(size_t size, const std::string& why) {
  throw Error(ErrorCode::kUnsupported,
              "cannot allocate " + std::to_string(size) + " bytes (" + gib_text(size) + ") in memory: " + why);
}

class HeapStorage final : public Storage {
 public:
  // `zeroed`: the bytes read as zero. A large zeroed block is mapped
  // anonymously: the system's zero pages back it until a page is written,
  // so the parts never written cost no memory.
  HeapStorage(size_t size, bool zeroed) {
    // Checked first: with overcommit a block larger than the machine is
    // handed out, and the process is killed while filling it.
    if (size >= kHugeFrom) {
      const uint64_t memory = machine_memory();
      if (size > memory) refuse(size, "more than this machine's " + gib_text(memory) + " of RAM and swap");
    }
    // aligned_alloc needs a size that is a multiple of the alignment (and > 0).
    const size_t alignment = size >= kHugeFrom ? kHugePage : kHeapAlignment;
    if (size > std::numeric_limits<size_t>::max() - alignment) refuse(size, "larger than the address space");
    const size_t rounded = (size + alignment - 1) / alignment * alignment;
    if (zeroed && size >= kHugeFrom) {
      void* mapped = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
      if (mapped == MAP_FAILED) refuse(size, "the system refused (out of memory)");
      data_ = static_cast<std::byte*>(mapped);
      mapped_size_ = rounded;
      return;
    }
    data_ = static_cast<std::byte*>(std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded));
    if (data_ == nullptr) refuse(size, "the system refused (out of memory)");
    if (alignment == kHugePage && detail::advise_huge_pages_now(rounded)) {
      ::madvise(data_, rounded, MADV_HUGEPAGE);  // advice only; failure is harmless
    }
    if (zeroed) std::memset(data_, 0, size);
  }
  ~HeapStorage() override {
    if (mapped_size_ != 0) {
      ::munmap(data_, mapped_size_);
    } else {
      std::free(data_);
    }
  }
  StorageKind kind() const override { return StorageKind::kHeap; }
  std::byte* data() const { return data_; }

 private:
  std::byte* data_;
  size_t mapped_size_ = 0;  // nonzero: an anonymous mapping of this size
};

class LentStorage final : public Storage {
 public:
  explicit LentStorage(std::function<void()> release) : release_(std::move(release)) {}
  ~LentStorage() override {
    if (release_) release_();
  }
  StorageKind kind() const override { return StorageKind::kLent; }

 private:
  std::function<void()> release_;
};

}  // namespace

void Storage::copy_out(const std::byte* src, std::span<std::byte> dst) const {
  if (!dst.empty()) std::memcpy(dst.data(), src, dst.size());
}

Buffer Buffer::allocate(size_t size) {
  auto storage = std::make_shared<HeapStorage>(size, /*zeroed=*/false);
  std::byte* data = storage->data();
  return Buffer(std::move(storage), data, size);
}

Buffer Buffer::allocate_zeroed(size_t size) {
  auto storage = std::make_shared<HeapStorage>(size, /*zeroed=*/true);
  std::byte* data = storage->data();
  return Buffer(std::move(storage), data, size);
}

Buffer Buffer::copy_of(std::span<const std::byte> bytes) {
  Buffer buffer = allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(const_cast<std::byte*>(buffer.data_), bytes.data(), bytes.size());
  return buffer;
}

Buffer Buffer::lend(std::span<const std::byte> bytes, std::function<void()> release) {
  return Buffer(std::make_shared<LentStorage>(std::move(release)), bytes.data(), bytes.size());
}

Buffer Buffer::view(std::shared_ptr<const Storage> storage, std::span<const std::byte> bytes) {
  return Buffer(std::move(storage), bytes.data(), bytes.size());
}

Buffer Buffer::deferred(std::shared_ptr<const Storage> storage, size_t size) {
  if (size == 0) return Buffer();
  return Buffer(std::move(storage), nullptr, size);
}

bool Buffer::writable() const noexcept {
  return storage_ != nullptr && storage_->kind() == StorageKind::kHeap;
}

std::span<std::byte> Buffer::mutable_bytes() {
  if (size_ == 0) return {};
  if (!writable()) {
    throw Error(ErrorCode::kInvalidArgument, "buffer is read-only (mapped or lent memory); copy it first");
  }
  return {const_cast<std::byte*>(data_), size_};
}

Buffer Buffer::slice(size_t offset, size_t size) const {
  if (offset > size_ || size > size_ - offset) {
    throw Error(ErrorCode::kInvalidArgument, "slice [" + std::to_string(offset) + ", +" +
                                                 std::to_string(size) + ") outside a buffer of " +
                                                 std::to_string(size_) + " bytes");
  }
  return Buffer(storage_, data() + offset, size);
}

void Buffer::copy_to(std::span<std::byte> dst) const {
  if (dst.size() != size_) {
    throw Error(ErrorCode::kInvalidArgument, "copy_to: destination holds " + std::to_string(dst.size()) +
                                                 " bytes, buffer " + std::to_string(size_));
  }
  if (size_ == 0) return;
  if (storage_) {
    storage_->copy_out(data_, dst);
  } else {
    std::memcpy(dst.data(), data_, size_);
  }
}

StorageKind Buffer::kind() const noexcept {
  return storage_ ? storage_->kind() : StorageKind::kHeap;
}

}  // namespace ckpt
