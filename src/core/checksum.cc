#include "core/checksum.h"

#include <isa-l/crc.h>
#include <xxhash.h>

#include <climits>

#include "ckpt/error.h"
#include "core/text.h"

namespace ckpt::detail {
namespace {

const unsigned char* as_uchar(std::span<const std::byte> bytes) {
  return reinterpret_cast<const unsigned char*>(bytes.data());
}

}  // namespace

uint64_t xxh3_64(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

uint32_t crc32c(std::span<const std::byte> bytes, uint32_t previous) {
  // ISA-L's crc32_iscsi works on the un-inverted register and takes an int
  // length: invert around it and feed at most INT_MAX bytes at a time.
  uint32_t crc = ~previous;
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), INT_MAX);
    crc = crc32_iscsi(const_cast<unsigned char*>(as_uchar(bytes)), static_cast<int>(n), crc);
    bytes = bytes.subspan(n);
  }
  return ~crc;
}

uint32_t crc32(std::span<const std::byte> bytes, uint32_t previous) {
  return crc32_gzip_refl(previous, as_uchar(bytes), bytes.size());
}

Checksummer::Checksummer(ChecksumKind kind) : kind_(kind) {
  if (kind_ == ChecksumKind::kXxh3) {
    xxh_state_ = XXH3_createState();
    if (xxh_state_ == nullptr) throw std::bad_alloc();
    XXH3_64bits_reset(static_cast<XXH3_state_t*>(xxh_state_));
  }
}

Checksummer::~Checksummer() {
  if (xxh_state_) XXH3_freeState(static_cast<XXH3_state_t*>(xxh_state_));
}

Checksummer::Checksummer(Checksummer&& other) noexcept
    : kind_(other.kind_), xxh_state_(other.xxh_state_), crc_(other.crc_) {
  other.xxh_state_ = nullptr;
}

Checksummer& Checksummer::operator=(Checksummer&& other) noexcept {
  std::swap(kind_, other.kind_);
  std::swap(xxh_state_, other.xxh_state_);
  std::swap(crc_, other.crc_);
  return *this;
}

void Checksummer::update(std::span<const std::byte> bytes) {
  switch (kind_) {
    case ChecksumKind::kNone: break;
    case ChecksumKind::kXxh3:
      XXH3_64bits_update(static_cast<XXH3_state_t*>(xxh_state_), bytes.data(), bytes.size());
      break;
    case ChecksumKind::kCrc32c: crc_ = crc32c(bytes, crc_); break;
    case ChecksumKind::kCrc32: crc_ = crc32(bytes, crc_); break;
  }
}

std::string Checksummer::hex() const {
  switch (kind_) {
    case ChecksumKind::kNone: return "";
    case ChecksumKind::kXxh3: return hex_digits(XXH3_64bits_digest(static_cast<XXH3_state_t*>(xxh_state_)), 16);
    case ChecksumKind::kCrc32c: return hex_digits(crc_, 8);
    case ChecksumKind::kCrc32: return hex_digits(crc_, 8);
  }
  return "";
}

std::string checksum_hex(ChecksumKind kind, std::span<const std::byte> bytes) {
  switch (kind) {
    case ChecksumKind::kNone: return "";
    case ChecksumKind::kXxh3: return hex_digits(xxh3_64(bytes), 16);
    case ChecksumKind::kCrc32c: return hex_digits(crc32c(bytes), 8);
    case ChecksumKind::kCrc32: return hex_digits(crc32(bytes), 8);
  }
  return "";
}

size_t checksum_hex_width(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kNone: return 0;
    case ChecksumKind::kXxh3: return 16;
    case ChecksumKind::kCrc32c:
    case ChecksumKind::kCrc32: return 8;
  }
  return 0;
}

}  // namespace ckpt::detail

namespace ckpt {

std::string_view checksum_name(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kNone: return "none";
    case ChecksumKind::kXxh3: return "xxh3";
    case ChecksumKind::kCrc32c: return "crc32c";
    case ChecksumKind::kCrc32: return "crc32";
  }
  return "none";
}

ChecksumKind checksum_from_name(std::string_view name) {
  if (name == "xxh3") return ChecksumKind::kXxh3;
  if (name == "crc32c") return ChecksumKind::kCrc32c;
  if (name == "crc32") return ChecksumKind::kCrc32;
  if (name == "none") return ChecksumKind::kNone;
  throw Error(ErrorCode::kUnsupported, "unknown checksum kind '" + std::string(name) + "' (known: xxh3, crc32c, crc32, none)");
}

}  // namespace ckpt

