#pragma once
// Reading NumPy's .npy and .npz files, and telling them from other files by
// their first bytes. Byte layout: layout.h, docs/formats/numpy.md.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "ckpt/format.h"
#include "ckpt/tensor.h"

namespace ckpt::numpy_detail {

// ---- What a header says ----
struct NpyHeader {
  uint8_t major = 1;
  uint8_t minor = 0;
  DType dtype = DType::kFloat32;
  bool big_endian = false;      // descr '>...': the data is byte-swapped on read
  bool fortran_order = false;   // the data is column-major: transposed on read
  Shape shape;
  uint64_t data_offset = 0;     // prefix + header text: where the data starts
  uint64_t data_size = 0;       // numel × element size
};

// Where an .npy lies, for error messages: the file, the zip entry (npz), and
// the byte offset of the .npy's first byte in the file (absent when the .npy
// was inflated from a deflated zip entry; messages then give the offset
// inside the entry).
struct NpyLocation {
  std::filesystem::path path;
  std::string entry;
  std::optional<uint64_t> file_offset = 0;
};

// Parses the prefix and header of the .npy in `bytes` (the whole .npy).
// Throws Error{kCorrupt} for a bad magic, a header length beyond `bytes`, a
// header that is not the dict above (missing, extra or duplicate keys, a
// descr that is not a numpy type string, fortran_order not a bool, shape not
// a tuple of non-negative integers, non-ASCII bytes outside strings, no final
// newline), or a size that overflows; {kUnsupported} for an unknown version
// or a numpy type ckpt lacks (structured, void including ml_dtypes' bfloat16
// and float8, strings, objects, datetimes, long double).
NpyHeader parse_npy_header(std::span<const std::byte> bytes, const NpyLocation& where);

// Returns the tensor of the .npy in `npy` whose header is `header`.
// Little-endian, C-order data at an address aligned for the dtype is a view
// of `npy` (no copy); otherwise the data is copied, byte-swapped and/or
// transposed into C order.
// Throws Error{kCorrupt} if `npy` is shorter than the header says, or has
// bytes after the data ({kUnsupported} if those bytes are another .npy, as
// repeated np.save calls into one file leave them).
Tensor npy_tensor(const NpyHeader& header, const Buffer& npy, const NpyLocation& where);

// True if `head` starts with the .npy magic.
bool detect_npy(std::span<const std::byte> head);

// True if `head` (the first bytes of a file of `file_size` bytes) is a zip
// whose first member is "<key>.npy" (torch's zips start with
// "<archive>/data.pkl" and are not claimed), or an archive without members
// (what np.savez writes for no arrays).
bool detect_npz(std::span<const std::byte> head, uint64_t file_size);

// The .npy at `path` as a bare tensor leaf (Tree(Tensor)), viewing the
// mapped file where npy_tensor can. Contents.entries holds the one tensor
// (name ""), at the header's data offset.
// Throws as parse_npy_header and npy_tensor, naming `path`.
Contents read_npy(const std::filesystem::path& path, const LoadOptions& options);

// Members in archive order, then the comment's aliases (each a Tensor over
// its stored member's Buffer, so same_memory) in the comment's order.
Contents read_npz(const std::filesystem::path& path, const LoadOptions& options);

}  // namespace ckpt::numpy_detail
