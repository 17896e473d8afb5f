#pragma once
// Buffer: a view of bytes that keeps the memory it views alive.
//
// A Buffer is cheap to copy (a reference count). The memory behind it is
// owned by a Storage: heap memory that ckpt allocated, a region of a mapped
// file, or memory lent by a caller (numpy, torch) with a release callback.
// The last Buffer that views a Storage releases it.
//
// A deferred Buffer (see deferred()) has no address until its bytes are first
// asked for: its storage produces them then, once (a non-contiguous view of
// a torch storage is gathered into contiguous memory only when used).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace ckpt {

enum class StorageKind { kHeap, kMapped, kLent, kDeferred };

// Owner of one contiguous block of memory. Subclasses release the memory in
// their destructor.
class Storage {
 public:
  virtual ~Storage() = default;
  virtual StorageKind kind() const = 0;
  // Copies `dst.size()` bytes starting at `src` (which lies inside this
  // storage) into `dst`. File-backed storages override this to read from the
  // file with positioned reads, which is faster than faulting the mapping in.
  virtual void copy_out(const std::byte* src, std::span<std::byte> dst) const;
  // As copy_out, for bytes read on their own, their neighbours not read next
  // (a box of a tensor, a part of a shard): file-backed storages read these
  // bytes only, without the readahead that serves sequential reads (which
  // on a disk with a large read_ahead_kb reads megabytes past them). By
  // default copy_out.
  virtual void copy_out_alone(const std::byte* src, std::span<std::byte> dst) const { copy_out(src, dst); }
  // Deferred storages: produces the bytes (once, thread-safe) and returns
  // their address. Others return nullptr. May throw Error{kUnsupported}
  // (not enough memory, see Buffer::allocate), or Error{kCorrupt} where
  // producing them decodes file data (Orbax's zstd chunks, decoded on first
  // use).
  virtual const std::byte* materialize() const { return nullptr; }
};

class Buffer {
 public:
  // An empty buffer (size 0, no storage).
  Buffer() = default;

  // Heap memory of `size` bytes, 64-byte aligned, uninitialized, writable.
  // Throws Error{kUnsupported} (naming the size) when `size` exceeds the
  // machine's memory (RAM and swap: with overcommit such a block would be
  // handed out, then the process killed as it is filled) or the system
  // refuses the allocation; never std::bad_alloc.
  static Buffer allocate(size_t size);
  // As allocate(), the bytes zero. A large block comes from the system's
  // zero pages, so the parts of it never written cost no memory.
  static Buffer allocate_zeroed(size_t size);
  // Heap memory holding a copy of `bytes`.
  static Buffer copy_of(std::span<const std::byte> bytes);
  // Memory owned by someone else; `release` runs when the last Buffer viewing
  // it is gone (it may be empty when the caller keeps the memory alive).
  static Buffer lend(std::span<const std::byte> bytes, std::function<void()> release);
  // A view of `bytes`, which must lie inside `storage`.
  static Buffer view(std::shared_ptr<const Storage> storage, std::span<const std::byte> bytes);
  // `size` bytes that `storage` (kind kDeferred) produces on first use; until
  // then copy_to() hands the work to the storage's copy_out(nullptr, dst).
  static Buffer deferred(std::shared_ptr<const Storage> storage, size_t size);

  // The bytes' address; a deferred buffer materializes here.
  const std::byte* data() const { return data_ != nullptr || size_ == 0 ? data_ : storage_->materialize(); }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::span<const std::byte> bytes() const { return {data(), size_}; }
  // True until a deferred buffer's bytes are asked for through this Buffer.
  bool deferred() const noexcept { return data_ == nullptr && size_ != 0; }
  // The address without materializing (nullptr for a deferred buffer).
  const std::byte* address() const noexcept { return data_; }

  // Writable access; only heap buffers that ckpt allocated are writable.
  // Throws Error{kInvalidArgument} for mapped or lent memory.
  std::span<std::byte> mutable_bytes();
  bool writable() const noexcept;

  // The bytes [offset, offset + size) of this buffer, sharing its storage.
  // Throws Error{kInvalidArgument} if the range does not lie inside.
  Buffer slice(size_t offset, size_t size) const;

  // Copies the bytes into `dst` (dst.size() must equal size()), by the
  // fastest path the storage has (positioned reads for mapped files).
  void copy_to(std::span<std::byte> dst) const;

  // Heap, mapped or lent; kHeap for an empty buffer.
  StorageKind kind() const noexcept;
  const std::shared_ptr<const Storage>& storage() const noexcept { return storage_; }

 private:
  Buffer(std::shared_ptr<const Storage> storage, const std::byte* data, size_t size)
      : storage_(std::move(storage)), data_(data), size_(size) {}

  std::shared_ptr<const Storage> storage_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ckpt
