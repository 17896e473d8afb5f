// The input is a TensorFlow bundle's .index file (a LevelDB table), read by
// read_index_table (formats/tf/index_table.h): footer, magic, block handles,
// CRC-32C of every block, the records. Most mutations fail the checksum;
// the tf_bundle target fuzzes what the records say.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ckpt/error.h"
#include "formats/tf/index_table.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    try {
      auto records = ckpt::tf_detail::read_index_table(std::as_bytes(std::span(data, size)), "input.index");
      (void)records.size();
    } catch (const ckpt::Error&) {
    }
  });
}
