#pragma once
// The byte layout of torch.save files: the records of the zip format and
// the magic of the legacy one. Mirrors docs/formats/torch.md.
//
// Source: torch/serialization.py (_save, _legacy_save, _load) and
// caffe2/serialize/inline_container.cc (PyTorchStreamWriter) of torch 2.x.

#include <cstdint>
#include <string_view>

namespace ckpt::torch_detail {

// ---- The zip format (torch >= 1.6): records under "<archive>/" ----
// The pickled object, whose persistent ids name the storages.
inline constexpr std::string_view kPickleRecord = "data.pkl";
// Storage `key` is the record kStorageFolder + key (keys "0", "1", ...).
inline constexpr std::string_view kStorageFolder = "data/";
// "little" or "big": the byte order of every storage (absent: little).
inline constexpr std::string_view kByteOrderRecord = "byteorder";
inline constexpr std::string_view kLittleEndian = "little";
inline constexpr std::string_view kBigEndian = "big";
// ".format_version" "1": storages are written in key order (torch may
// compute record offsets from that); ".storage_alignment": the alignment of
// every record's data.
inline constexpr std::string_view kFormatVersionRecord = ".format_version";
inline constexpr std::string_view kFormatVersion = "1";
inline constexpr std::string_view kStorageAlignmentRecord = ".storage_alignment";
inline constexpr uint32_t kStorageAlignment = 64;
// The archive's version record: "3\n" (PyTorchStreamWriter's kProducedFileFormatVersion).
inline constexpr std::string_view kVersionRecord = "version";
inline constexpr std::string_view kVersion = "3\n";
// 40 decimal digits that name the saved file.
inline constexpr std::string_view kSerializationIdRecord = ".data/serialization_id";
// ckpt's own: SaveOptions::metadata as a pickled dict of strings (a record
// torch.load never opens).
inline constexpr std::string_view kMetadataRecord = ".data/ckpt_metadata.pkl";

// ---- The legacy format (_use_new_zipfile_serialization=False) ----
// The first bytes of a legacy file: the pickled magic number 0x1950a86a20f9469cfc6c.
inline constexpr unsigned char kLegacyMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                                 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
// The pickled protocol version that follows the magic number.
inline constexpr int64_t kLegacyProtocolVersion = 1001;

}  // namespace ckpt::torch_detail
