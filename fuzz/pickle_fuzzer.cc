// The input is a bare pickle, run by torch's restricted unpickler
// (formats/torch/pickle_reader.h) as a zip checkpoint's data.pkl and, with
// the first byte's low bit set, as a legacy file's pickle (six-field
// persistent ids); then its tree is built (pickle_to_tree) with each tensor
// an empty stand-in. The torch target reaches the same code through files;
// this one spends no time in the zip container.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ckpt/error.h"
#include "ckpt/tensor.h"
#include "ckpt/tree.h"
#include "formats/torch/pickle_reader.h"
#include "formats/torch/reader.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    if (size == 0) return;
    bool legacy = (data[0] & 1) != 0;
    auto bytes = std::as_bytes(std::span(data + 1, size - 1));
    try {
      ckpt::torch_detail::Pickle pickle = ckpt::torch_detail::unpickle(bytes, {.file_offset = 1, .legacy = legacy});
      ckpt::Tree tree = ckpt::torch_detail::pickle_to_tree(pickle, bytes.size(), [](uint32_t) {
        return ckpt::Tensor::from_bytes(ckpt::DType::kFloat32, {0}, {});
      });
      for (const ckpt::Tree::Leaf& leaf : tree.leaves()) (void)leaf.name.size();
    } catch (const ckpt::Error&) {
    }
  });
}
