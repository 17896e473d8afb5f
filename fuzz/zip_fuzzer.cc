// The input is a zip file, read by ckpt's zip container
// (formats/zip/reader.h) as npz and torch read it: end records and zip64,
// the central directory, local headers, overlaps; then every entry's bytes,
// stored (CRC checked) or deflated, within the memory bound.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ckpt/error.h"
#include "formats/zip/reader.h"
#include "fuzz_support.h"
#include "io/mapped_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    auto path = ckpt::fuzz::write_file("input.zip", {data, size});
    try {
      ckpt::zip_detail::ZipReader zip(ckpt::detail::MappedFile::open(path));
      for (const ckpt::zip_detail::ZipEntry& entry : zip.entries()) {
        if (entry.uncompressed_size > ckpt::fuzz::memory_bound(size)) continue;
        try {
          ckpt::Buffer bytes = zip.read(entry, {.verify_crc = true});
          std::vector<std::byte> copy(bytes.size());
          bytes.copy_to(copy);
          (void)zip.find(entry.name);
        } catch (const ckpt::Error&) {
        }
      }
    } catch (const ckpt::Error&) {
    }
  });
}
