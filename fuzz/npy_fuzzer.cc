// The input is a .npy file (header and data), read as the npy format.
// Walks it as ckpt's users do (fuzz_support.h: inspect, every tensor, a
// non-lazy load, verify); only a ckpt::Error may come out.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    auto path = ckpt::fuzz::write_file("input.npy", {data, size});
    ckpt::fuzz::walk_checkpoint(path, "npy", size);
  });
}
