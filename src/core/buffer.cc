#include "ckpt/buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "ckpt/error.h"

namespace ckpt {
namespace {

constexpr size_t kHeapAlignment = 64;
// Blocks this large are 2 MiB aligned and asked to be backed by huge pages:
// 512 times fewer page faults when a large tensor is first written.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeFrom = size_t{8} << 20;

class HeapStorage final : public Storage {
 public:
  explicit HeapStorage(size_t size) {
    // aligned_alloc needs a size that is a multiple of the alignment (and > 0).
    const size_t alignment = size >= kHugeFrom ? kHugePage : kHeapAlignment;
    const size_t rounded = (size + alignment - 1) / alignment * alignment;
    data_ = static_cast<std::byte*>(std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded));
    if (data_ == nullptr) throw std::bad_alloc();
    if (alignment == kHugePage) ::madvise(data_, rounded, MADV_HUGEPAGE);  // advice only; failure is harmless
  }
  ~HeapStorage() override { std::free(data_); }
  StorageKind kind() const override { return StorageKind::kHeap; }
  std::byte* data() const { return data_; }

 private:
  std::byte* data_;
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
  auto storage = std::make_shared<HeapStorage>(size);
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
