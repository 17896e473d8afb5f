#pragma once
// Casting a tensor to another dtype, element by element, the way numpy's
// astype (with ml_dtypes 0.5 for bfloat16 and float8) converts.

#include "ckpt/dtype.h"
#include "ckpt/tensor.h"

namespace ckpt {

// Returns `tensor`'s values converted to `dtype` in fresh heap memory (the
// tensor itself, shared, when it already has that dtype). Rules:
//  - float to float (float64, float32, float16, bfloat16, float8_e4m3fn,
//    float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu): round to
//    nearest, ties to even; too large becomes ±inf, or NaN in the float8s
//    without infinity (e4m3fn, the fnuz pair, e8m0fnu); NaN stays NaN (sign
//    kept; bfloat16 and float8 get their one quiet NaN, as in ml_dtypes);
//    subnormals are kept where the target has them. float64 rounds to
//    float16, bfloat16 and float8 once, directly (ml_dtypes goes through
//    float32, and that double rounding can differ in the last bit: 1 + 2^-8 +
//    2^-40 gives bfloat16 0x3F81 here, 0x3F80 there).
//  - fnuz (float8_e4m3fnuz, float8_e5m2fnuz): 0x80, the pattern of -0, is
//    the one NaN (it widens to -NaN, as in ml_dtypes); there is no -0, so -0.0
//    and negative values that round to zero become +0 (0x00).
//  - float8_e8m0fnu (powers of two 2^-127 .. 2^127, 0xFF NaN, no sign, no
//    zero), as ml_dtypes 0.5 converts a float32: zero, negative values,
//    infinities and NaN become NaN; from 2^-126 up, the nearer power of two
//    with ties rounded up (1.5 -> 2, 3 -> 4); too large (from 1.5 × 2^127)
//    becomes NaN; below 2^-126, values above 2^-127 become 2^-126 and the
//    rest 2^-127 (ml_dtypes' rounding of float32 subnormals). float64 and
//    integers round once by the same rule (ml_dtypes goes through float32:
//    a positive float64 below 2^-150 is NaN there, 2^-127 here).
//  - integer or bool to float: round to nearest, ties to even, once (also
//    int64 and uint64 to float32, float16, bfloat16 and float8); e8m0fnu as
//    above (0 and false become NaN).
//  - float to integer: truncated toward zero; NaN becomes 0 and values
//    outside the target's range saturate at its minimum or maximum (numpy
//    leaves both undefined).
//  - integer to integer: two's complement wrap-around, as numpy's astype.
//  - anything to bool: nonzero (NaN included) is true; bool to a number: 0 or 1.
//  - complex to real: the real part; real to complex: imaginary part 0;
//    complex64 <-> complex128 per component.
//  - float4_e2m1fn_x2 (packed pairs of 4-bit floats) is not converted:
//    casting it to or from any other dtype throws Error{kUnsupported}
//    (casting it to itself returns it).
// Large tensors are converted on `threads` threads (0: min(hardware, 4)).
// Throws Error{kInvalidArgument} for a tensor without data (Tensor::spec).
Tensor cast(const Tensor& tensor, DType dtype, unsigned threads = 0);

// True if every value of `from` is exactly representable in `to` (e.g.
// bfloat16 -> float32, int32 -> int64, int32 -> float64), so casting loses
// nothing (-0 included: float32 -> a fnuz float8 is never exact). False for
// any other dtype to float8_e8m0fnu (nothing else lacks zero) and for
// float4_e2m1fn_x2 with another dtype.
bool cast_is_exact(DType from, DType to);

}  // namespace ckpt
