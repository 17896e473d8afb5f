#include "formats/tf/slices.h"

#include <vector>

#include "core/box_copy.h"

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

void copy_slice(std::span<std::byte> full, const Shape& shape, size_t element_size, const SliceSpec& slice,
                std::span<const std::byte> part) {
  std::vector<int64_t> start(shape.size()), lengths(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    start[d] = slice[d].start;
    lengths[d] = slice[d].length < 0 ? shape[d] : slice[d].length;
  }
  detail::copy_box({.element_size = element_size, .extent = lengths, .to = full, .to_shape = shape,
                    .to_origin = start, .from = part, .from_shape = lengths});
}

}  // namespace ckpt::tf_detail
