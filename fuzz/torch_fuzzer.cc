// The input is a torch.save file, zip (torch >= 1.6) or legacy, read as the torch format: the zip container, the restricted unpickler, storages and views.
// Walks it as ckpt's users do (fuzz_support.h: inspect, every tensor, a
// non-lazy load, verify); only a ckpt::Error may come out.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    auto path = ckpt::fuzz::write_file("input.pt", {data, size});
    ckpt::fuzz::walk_checkpoint(path, "torch", size);
  });
}
