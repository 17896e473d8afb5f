#pragma once
// The arithmetic that weight norm's converters (weight_norm.cc) and the
// formula evaluator (formula.cc) share, each rule once: values as float64,
// torch's except-dim convention, sums of squares over all dims but one.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/tensor.h"

namespace ckpt::detail {

// float16, bfloat16, float32, float64: the dtypes weight norm computes on.
bool weight_norm_float(DType dtype);

// The elements of `tensor` as float64 (ckpt::cast; exact for those dtypes).
std::vector<double> float64_values(const Tensor& tensor);

// A tensor of `dtype` holding `values` (shape `shape`), rounded by ckpt::cast.
Tensor tensor_from_float64(const std::vector<double>& values, const Shape& shape, DType dtype);

// torch's dim for a tensor of `ndim` dimensions, as norm_except_dim takes
// it: -1 stays -1 (every dimension); other negative values count from the
// end. nullopt if out of range (and for any dim but -1 of a 0-d tensor).
std::optional<int64_t> except_dim(int64_t dim, size_t ndim);

// The shape of norm_except_dim's result: size 1 in every dimension of
// `shape` but `dim` (normalized, except_dim); [] for -1.
Shape except_dim_shape(const Shape& shape, int64_t dim);

// The sums of the squares of `values` (row-major, shape `shape`) over every
// dimension but `dim` (normalized; -1: all), one per index of `dim` (one for
// -1), each summed in row-major order.
std::vector<double> sum_squares_except_dim(std::span<const double> values, const Shape& shape, int64_t dim);

}  // namespace ckpt::detail
