// Weight norm's shared arithmetic (weight_norm_math.h).

#include "modules/weight_norm_math.h"

#include <cstring>

#include "ckpt/cast.h"

namespace ckpt::detail {

bool weight_norm_float(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16 || dtype == DType::kFloat32 ||
         dtype == DType::kFloat64;
}

std::vector<double> float64_values(const Tensor& tensor) {
  const Tensor wide = cast(tensor, DType::kFloat64);
  std::vector<double> values(static_cast<size_t>(wide.numel()));
  // Copied bytewise: a float64 tensor is returned as it is, and its mapping
  // need not be aligned for double.
  if (!values.empty()) std::memcpy(values.data(), wide.bytes().data(), values.size() * sizeof(double));
  return values;
}

Tensor tensor_from_float64(const std::vector<double>& values, const Shape& shape, DType dtype) {
  const Tensor wide = Tensor::from_values<double>(DType::kFloat64, shape, std::span<const double>(values));
  return cast(wide, dtype);
}

std::optional<int64_t> except_dim(int64_t dim, size_t ndim) {
  if (dim == -1) return -1;
  const auto rank = static_cast<int64_t>(ndim);
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return std::nullopt;
  return dim;
}

Shape except_dim_shape(const Shape& shape, int64_t dim) {
  if (dim < 0) return {};
  Shape out(shape.size(), 1);
  out[static_cast<size_t>(dim)] = shape[static_cast<size_t>(dim)];
  return out;
}

std::vector<double> sum_squares_except_dim(std::span<const double> values, const Shape& shape, int64_t dim) {
  if (dim < 0) {
    double sum = 0;
    for (const double value : values) sum += value * value;
    return {sum};
  }
  // Row-major: element (outer, j, inner) lies at (outer * size + j) * inner_size + inner.
  const auto axis = static_cast<size_t>(dim);
  const auto size = static_cast<size_t>(shape[axis]);
  size_t inner_size = 1;
  for (size_t i = axis + 1; i < shape.size(); ++i) inner_size *= static_cast<size_t>(shape[i]);
  std::vector<double> sums(size, 0.0);
  if (size == 0 || inner_size == 0) return sums;
  for (size_t index = 0; index < values.size(); ++index) {
    const double value = values[index];
    sums[(index / inner_size) % size] += value * value;
  }
  return sums;
}

}  // namespace ckpt::detail
