#pragma once
// Hand-made TensorFlow bundles for tests: protobuf wire bytes encoded here
// independently of ckpt's generated messages (field numbers from
// tensor_bundle.proto), the .index table built with tf_detail's LevelDB
// writer.

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/checksum.h"
#include "formats/tf/index_table.h"
#include "formats/tf/layout.h"
#include "support/files.h"

namespace ckpt::testing::tf {

inline std::string varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}
inline std::string field_varint(int field, uint64_t value) { return varint(uint64_t(field) << 3) + varint(value); }
inline std::string field_bytes(int field, std::string_view bytes) {
  return varint((uint64_t(field) << 3) | 2) + varint(bytes.size()) + std::string(bytes);
}
inline std::string field_fixed32(int field, uint32_t value) {
  std::string out = varint((uint64_t(field) << 3) | 5);
  char raw[4];
  std::memcpy(raw, &value, 4);
  return out + std::string(raw, 4);
}

inline uint32_t masked_crc_of(std::string_view bytes) {
  return tf_detail::mask_crc(detail::crc32c(std::as_bytes(std::span(bytes.data(), bytes.size()))));
}

// BundleHeaderProto.
struct HeaderSpec {
  int64_t num_shards = 1;
  int64_t endianness = 0;
  int64_t producer = 1;
  int64_t min_consumer = 0;
};
inline std::string header(const HeaderSpec& spec = {}) {
  std::string version;
  if (spec.producer != 0) version += field_varint(1, static_cast<uint64_t>(spec.producer));
  if (spec.min_consumer != 0) version += field_varint(2, static_cast<uint64_t>(spec.min_consumer));
  std::string out;
  if (spec.num_shards != 0) out += field_varint(1, static_cast<uint64_t>(spec.num_shards));
  if (spec.endianness != 0) out += field_varint(2, static_cast<uint64_t>(spec.endianness));
  return out + field_bytes(3, version);
}

// BundleEntryProto.
struct EntrySpec {
  int64_t dtype = 1;  // DT_FLOAT
  std::vector<int64_t> shape;
  int64_t shard = 0;
  int64_t offset = 0;
  int64_t size = 0;
  uint32_t crc = 0;  // masked
  bool unknown_rank = false;
  std::string extra;  // appended raw fields (slices, ...)
};
inline std::string entry(const EntrySpec& spec) {
  std::string shape;
  for (int64_t dim : spec.shape) shape += field_bytes(2, field_varint(1, static_cast<uint64_t>(dim)));
  if (spec.unknown_rank) shape += field_varint(3, 1);
  std::string out = field_varint(1, static_cast<uint64_t>(spec.dtype)) + field_bytes(2, shape);
  if (spec.shard != 0) out += field_varint(3, static_cast<uint64_t>(spec.shard));
  if (spec.offset != 0) out += field_varint(4, static_cast<uint64_t>(spec.offset));
  if (spec.size != 0) out += field_varint(5, static_cast<uint64_t>(spec.size));
  out += field_fixed32(6, spec.crc);
  return out + spec.extra;
}

// The stored form of a DT_STRING tensor (lengths, masked CRC of the lengths
// as uint32, bytes).
inline std::string string_tensor(const std::vector<std::string>& elements) {
  std::string lengths;
  uint32_t crc = 0;
  for (const std::string& element : elements) {
    lengths += varint(element.size());
    const auto length = static_cast<uint32_t>(element.size());
    crc = detail::crc32c(std::as_bytes(std::span(&length, 1)), crc);
  }
  const uint32_t masked = tf_detail::mask_crc(crc);
  char raw[4];
  std::memcpy(raw, &masked, 4);
  std::string out = lengths + std::string(raw, 4);
  for (const std::string& element : elements) out += element;
  return out;
}

// The varint fields of a message's wire bytes (dtype, shard_id, offset,
// size of a BundleEntryProto; num_shards of a BundleHeaderProto), decoded
// here independently of ckpt's generated messages: field number -> value.
// Fields of other wire types are skipped.
inline std::map<int, uint64_t> varint_fields(std::string_view bytes) {
  std::map<int, uint64_t> fields;
  size_t at = 0;
  auto read_varint = [&]() {
    uint64_t value = 0;
    for (int shift = 0; at < bytes.size() && shift < 64; shift += 7) {
      const auto byte = static_cast<uint8_t>(bytes[at++]);
      value |= uint64_t(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
    }
    return value;
  };
  while (at < bytes.size()) {
    const uint64_t tag = read_varint();
    const int field = static_cast<int>(tag >> 3);
    switch (tag & 7) {
      case 0: fields[field] = read_varint(); break;
      case 1: at += 8; break;
      case 2: at += read_varint(); break;
      case 5: at += 4; break;
      default: return fields;  // groups: not in these messages
    }
  }
  return fields;
}

// Writes PREFIX.index from `records` (sorted by the caller) and the shards'
// bytes as PREFIX.data-0000K-of-0000N, N = shards.size().
inline void write_bundle(const std::filesystem::path& prefix, const std::vector<tf_detail::IndexRecord>& records,
                         const std::vector<std::string>& shards) {
  write_file(tf_detail::index_path(prefix), tf_detail::build_index_table(records));
  for (size_t i = 0; i < shards.size(); ++i) {
    write_file(tf_detail::shard_path(prefix, static_cast<int>(i), static_cast<int>(shards.size())), shards[i]);
  }
}

}  // namespace ckpt::testing::tf
