// The input is a Hugging Face sharded checkpoint directory, packed as
// fuzz_support.h's unpack_directory packs one ("\n@@" PATH "\n" CONTENTS,
// scripts/fuzz-seeds packs ckpt's example split into shards so):
// model.safetensors.index.json and the safetensors shards it names. Walked as
// the hf_sharded format (the index's validation, each shard's, the pieces of
// sliced tensors).
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    auto dir = ckpt::fuzz::unpack_directory("model", std::span(data, size));
    ckpt::fuzz::walk_checkpoint(dir, "hf_sharded", size);
  });
}
