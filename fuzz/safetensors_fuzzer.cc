// The input is a safetensors file held in memory, read by ckpt::open_bytes
// (memory.h) as ckpt.safetensors.deserialize reads a Python bytes object, then
// written to a file and walked as a file (fuzz_support.h) too: the header
// JSON, __metadata__ and ckpt's extras, offsets, dtypes, checksums.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ckpt/buffer.h"
#include "ckpt/error.h"
#include "ckpt/memory.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    try {
      ckpt::Buffer bytes = ckpt::Buffer::copy_of(std::as_bytes(std::span(data, size)));
      ckpt::Contents contents = ckpt::open_bytes(bytes, "input.safetensors");
      ckpt::fuzz::walk_contents("input.safetensors", contents, size);
    } catch (const ckpt::Error&) {
    }
    auto path = ckpt::fuzz::write_file("input.safetensors", {data, size});
    ckpt::fuzz::walk_checkpoint(path, "safetensors", size);
  });
}
