#include "core/strided.h"

#include <algorithm>
#include <cstring>

#include "ckpt/error.h"

namespace ckpt::detail {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

bool is_contiguous(const Shape& shape, const std::vector<int64_t>& strides) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

uint64_t checked_view_extent(const StridedLayout& layout) {
  if (layout.strides.size() != layout.shape.size()) {
    throw Error(ErrorCode::kCorrupt, "tensor has " + std::to_string(layout.shape.size()) + " dimensions but " +
                                         std::to_string(layout.strides.size()) + " strides");
  }
  uint64_t last = 0;  // index of the last element relative to offset
  bool empty = false;
  for (size_t i = 0; i < layout.shape.size(); ++i) {
    const int64_t size = layout.shape[i];
    const int64_t stride = layout.strides[i];
    if (size < 0 || stride < 0) throw Error(ErrorCode::kCorrupt, "tensor has a negative size or stride");
    if (size == 0) empty = true;
    if (size > 1) {
      uint64_t step = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(size - 1), static_cast<uint64_t>(stride), &step) ||
          __builtin_add_overflow(last, step, &last)) {
        throw Error(ErrorCode::kCorrupt, "tensor view's extent overflows");
      }
    }
  }
  try {
    checked_numel(layout.shape, layout.element_size);  // the materialized size must fit too
  } catch (const Error& error) {
    throw Error(ErrorCode::kCorrupt, error.message());
  }
  if (empty) return 0;
  const uint64_t storage_elements = layout.base.size() / layout.element_size;
  uint64_t end = 0;
  if (__builtin_add_overflow(layout.offset, last, &end) || end >= storage_elements) {
    throw Error(ErrorCode::kCorrupt,
                "tensor view (offset " + std::to_string(layout.offset) + ", last element " +
                    std::to_string(layout.offset + last) + ") reaches past its storage of " +
                    std::to_string(storage_elements) + " elements");
  }
  return last + 1;
}

Buffer view_buffer(StridedLayout layout) {
  const uint64_t nbytes = checked_numel(layout.shape, layout.element_size) * layout.element_size;
  if (nbytes == 0) return Buffer();
  if (is_contiguous(layout.shape, layout.strides)) {
    return layout.base.slice(layout.offset * layout.element_size, nbytes);
  }
  auto storage = std::make_shared<StridedStorage>(std::move(layout));
  return Buffer::deferred(std::move(storage), nbytes);
}

StridedStorage::StridedStorage(StridedLayout layout)
    : layout_(std::move(layout)),
      nbytes_(checked_numel(layout_.shape, layout_.element_size) * layout_.element_size) {}

void StridedStorage::gather(std::byte* dst) const {
  // An odometer over all dimensions but the last, copying the last one
  // element by element (or in one piece when its stride is 1).
  const size_t ndim = layout_.shape.size();
  const size_t es = layout_.element_size;
  const std::byte* base = layout_.base.data();
  if (ndim == 0) {
    std::memcpy(dst, base + layout_.offset * es, es);
    return;
  }
  const int64_t inner = layout_.shape[ndim - 1];
  const int64_t inner_stride = layout_.strides[ndim - 1];
  std::vector<int64_t> index(ndim, 0);
  uint64_t position = layout_.offset;
  while (true) {
    const std::byte* src = base + position * es;
    if (inner_stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(inner) * es);
      dst += inner * es;
    } else if (inner_stride == 0) {
      // One element repeated (an expand): copies that double what is done.
      const size_t total = static_cast<size_t>(inner) * es;
      if (total != 0) std::memcpy(dst, src, es);
      for (size_t done = es; done < total; done += std::min(done, total - done)) {
        std::memcpy(dst + done, dst, std::min(done, total - done));
      }
      dst += total;
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        std::memcpy(dst, src + static_cast<uint64_t>(j * inner_stride) * es, es);
        dst += es;
      }
    }
    size_t d = ndim - 1;
    while (true) {
      if (d == 0) return;
      --d;
      if (++index[d] < layout_.shape[d]) {
        position += layout_.strides[d];
        break;
      }
      position -= static_cast<uint64_t>(layout_.strides[d] * (layout_.shape[d] - 1));
      index[d] = 0;
    }
  }
}

const std::byte* StridedStorage::materialize() const {
  std::call_once(once_, [this] {
    Buffer buffer;
    try {
      buffer = Buffer::allocate(nbytes_);
    } catch (const Error& error) {
      throw Error(error.code(), "a strided view of shape " + shape_text(layout_.shape) +
                                    " gathered into contiguous memory: " + error.message());
    }
    gather(buffer.mutable_bytes().data());
    materialized_ = std::move(buffer);
  });
  return materialized_.data();
}

void StridedStorage::copy_out(const std::byte* src, std::span<std::byte> dst) const {
  if (src != nullptr) {  // a slice of the materialized bytes
    std::memcpy(dst.data(), src, dst.size());
    return;
  }
  if (dst.size() != nbytes_) {
    throw Error(ErrorCode::kInvalidArgument, "copy_to: destination size differs from the view's");
  }
  gather(dst.data());
}

const StridedLayout* strided_layout(const Buffer& buffer) {
  // A Buffer with an address is (a slice of) the gathered bytes, not the view.
  if (!buffer.deferred() || buffer.storage()->kind() != StorageKind::kDeferred) return nullptr;
  const auto* strided = dynamic_cast<const StridedStorage*>(buffer.storage().get());
  return strided ? &strided->layout() : nullptr;
}

}  // namespace ckpt::detail
