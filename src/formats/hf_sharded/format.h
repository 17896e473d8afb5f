#pragma once
// The Hugging Face sharded safetensors format plugin ("hf_sharded"):
// a directory of model-0000K-of-0000N.safetensors shards and
// model.safetensors.index.json. Layout: docs/formats/hf_sharded.md.

#include "ckpt/format.h"

namespace ckpt {

const Format& hf_sharded_format();

}  // namespace ckpt
