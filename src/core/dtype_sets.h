#pragma once
// Sets of dtypes that several formats share, each defined once.

#include <vector>

#include "ckpt/dtype.h"

namespace ckpt::detail {

// Every dtype that numpy or ml_dtypes has an array type for, in enum order:
// all of ckpt's but torch's packed float4 pairs (float4_e2m1fn_x2), which
// neither has (their readers refuse them). The dtypes of the formats whose
// arrays are numpy / ml_dtypes arrays (Flax msgpack, Orbax).
std::vector<DType> numpy_and_ml_dtypes();

}  // namespace ckpt::detail
