#pragma once
// The safetensors format plugin (ckpt's native format). Byte layout:
// docs/formats/safetensors.md.

#include "ckpt/format.h"

namespace ckpt {

const Format& safetensors_format();

}  // namespace ckpt
