#pragma once
// The byte layout of zip archives, as far as ckpt reads and writes them: the
// records, their fixed sizes and field offsets, and little-endian accessors.
// Mirrors docs/formats/zip.md.
//
// Source: PKWARE APPNOTE.TXT 6.3.10, sections 4.3.6 (overall structure),
// 4.3.7 (local file header), 4.3.9 (data descriptor), 4.3.12 (central
// directory header), 4.3.14 (zip64 end of central directory record), 4.3.15
// (zip64 end of central directory locator), 4.3.16 (end of central directory
// record), 4.5.3 (zip64 extended information extra field). All integers are
// little-endian.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace ckpt::zip_detail {

// ---- Signatures (APPNOTE 4.3.7, 4.3.9, 4.3.12, 4.3.14-4.3.16) ----
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;        // "PK\3\4"
constexpr uint32_t kDataDescriptorSignature = 0x08074b50;     // "PK\7\8"
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;      // "PK\1\2"
constexpr uint32_t kZip64EndRecordSignature = 0x06064b50;     // "PK\6\6"
constexpr uint32_t kZip64EndLocatorSignature = 0x07064b50;    // "PK\6\7"
constexpr uint32_t kEndRecordSignature = 0x06054b50;          // "PK\5\6"
// The same signature as the bytes in the file, to search for.
constexpr std::string_view kEndRecordSignatureBytes{"PK\x05\x06", 4};

// ---- Local file header, 30 bytes + name + extra (APPNOTE 4.3.7) ----
constexpr size_t kLocalHeaderSize = 30;
namespace local {
constexpr size_t kSignature = 0;         // u32
constexpr size_t kVersionNeeded = 4;     // u16
constexpr size_t kFlags = 6;             // u16
constexpr size_t kMethod = 8;            // u16
constexpr size_t kTime = 10;             // u16, MS-DOS time
constexpr size_t kDate = 12;             // u16, MS-DOS date
constexpr size_t kCrc32 = 14;            // u32
constexpr size_t kCompressedSize = 18;   // u32 (0xFFFFFFFF: see zip64 extra)
constexpr size_t kUncompressedSize = 22; // u32 (0xFFFFFFFF: see zip64 extra)
constexpr size_t kNameLength = 26;       // u16
constexpr size_t kExtraLength = 28;      // u16
}  // namespace local

// ---- Data descriptor (APPNOTE 4.3.9): optional signature, crc, sizes ----
// Sizes are 4 bytes each, or 8 when the entry uses zip64.
constexpr size_t kDataDescriptorSize32 = 16;  // with signature
constexpr size_t kDataDescriptorSize64 = 24;  // with signature

// ---- Central directory file header, 46 bytes + name + extra + comment (4.3.12) ----
constexpr size_t kCentralHeaderSize = 46;
namespace central {
constexpr size_t kSignature = 0;          // u32
constexpr size_t kVersionMadeBy = 4;      // u16: high byte = host system (3 = UNIX)
constexpr size_t kVersionNeeded = 6;      // u16
constexpr size_t kFlags = 8;              // u16
constexpr size_t kMethod = 10;            // u16
constexpr size_t kTime = 12;              // u16
constexpr size_t kDate = 14;              // u16
constexpr size_t kCrc32 = 16;             // u32
constexpr size_t kCompressedSize = 20;    // u32
constexpr size_t kUncompressedSize = 24;  // u32
constexpr size_t kNameLength = 28;        // u16
constexpr size_t kExtraLength = 30;       // u16
constexpr size_t kCommentLength = 32;     // u16
constexpr size_t kDiskStart = 34;         // u16
constexpr size_t kInternalAttributes = 36;  // u16
constexpr size_t kExternalAttributes = 38;  // u32
constexpr size_t kLocalHeaderOffset = 42;   // u32
}  // namespace central

// ---- End of central directory record, 22 bytes + comment (4.3.16) ----
constexpr size_t kEndRecordSize = 22;
constexpr size_t kMaxCommentLength = 0xFFFF;
namespace end_record {
constexpr size_t kSignature = 0;         // u32
constexpr size_t kDisk = 4;              // u16
constexpr size_t kDirectoryDisk = 6;     // u16
constexpr size_t kEntriesOnDisk = 8;     // u16
constexpr size_t kEntries = 10;          // u16
constexpr size_t kDirectorySize = 12;    // u32
constexpr size_t kDirectoryOffset = 16;  // u32
constexpr size_t kCommentLength = 20;    // u16
}  // namespace end_record

// ---- Zip64 end of central directory locator, 20 bytes (4.3.15) ----
// Immediately precedes the end of central directory record.
constexpr size_t kZip64LocatorSize = 20;
namespace zip64_locator {
constexpr size_t kSignature = 0;      // u32
constexpr size_t kDisk = 4;           // u32: disk holding the zip64 record
constexpr size_t kRecordOffset = 8;   // u64: offset of the zip64 end record
constexpr size_t kDiskCount = 16;     // u32: total number of disks (1)
}  // namespace zip64_locator

// ---- Zip64 end of central directory record, 56 bytes + extensible data (4.3.14) ----
constexpr size_t kZip64EndRecordSize = 56;
// The record's own size field counts the bytes after it: 56 - 12.
constexpr uint64_t kZip64EndRecordRemainder = 44;
namespace zip64_end {
constexpr size_t kSignature = 0;         // u32
constexpr size_t kRecordSize = 4;        // u64: size of the rest of the record
constexpr size_t kVersionMadeBy = 12;    // u16
constexpr size_t kVersionNeeded = 14;    // u16
constexpr size_t kDisk = 16;             // u32
constexpr size_t kDirectoryDisk = 20;    // u32
constexpr size_t kEntriesOnDisk = 24;    // u64
constexpr size_t kEntries = 32;          // u64
constexpr size_t kDirectorySize = 40;    // u64
constexpr size_t kDirectoryOffset = 48;  // u64
}  // namespace zip64_end

// ---- Extra fields (4.5): u16 id, u16 data size, data ----
constexpr size_t kExtraHeaderSize = 4;
// Zip64 extended information (4.5.3): the 64-bit values of exactly those
// fields whose 32-bit slots hold 0xFFFFFFFF, in this order: uncompressed
// size, compressed size, local header offset (u64 each), disk start (u32).
constexpr uint16_t kZip64ExtraId = 0x0001;
// PyTorch's alignment padding (caffe2/serialize/inline_container.cc,
// getPadding): id "FB", data = padding bytes 'Z', placed in the local header
// so that the entry's data starts at a multiple of 64.
constexpr uint16_t kPaddingExtraId = 0x4246;  // bytes 'F', 'B'
constexpr std::byte kPaddingFill{'Z'};

// ---- Field values ----
constexpr uint16_t kMethodStored = 0;    // 4.4.5
constexpr uint16_t kMethodDeflated = 8;  // 4.4.5, raw deflate (RFC 1951)
constexpr uint16_t kFlagEncrypted = 1u << 0;       // 4.4.4 bit 0
constexpr uint16_t kFlagDataDescriptor = 1u << 3;  // bit 3: crc/sizes follow the data
constexpr uint16_t kFlagStrongEncryption = 1u << 6;
constexpr uint16_t kFlagUtf8 = 1u << 11;           // bit 11: name and comment are UTF-8
constexpr uint16_t kVersionDefault = 20;  // 2.0: deflate, folders (4.4.3.2)
constexpr uint16_t kVersionZip64 = 45;    // 4.5: zip64
constexpr uint16_t kSystemUnix = 3;       // 4.4.2.2
// A 32-bit size or offset of 0xFFFFFFFF (and a u16 count of 0xFFFF) defers to zip64.
constexpr uint32_t kZip64Sentinel32 = 0xFFFFFFFF;
constexpr uint16_t kZip64Sentinel16 = 0xFFFF;
// MS-DOS date of 1980-01-01 (the earliest zip can hold), time 00:00:00;
// what Python's zipfile.ZipInfo uses by default.
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;
constexpr uint16_t kDosTimeMidnight = 0;

// ---- Little-endian access ----
inline uint16_t load_u16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) | std::to_integer<uint16_t>(p[1]) << 8);
}
inline uint32_t load_u32(const std::byte* p) {
  return static_cast<uint32_t>(load_u16(p)) | static_cast<uint32_t>(load_u16(p + 2)) << 16;
}
inline uint64_t load_u64(const std::byte* p) {
  return static_cast<uint64_t>(load_u32(p)) | static_cast<uint64_t>(load_u32(p + 4)) << 32;
}

// Appends little-endian integers to a byte string.
inline void append_u16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v & 0xFF));
  out.push_back(static_cast<char>(v >> 8));
}
inline void append_u32(std::string& out, uint32_t v) {
  append_u16(out, static_cast<uint16_t>(v & 0xFFFF));
  append_u16(out, static_cast<uint16_t>(v >> 16));
}
inline void append_u64(std::string& out, uint64_t v) {
  append_u32(out, static_cast<uint32_t>(v & 0xFFFFFFFF));
  append_u32(out, static_cast<uint32_t>(v >> 32));
}

}  // namespace ckpt::zip_detail
