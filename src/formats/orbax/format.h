#pragma once
// The Orbax format plugin: a checkpoint directory (a step or one item) of
// zarr v2 arrays in an OCDBT database or one folder per array. Byte layout:
// docs/formats/orbax.md.

#include "ckpt/format.h"

namespace ckpt {

const Format& orbax_format();

}  // namespace ckpt
