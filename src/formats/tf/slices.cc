#include "formats/tf/slices.h"

#include <cstring>

namespace ckpt::tf_detail {

std::optional<std::string> slice_key_name(std::string_view key) {
  // OrderedCode::WriteNumIncreasing(0) is the single byte 0; WriteString
  // escapes 0x00 as 00 ff and 0xff as ff 00 and ends with 00 01.
  if (!is_slice_key(key)) return std::nullopt;
  std::string name;
  for (size_t i = 1; i < key.size(); ++i) {
    const auto byte = static_cast<unsigned char>(key[i]);
    if (byte != 0x00 && byte != 0xff) {
      name.push_back(key[i]);
      continue;
    }
    if (i + 1 >= key.size()) return std::nullopt;
    const auto next = static_cast<unsigned char>(key[++i]);
    if (byte == 0x00 && next == 0x01) return name;
    if (byte == 0x00 && next == 0xff) {
      name.push_back('\0');
    } else if (byte == 0xff && next == 0x00) {
      name.push_back('\xff');
    } else {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

namespace {

void copy_block(std::byte* full, const std::byte*& part, const Shape& shape, const SliceSpec& slice,
                const std::vector<uint64_t>& strides, size_t dim, size_t element_size) {
  const int64_t start = slice[dim].start;
  const int64_t length = slice[dim].length < 0 ? shape[dim] : slice[dim].length;
  std::byte* base = full + static_cast<uint64_t>(start) * strides[dim];
  if (dim + 1 == shape.size()) {
    const size_t bytes = static_cast<size_t>(length) * element_size;
    std::memcpy(base, part, bytes);
    part += bytes;
    return;
  }
  for (int64_t i = 0; i < length; ++i) {
    copy_block(base + static_cast<uint64_t>(i) * strides[dim], part, shape, slice, strides, dim + 1, element_size);
  }
}

}  // namespace

void copy_slice(std::span<std::byte> full, const Shape& shape, size_t element_size, const SliceSpec& slice,
                std::span<const std::byte> part) {
  if (shape.empty()) {
    std::memcpy(full.data(), part.data(), part.size());
    return;
  }
  std::vector<uint64_t> strides(shape.size());
  uint64_t stride = element_size;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= static_cast<uint64_t>(shape[d]);
  }
  const std::byte* cursor = part.data();
  copy_block(full.data(), cursor, shape, slice, strides, 0, element_size);
}

}  // namespace ckpt::tf_detail
