#pragma once
// Checksums: xxh3-64 (libxxhash) for ckpt's own per-tensor sums, CRC-32C
// (ISA-L) as TensorFlow and Orbax use it, CRC-32 (ISA-L) for zip entries.

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ckpt/checksum.h"

namespace ckpt::detail {

uint64_t xxh3_64(std::span<const std::byte> bytes);
uint32_t crc32c(std::span<const std::byte> bytes, uint32_t previous = 0);
// The zip / gzip CRC-32 (reflected polynomial 0xEDB88320).
uint32_t crc32(std::span<const std::byte> bytes, uint32_t previous = 0);

// Incremental checksum of one kind, fed chunk by chunk.
class Checksummer {
 public:
  explicit Checksummer(ChecksumKind kind);
  ~Checksummer();
  Checksummer(Checksummer&&) noexcept;
  Checksummer& operator=(Checksummer&&) noexcept;
  void update(std::span<const std::byte> bytes);
  // Lower-case hex of fixed width: 16 digits for xxh3, 8 for CRC-32C; "" for none.
  std::string hex() const;

 private:
  ChecksumKind kind_;
  void* xxh_state_ = nullptr;
  uint32_t crc_ = 0;
};

// The digest of `bytes` as Checksummer::hex() writes it.
std::string checksum_hex(ChecksumKind kind, std::span<const std::byte> bytes);
// Width of the hex digest.
size_t checksum_hex_width(ChecksumKind kind);

}  // namespace ckpt::detail
