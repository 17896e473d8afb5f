#pragma once
// PyTorch's torch.save files (zip and legacy) as a Format plugin. Byte
// layout: docs/formats/torch.md.

#include "ckpt/format.h"

namespace ckpt {

const Format& torch_format();

}  // namespace ckpt
