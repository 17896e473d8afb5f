#pragma once
// NumPy's .npy (one tensor) and .npz (zip of .npy) format plugins. Byte
// layout: docs/formats/numpy.md.

#include "ckpt/format.h"

namespace ckpt {

const Format& npy_format();
const Format& npz_format();

}  // namespace ckpt
