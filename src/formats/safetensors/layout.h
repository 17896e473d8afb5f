#pragma once
// The safetensors byte layout, as constants with their provenance. Mirrors
// docs/formats/safetensors.md; change both together.
//
//   [8 bytes]  N, little-endian u64: the length of the header
//   [N bytes]  the header: a UTF-8 JSON object, padded with spaces
//              {"__metadata__": {str: str},            (optional)
//               NAME: {"dtype": CODE, "shape": [d0, d1, ...],
//                      "data_offsets": [BEGIN, END]}, ...}
//   [rest]     the data buffer; each tensor's bytes are [BEGIN, END) of it,
//              little-endian, C order, contiguous from 0, no holes, no
//              trailing bytes
//
// Reference: huggingface/safetensors, safetensors/src/tensor.rs
// (SafeTensors::read_metadata, Metadata::validate, prepare, enum Dtype).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ckpt::safetensors_detail {

// tensor.rs N_LEN: the header length prefix, a little-endian u64.
constexpr size_t kHeaderLengthSize = 8;
// tensor.rs MAX_HEADER_SIZE: longer headers are refused (HeaderTooLarge).
constexpr uint64_t kMaxHeaderSize = 100'000'000;
// tensor.rs prepare(): "Force alignment to 8 bytes": the header is padded
// with spaces to a multiple of 8, so that the data buffer starts 8-aligned.
constexpr size_t kHeaderAlignment = 8;
constexpr char kHeaderPadding = ' ';
// ckpt's own files (with extras; never the reference layout, which stays
// byte-identical to safetensors') pad the header further, so that the data
// buffer starts 64-aligned in the file: the kernel's copy into the page cache
// (rep movsb) runs 1.2-2x slower when a tensor's file offset and its memory
// address differ by 1-31 bytes mod 64 (docs/formats/safetensors.md), and
// tensors in 64-aligned memory then keep their alignment in the file.
constexpr size_t kDataAlignment = 64;

// Header keys (tensor.rs HashMetadata / TensorInfo field names).
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kDTypeField = "dtype";
constexpr std::string_view kShapeField = "shape";
constexpr std::string_view kOffsetsField = "data_offsets";

// One variant of tensor.rs `enum Dtype`.
struct ReferenceDType {
  std::string_view code;  // as serde writes the variant: "F32"
  uint8_t bits;           // Dtype::bitsize()
};

// tensor.rs `enum Dtype` in declaration order, which is the order its derived
// Ord compares in ("They MUST be in increasing alignment order"). The
// reference writer sorts tensors by this rank descending, then by name.
// Note that C64 sits between F32 and F64, and that F6_E2M3 and F6_E3M2 are
// valid in files but have no ckpt dtype (reading them throws kUnsupported).
// F4 is read as float4_e2m1fn_x2 (see kFloat4Code).
inline constexpr std::array<ReferenceDType, 22> kReferenceDTypes = {{
    {"BOOL", 8},
    {"F4", 4},
    {"F6_E2M3", 6},
    {"F6_E3M2", 6},
    {"U8", 8},
    {"I8", 8},
    {"F8_E5M2", 8},
    {"F8_E4M3", 8},
    {"F8_E8M0", 8},
    {"F8_E4M3FNUZ", 8},
    {"F8_E5M2FNUZ", 8},
    {"I16", 16},
    {"U16", 16},
    {"F16", 16},
    {"BF16", 16},
    {"I32", 32},
    {"U32", 32},
    {"F32", 32},
    {"C64", 64},
    {"F64", 64},
    {"I64", 64},
    {"U64", 64},
}};

// The rank of `code` in kReferenceDTypes, or nullopt for a code that the
// reference does not know (such a header is invalid JSON to the reference:
// "unknown variant").
constexpr std::optional<size_t> reference_rank(std::string_view code) {
  for (size_t i = 0; i < kReferenceDTypes.size(); ++i) {
    if (kReferenceDTypes[i].code == code) return i;
  }
  return std::nullopt;
}

// F4 (float4_e2m1fn, 4 bits) has no byte-sized ckpt dtype: ckpt holds it as
// float4_e2m1fn_x2, two values per byte, as torch packs them
// (torch.float4_e2m1fn_x2, which safetensors' torch bindings load F4 as). The header's
// shape counts values, ckpt's shape counts bytes: the reader halves the last
// dimension (an odd one is kUnsupported; a 0-d F4 tensor, 4 bits, is
// kCorrupt as in the reference), the writer doubles it.
constexpr std::string_view kFloat4Code = "F4";
constexpr int64_t kFloat4PerByte = 2;

// JSON whitespace (RFC 8259), which the reference's serde_json accepts before
// and after the header object (tensor.rs test_whitespace_*_padded_header).
constexpr bool is_json_whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// ---- ckpt's extras (SaveOptions.extras) -------------------------------------
//
// One key in __metadata__ whose value is a JSON document, as a string:
//   {"version": 1,
//    "tree": <tree skeleton, formats/tree_json.h>,
//    "checksum": "xxh3" | "crc32c",            (absent: no checksums)
//    "checksums": {NAME: HEX, ...},            (with "checksum"; file order)
//    "dtypes": {NAME: "complex128", ...},      (absent when empty)
//    "aliases": {ALIAS: STORED, ...}}          (absent when empty; version 2)
// User metadata keeps every other key of __metadata__.

constexpr std::string_view kCkptKey = "ckpt";
// The newest version of the document above that this reader knows; a reader
// refuses newer versions (kUnsupported).
constexpr int64_t kCkptVersion = 2;
// Version 2 adds "aliases". A writer puts the lowest version that holds the
// file, so files without tied tensors stay readable by every ckpt (version
// 1), and a ckpt that predates aliases refuses the others as written by a
// newer ckpt instead of calling them corrupt.
constexpr int64_t kCkptVersionWithoutAliases = 1;
constexpr int64_t kCkptAliasesVersion = 2;
constexpr std::string_view kVersionField = "version";
constexpr std::string_view kTreeField = "tree";
constexpr std::string_view kChecksumField = "checksum";
constexpr std::string_view kChecksumsField = "checksums";
constexpr std::string_view kDTypesField = "dtypes";
// Tied tensors: tensor leaves viewing the very same bytes (Tensor::
// same_memory) with the same dtype and shape are stored once, under the name
// of the first in tree order; each later one is an alias: its name stays in
// the skeleton, and "aliases" maps it to the stored name. Aliases are not
// header entries, so safetensors' no-overlap rule holds and plain readers see
// only the stored tensor (as huggingface's save_model leaves it).
constexpr std::string_view kAliasesField = "aliases";

// complex128 has no safetensors code: with extras it is stored as F64 with one
// more, trailing, dimension of 2 (real, imaginary: the same bytes), and
// "dtypes" names its ckpt dtype. Without extras it cannot be stored.
constexpr std::string_view kComplex128StorageCode = "F64";

}  // namespace ckpt::safetensors_detail
