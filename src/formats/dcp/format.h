#pragma once
// PyTorch Distributed Checkpoint (DCP) directories as a Format plugin (id
// "dcp"). Byte layout: docs/formats/dcp.md.

#include "ckpt/format.h"

namespace ckpt {

const Format& dcp_format();

}  // namespace ckpt
