#pragma once
// Hand-built zip archives for the zip and npz tests, written field by field
// from PKWARE APPNOTE without ckpt's ZipWriter (so that reader and writer are
// checked against an independent encoder), with the offsets of every record
// so that a test can break one field at a time.

#include <libdeflate.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "support/files.h"

namespace ckpt::testing {

inline void put_u16(std::string& out, size_t at, uint16_t v) {
  out[at] = static_cast<char>(v & 0xFF);
  out[at + 1] = static_cast<char>(v >> 8);
}
inline void put_u32(std::string& out, size_t at, uint32_t v) {
  put_u16(out, at, static_cast<uint16_t>(v & 0xFFFF));
  put_u16(out, at + 2, static_cast<uint16_t>(v >> 16));
}
inline void put_u64(std::string& out, size_t at, uint64_t v) {
  put_u32(out, at, static_cast<uint32_t>(v & 0xFFFFFFFF));
  put_u32(out, at + 4, static_cast<uint32_t>(v >> 32));
}
inline void add_u16(std::string& out, uint16_t v) {
  out.append(2, '\0');
  put_u16(out, out.size() - 2, v);
}
inline void add_u32(std::string& out, uint32_t v) {
  out.append(4, '\0');
  put_u32(out, out.size() - 4, v);
}
inline void add_u64(std::string& out, uint64_t v) {
  out.append(8, '\0');
  put_u64(out, out.size() - 8, v);
}
inline uint16_t get_u16(std::string_view in, size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(in[at]) | static_cast<unsigned char>(in[at + 1]) << 8);
}
inline uint32_t get_u32(std::string_view in, size_t at) {
  return get_u16(in, at) | static_cast<uint32_t>(get_u16(in, at + 2)) << 16;
}

// Bitwise CRC-32 (reflected 0xEDB88320), independent of ckpt's ISA-L one.
inline uint32_t reference_crc32(std::string_view data) {
  uint32_t crc = 0xFFFFFFFF;
  for (unsigned char c : data) {
    crc ^= c;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

// Raw deflate (RFC 1951) of `data` by libdeflate at level 6.
inline std::string deflate_raw(std::string_view data) {
  std::unique_ptr<libdeflate_compressor, void (*)(libdeflate_compressor*)> compressor(
      libdeflate_alloc_compressor(6), libdeflate_free_compressor);
  std::string out(libdeflate_deflate_compress_bound(compressor.get(), data.size()), '\0');
  const size_t size = libdeflate_deflate_compress(compressor.get(), data.data(), data.size(), out.data(), out.size());
  if (size == 0) throw std::runtime_error("deflate failed");
  out.resize(size);
  return out;
}

struct TestZipEntry {
  std::string name;
  std::string data;          // uncompressed bytes
  uint16_t method = 0;       // 8: deflated by libdeflate; anything else: `data` stored as is
  uint16_t flags = 0;        // general purpose flags (bit 3 writes a data descriptor)
};

struct TestZipOptions {
  bool zip64 = false;        // zip64 extra fields everywhere, zip64 end record and locator
  std::string comment;
};

struct TestZip {
  std::string bytes;
  std::vector<size_t> local_offsets;    // each local header
  std::vector<size_t> data_offsets;     // each entry's (compressed) data
  std::vector<size_t> central_offsets;  // each central directory header
  size_t directory_offset = 0;
  size_t zip64_record_offset = 0;       // zip64 only
  size_t zip64_locator_offset = 0;      // zip64 only
  size_t end_offset = 0;                // end of central directory record
};

inline TestZip build_test_zip(const std::vector<TestZipEntry>& entries, const TestZipOptions& options = {}) {
  TestZip zip;
  std::string& out = zip.bytes;
  std::vector<std::string> stored(entries.size());
  std::vector<uint32_t> crcs(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const TestZipEntry& entry = entries[i];
    stored[i] = entry.method == 8 ? deflate_raw(entry.data) : entry.data;
    crcs[i] = reference_crc32(entry.data);
    const bool descriptor = entry.flags & 8;
    zip.local_offsets.push_back(out.size());
    add_u32(out, 0x04034b50);
    add_u16(out, options.zip64 ? 45 : 20);
    add_u16(out, entry.flags);
    add_u16(out, entry.method);
    add_u16(out, 0);       // time
    add_u16(out, 0x21);    // date 1980-01-01
    add_u32(out, descriptor ? 0 : crcs[i]);
    add_u32(out, options.zip64 ? 0xFFFFFFFF : descriptor ? 0 : static_cast<uint32_t>(stored[i].size()));
    add_u32(out, options.zip64 ? 0xFFFFFFFF : descriptor ? 0 : static_cast<uint32_t>(entry.data.size()));
    add_u16(out, static_cast<uint16_t>(entry.name.size()));
    add_u16(out, options.zip64 ? 20 : 0);
    out += entry.name;
    if (options.zip64) {
      add_u16(out, 1);
      add_u16(out, 16);
      add_u64(out, entry.data.size());
      add_u64(out, stored[i].size());
    }
    zip.data_offsets.push_back(out.size());
    out += stored[i];
    if (descriptor) {
      add_u32(out, 0x08074b50);
      add_u32(out, crcs[i]);
      add_u32(out, static_cast<uint32_t>(stored[i].size()));
      add_u32(out, static_cast<uint32_t>(entry.data.size()));
    }
  }
  zip.directory_offset = out.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    const TestZipEntry& entry = entries[i];
    zip.central_offsets.push_back(out.size());
    add_u32(out, 0x02014b50);
    add_u16(out, 0x0300 | (options.zip64 ? 45 : 20));
    add_u16(out, options.zip64 ? 45 : 20);
    add_u16(out, entry.flags);
    add_u16(out, entry.method);
    add_u16(out, 0);
    add_u16(out, 0x21);
    add_u32(out, crcs[i]);
    add_u32(out, options.zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(stored[i].size()));
    add_u32(out, options.zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(entry.data.size()));
    add_u16(out, static_cast<uint16_t>(entry.name.size()));
    add_u16(out, options.zip64 ? 28 : 0);
    add_u16(out, 0);  // comment
    add_u16(out, 0);  // disk
    add_u16(out, 0);  // internal attributes
    add_u32(out, 0600u << 16);
    add_u32(out, options.zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(zip.local_offsets[i]));
    out += entry.name;
    if (options.zip64) {
      add_u16(out, 1);
      add_u16(out, 24);
      add_u64(out, entry.data.size());
      add_u64(out, stored[i].size());
      add_u64(out, zip.local_offsets[i]);
    }
  }
  const size_t directory_size = out.size() - zip.directory_offset;
  if (options.zip64) {
    zip.zip64_record_offset = out.size();
    add_u32(out, 0x06064b50);
    add_u64(out, 44);
    add_u16(out, 45);
    add_u16(out, 45);
    add_u32(out, 0);
    add_u32(out, 0);
    add_u64(out, entries.size());
    add_u64(out, entries.size());
    add_u64(out, directory_size);
    add_u64(out, zip.directory_offset);
    zip.zip64_locator_offset = out.size();
    add_u32(out, 0x07064b50);
    add_u32(out, 0);
    add_u64(out, zip.zip64_record_offset);
    add_u32(out, 1);
  }
  zip.end_offset = out.size();
  add_u32(out, 0x06054b50);
  add_u16(out, 0);
  add_u16(out, 0);
  add_u16(out, options.zip64 ? 0xFFFF : static_cast<uint16_t>(entries.size()));
  add_u16(out, options.zip64 ? 0xFFFF : static_cast<uint16_t>(entries.size()));
  add_u32(out, options.zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(directory_size));
  add_u32(out, options.zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(zip.directory_offset));
  add_u16(out, static_cast<uint16_t>(options.comment.size()));
  out += options.comment;
  return zip;
}

}  // namespace ckpt::testing
