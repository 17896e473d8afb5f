#pragma once
// Casting a tensor to another dtype, element by element, the way numpy's
// astype (with ml_dtypes for bfloat16 and float8) converts.

#include "ckpt/dtype.h"
#include "ckpt/tensor.h"

namespace ckpt {

// Returns `tensor`'s values converted to `dtype` in fresh heap memory (the
// tensor itself, shared, when it already has that dtype). Rules:
//  - float to float (float64, float32, float16, bfloat16, float8_e4m3fn,
//    float8_e5m2): round to nearest, ties to even; too large becomes ±inf, or
//    NaN in float8_e4m3fn, which has no infinity; NaN stays NaN (sign kept;
//    bfloat16 and float8 get their one quiet NaN, as in ml_dtypes); subnormals
//    are kept where the target has them. float64 rounds to float16, bfloat16
//    and float8 once, directly (ml_dtypes goes through float32, and that
//    double rounding can differ in the last bit: 1 + 2^-8 + 2^-40 gives
//    bfloat16 0x3F81 here, 0x3F80 there).
//  - integer or bool to float: round to nearest, ties to even, once (also
//    int64 and uint64 to float32, float16, bfloat16 and float8).
//  - float to integer: truncated toward zero; NaN becomes 0 and values
//    outside the target's range saturate at its minimum or maximum (numpy
//    leaves both undefined).
//  - integer to integer: two's complement wrap-around, as numpy's astype.
//  - anything to bool: nonzero (NaN included) is true; bool to a number: 0 or 1.
//  - complex to real: the real part; real to complex: imaginary part 0;
//    complex64 <-> complex128 per component.
// Large tensors are converted on `threads` threads (0: min(hardware, 4)).
// Throws Error{kInvalidArgument} for a tensor without data (Tensor::spec).
Tensor cast(const Tensor& tensor, DType dtype, unsigned threads = 0);

// True if every value of `from` is exactly representable in `to` (e.g.
// bfloat16 -> float32, int32 -> int64, int32 -> float64), so casting loses
// nothing.
bool cast_is_exact(DType from, DType to);

}  // namespace ckpt
