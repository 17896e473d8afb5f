// The input is an Orbax checkpoint directory, packed as fuzz_support.h's
// unpack_directory packs one ("\n@@" PATH "\n" CONTENTS, scripts/fuzz-seeds
// packs real steps so): _CHECKPOINT_METADATA, _METADATA, the OCDBT
// manifest and b-tree nodes (ocdbt.process_0/...), zarr .zarray files and
// chunks. Walked as the orbax format.
//
// OCDBT structures end with a CRC-32C of their bytes, which nearly every
// mutation would break; before unpacking, the harness rewrites the CRC of
// each structure it finds (an OCDBT magic followed by a length that fits in
// the input), so that mutations reach the manifests and nodes behind it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/checksum.h"
#include "formats/orbax/ocdbt_layout.h"
#include "fuzz_support.h"

namespace {

uint32_t load_be32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]; }

void refresh_ocdbt_checksums(std::vector<uint8_t>& bytes) {
  using namespace ckpt::orbax_detail;
  for (size_t at = 0; at + kEnvelopeMinSize <= bytes.size(); ++at) {
    uint32_t magic = load_be32(&bytes[at]);
    if (magic != kManifestMagic && magic != kVersionTreeNodeMagic && magic != kBtreeNodeMagic) continue;
    uint64_t length = 0;
    std::memcpy(&length, &bytes[at + 4], 8);  // little-endian (x86)
    if (length < kEnvelopeMinSize || length > bytes.size() - at) continue;
    uint32_t crc = ckpt::detail::crc32c(std::as_bytes(std::span(&bytes[at], length - 4)));
    std::memcpy(&bytes[at + length - 4], &crc, 4);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    std::vector<uint8_t> bytes(data, data + size);
    refresh_ocdbt_checksums(bytes);
    auto dir = ckpt::fuzz::unpack_directory("step", bytes);
    ckpt::fuzz::walk_checkpoint(dir, "orbax", size);
  });
}
