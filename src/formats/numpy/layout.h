#pragma once
// The byte layout of NumPy's .npy files, and of .npz archives, which are
// zips of them (formats/zip/layout.h). Mirrors docs/formats/numpy.md.
//
// Source: numpy/lib/_format_impl.py (numpy 2.3; numpy/lib/format.py in
// older releases): MAGIC_PREFIX, _header_size_info, ARRAY_ALIGN,
// GROWTH_AXIS_MAX_DIGITS, _write_array_header, _wrap_header,
// _read_array_header.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ckpt/tensor.h"

namespace ckpt::numpy_detail {

// ---- Prefix: magic, version, header length (format.py: MAGIC_PREFIX, MAGIC_LEN) ----
// "\x93NUMPY", then major and minor version bytes.
constexpr std::array<std::byte, 6> kMagic = {std::byte{0x93}, std::byte{'N'}, std::byte{'U'},
                                             std::byte{'M'},  std::byte{'P'}, std::byte{'Y'}};
constexpr size_t kMagicSize = 6;
constexpr size_t kVersionOffset = 6;        // major, minor: (1,0), (2,0) or (3,0)
constexpr size_t kHeaderLengthOffset = 8;   // u16 LE in 1.0, u32 LE in 2.0 and 3.0
constexpr size_t kPrefixSizeV1 = 10;        // magic + version + u16
constexpr size_t kPrefixSizeV2 = 12;        // magic + version + u32
// 1.0: header text is latin1 (ASCII in practice); 2.0: same with a 4-byte
// length; 3.0: UTF-8 (only structured dtypes with unicode field names need it).

// ---- Header text (format.py: _write_array_header, _wrap_header) ----
// A Python dict literal with the keys in sorted order, written as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// then, for shape != (), 21 - len(repr(shape[0])) spaces (GROWTH_AXIS_MAX_DIGITS:
// room to grow the first axis in place), then spaces so that prefix + text +
// "\n" is a multiple of 64 (ARRAY_ALIGN; a full 64 spaces when it already is),
// then "\n". Version 1.0 unless the length no longer fits in a u16.
constexpr size_t kArrayAlign = 64;
constexpr size_t kGrowthAxisMaxDigits = 21;
// numpy arrays have at most 64 dimensions (NPY_MAXDIMS in numpy 2).
constexpr size_t kMaxDimensions = 64;

// The header's shape: Python's repr of the tuple, "()", "(3,)", "(2, 3)".
inline std::string shape_repr(const Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  out += ")";
  return out;
}

// ---- .npz: a zip archive whose members are "<key>.npy" files ----
constexpr std::string_view kMemberSuffix = ".npy";
// Python's zipfile uses zip64 for sizes and offsets above 2^31 - 1 (its
// ZIP64_LIMIT); np.savez forces a zip64 extra field into every local header.
constexpr uint64_t kPythonZip64Limit = (uint64_t{1} << 31) - 1;
// ckpt's own npz files align every member's data (and so, with the .npy
// header a multiple of 64, every array) to this.
constexpr uint32_t kMemberAlignment = 64;

// ---- .npz: ckpt's archive comment, naming tied tensors (npz_comment.cc) ----
// With extras, a tensor tied to an earlier leaf (Tensor::same_memory, same
// dtype and shape) is not a member of its own: the zip archive comment (which
// np.load and zipfile ignore) records it as an alias of the stored key:
//   ckpt:{"version":1,"aliases":{"lm_head.weight":"embed.weight"}}
// A comment is ckpt's when it starts with the prefix and '{'; any other
// comment (another tool's) is ignored. No comment is written without ties.
constexpr std::string_view kNpzCommentPrefix = "ckpt:";
constexpr int64_t kNpzCommentVersion = 1;
constexpr std::string_view kNpzVersionField = "version";
constexpr std::string_view kNpzAliasesField = "aliases";
// The entry that errors about the comment name.
constexpr std::string_view kNpzCommentEntry = "zip comment";

}  // namespace ckpt::numpy_detail
