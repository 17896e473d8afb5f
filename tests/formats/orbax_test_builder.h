#pragma once
// Hand-built Orbax item directories for the orbax tests: an OCDBT database
// encoded field by field from tensorstore's kvstore/ocdbt/index.rst, without
// ckpt's reader code (an independent encoder; CRC-32C bit by bit), so that a
// test can break one field at a time.

#include <zstd.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/files.h"

namespace ckpt::testing::ocdbt {

constexpr uint32_t kManifestMagic = 0x0cdb3a2a;
constexpr uint32_t kVersionTreeMagic = 0x0cdb1234;
constexpr uint32_t kBtreeMagic = 0x0cdb20de;

// Bitwise CRC-32C (reflected Castagnoli polynomial 0x82F63B78).
inline uint32_t reference_crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFF;
  for (unsigned char c : data) {
    crc ^= c;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
  }
  return ~crc;
}

inline void varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

inline void little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

inline std::string zstd(std::string_view bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 1));
  return out;
}

// magic | length | version | compression | body | CRC-32C.
inline std::string envelope(uint32_t magic, std::string_view body, bool compress = false, uint32_t version = 0) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((magic >> shift) & 0xff));
  little_endian(out, 0, 8);  // length, below
  varint(out, version);
  varint(out, compress ? 1 : 0);
  out += compress ? zstd(body) : std::string(body);
  const uint64_t length = out.size() + 4;
  for (int i = 0; i < 8; ++i) out[4 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  little_endian(out, reference_crc32c(out), 4);
  return out;
}

// Recomputes the trailing CRC-32C after a test edited the bytes.
inline void reseal(std::string& encoded) {
  encoded.resize(encoded.size() - 4);
  little_endian(encoded, reference_crc32c(encoded), 4);
}

// A data file table, paths prefix-compressed, base paths empty.
inline std::string file_table(const std::vector<std::string>& paths) {
  std::string out;
  varint(out, paths.size());
  for (size_t i = 1; i < paths.size(); ++i) {
    size_t common = 0;
    while (common < paths[i].size() && common < paths[i - 1].size() && paths[i][common] == paths[i - 1][common]) ++common;
    varint(out, common);
  }
  std::vector<size_t> prefix(paths.size(), 0);
  for (size_t i = 1; i < paths.size(); ++i) {
    while (prefix[i] < paths[i].size() && prefix[i] < paths[i - 1].size() &&
           paths[i][prefix[i]] == paths[i - 1][prefix[i]]) {
      ++prefix[i];
    }
  }
  for (size_t i = 0; i < paths.size(); ++i) varint(out, paths[i].size() - prefix[i]);
  for (size_t i = 0; i < paths.size(); ++i) varint(out, 0);
  for (size_t i = 0; i < paths.size(); ++i) out += paths[i].substr(prefix[i]);
  return out;
}

// The key columns, prefix-compressed against the previous key.
inline std::string key_columns(const std::vector<std::string>& keys, const std::vector<uint64_t>* subtree = nullptr) {
  std::string out;
  std::vector<size_t> prefix(keys.size(), 0);
  for (size_t i = 1; i < keys.size(); ++i) {
    while (prefix[i] < keys[i].size() && prefix[i] < keys[i - 1].size() && keys[i][prefix[i]] == keys[i - 1][prefix[i]]) {
      ++prefix[i];
    }
    varint(out, prefix[i]);
  }
  for (size_t i = 0; i < keys.size(); ++i) varint(out, keys[i].size() - prefix[i]);
  if (subtree != nullptr) {
    for (uint64_t length : *subtree) varint(out, length);
  }
  for (size_t i = 0; i < keys.size(); ++i) out += keys[i].substr(prefix[i]);
  return out;
}

// A leaf entry: inline (file < 0) or `bytes.size()` bytes at `offset` of
// table file `file`.
struct Value {
  std::string key;
  std::string bytes;
  int file = -1;
  uint64_t offset = 0;
};

inline std::string leaf_body(const std::vector<std::string>& paths, const std::vector<Value>& values) {
  std::string out(1, '\0');  // height 0
  out += file_table(paths);
  varint(out, values.size());
  std::vector<std::string> keys;
  for (const Value& value : values) keys.push_back(value.key);
  out += key_columns(keys);
  for (const Value& value : values) varint(out, value.bytes.size());
  for (const Value& value : values) out.push_back(value.file < 0 ? '\0' : '\1');
  for (const Value& value : values) {
    if (value.file >= 0) varint(out, static_cast<uint64_t>(value.file));
  }
  for (const Value& value : values) {
    if (value.file >= 0) varint(out, value.offset);
  }
  for (const Value& value : values) {
    if (value.file < 0) out += value.bytes;
  }
  return out;
}

// A child of an interior node.
struct Child {
  std::string key;
  uint64_t subtree_prefix = 0;
  uint64_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

inline std::string interior_body(uint8_t height, const std::vector<std::string>& paths, const std::vector<Child>& children) {
  std::string out(1, static_cast<char>(height));
  out += file_table(paths);
  varint(out, children.size());
  std::vector<std::string> keys;
  std::vector<uint64_t> subtree;
  for (const Child& child : children) {
    keys.push_back(child.key);
    subtree.push_back(child.subtree_prefix);
  }
  out += key_columns(keys, &subtree);
  for (const Child& child : children) varint(out, child.file);
  for (const Child& child : children) varint(out, child.offset);
  for (const Child& child : children) varint(out, child.length);
  for (int column = 0; column < 3; ++column) {
    for (size_t i = 0; i < children.size(); ++i) varint(out, 1);
  }
  return out;
}

// A single-kind manifest whose one version's root is [offset, offset+length)
// of `root_path`.
inline std::string manifest_body(const std::string& root_path, uint64_t offset, uint64_t length, uint8_t root_height) {
  std::string out(16, '\x11');  // uuid
  out.push_back('\0');          // manifest_kind: single
  varint(out, 100);             // max_inline_value_bytes
  varint(out, 8 << 20);         // max_decoded_node_bytes
  out.push_back('\4');          // version_tree_arity_log2
  varint(out, 1);               // compression_method zstd
  little_endian(out, 1, 4);     // level
  out += file_table({root_path});
  varint(out, 1);  // one version
  varint(out, 1);  // generation 1
  out.push_back(static_cast<char>(root_height));
  varint(out, 0);
  varint(out, offset);
  varint(out, length);
  varint(out, 2);  // num_keys
  varint(out, length);
  varint(out, 0);
  little_endian(out, 1700000000000ull, 8);
  varint(out, 0);  // no version tree nodes
  return out;
}

// One item directory holding array "w" (float32 [2, 3]) in OCDBT: the
// .zarray inline in the leaf node, the raw chunk in d/data. Tests replace
// one part before write().
struct ItemBuilder {
  std::string metadata =
      R"j({"tree_metadata": {"('w',)": {"key_metadata": [{"key": "w", "key_type": 2}], )j"
      R"j("value_metadata": {"value_type": "np.ndarray", "skip_deserialize": false}}}, "use_ocdbt": true})j";
  std::string zarray =
      R"j({"chunks":[2,3],"compressor":null,"dimension_separator":".","dtype":"<f4","fill_value":null,)j"
      R"j("filters":null,"order":"C","shape":[2,3],"zarr_format":2})j";
  std::string chunk = std::string("\0\0\0\0\0\0\x80\x3f\0\0\0\x40\0\0\x40\x40\0\0\x80\x40\0\0\xa0\x40", 24);
  bool compress_nodes = true;
  std::optional<std::string> node;      // replaces the encoded leaf node
  std::optional<std::string> manifest;  // replaces the encoded manifest

  std::vector<Value> values() const { return {{"w/.zarray", zarray}, {"w/0.0", chunk, 0, 0}}; }
  std::string encoded_node() const {
    return node ? *node : envelope(kBtreeMagic, leaf_body({"d/data"}, values()), compress_nodes);
  }
  std::string encoded_manifest() const {
    return manifest ? *manifest
                    : envelope(kManifestMagic, manifest_body("d/node", 0, encoded_node().size(), 0), compress_nodes);
  }
  void write(const std::filesystem::path& dir) const {
    std::filesystem::create_directories(dir / "d");
    write_file(dir / "_METADATA", metadata);
    write_file(dir / "d" / "data", chunk);
    write_file(dir / "d" / "node", encoded_node());
    write_file(dir / "manifest.ocdbt", encoded_manifest());
  }
};

}  // namespace ckpt::testing::ocdbt
