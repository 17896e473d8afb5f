// The input is a DCP `.metadata` file: parsed by parse_metadata
// (formats/dcp/metadata.h) through the restricted unpickler with DCP's
// classes allowed, without the directory and data files around it.
#include <cstddef>
#include <cstdint>
#include <span>

#include "ckpt/error.h"
#include "formats/dcp/metadata.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    try {
      const ckpt::dcp_detail::DcpMetadata metadata =
          ckpt::dcp_detail::parse_metadata(std::as_bytes(std::span(data, size)));
      for (const ckpt::dcp_detail::Item& item : metadata.items) (void)item.chunks.size();
    } catch (const ckpt::Error&) {
    }
  });
}
