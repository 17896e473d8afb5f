#pragma once
// The byte layout of NumPy's .npy files and the functions that read and
// write it; .npz is a zip of them (zip_layout.h). Mirrors
// docs/formats/numpy.md.
//
// Source: numpy/lib/_format_impl.py (numpy 2.3; numpy/lib/format.py in
// older releases): MAGIC_PREFIX, _header_size_info, ARRAY_ALIGN,
// GROWTH_AXIS_MAX_DIGITS, _write_array_header, _wrap_header,
// _read_array_header.

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/format.h"
#include "ckpt/tensor.h"
#include "ckpt/tree.h"

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

// The prefix and header text that np.save writes for a C-order,
// little-endian array of `dtype` and `shape`: byte-identical to numpy's.
// Throws Error{kUnsupported} for a dtype numpy has no descr for.
std::string format_npy_header(DType dtype, const Shape& shape);

// The numpy descr of `dtype` ("<f4"), or throws Error{kUnsupported} naming
// the dtype and the reason (bfloat16 and float8 have none in plain numpy).
std::string_view npy_descr(DType dtype);

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

// Builds the comment, alias by alias, within zip's 65535 bytes.
class NpzCommentBuilder {
 public:
  NpzCommentBuilder();
  // Records `alias` (a leaf's key) as sharing the member of key `stored`.
  // Returns false, and records nothing from then on, if the comment would
  // outgrow 65535 bytes: that alias and every later one must be stored as
  // copies.
  bool add(std::string_view alias, std::string_view stored);
  // The comment; empty if no alias was recorded.
  std::string finish() const;

 private:
  std::string text_;
  size_t count_ = 0;
  bool full_ = false;
};

// One alias of a comment: a key without a member, whose tensor is the
// tensor of stored member `stored` (an index into the members).
struct NpzAlias {
  std::string name;
  size_t stored;
};

// The aliases of archive comment `comment` (which starts at byte `offset` of
// `path`), in the order written; `members` maps each stored key to its
// index. Returns std::nullopt for a comment that is not ckpt's.
// Throws Error{kCorrupt} (entry "zip comment") for a comment that is ckpt's
// but not valid JSON, not an object, with a field twice, a missing or
// non-positive-integer "version", no "aliases" object, an alias whose value
// is not a string, an alias named twice, an alias with a NUL byte or that is
// also a member's key, or one that names itself, another alias or a key
// without a member; {kUnsupported} for a version above kNpzCommentVersion.
std::optional<std::vector<NpzAlias>> read_npz_comment(std::string_view comment, const std::filesystem::path& path,
                                                      uint64_t offset,
                                                      const std::unordered_map<std::string_view, size_t>& members);

// ---- The formats' reading and writing (npy: format.cc, npz: npz.cc) ----
// Members in archive order, then the comment's aliases (each a Tensor over
// its stored member's Buffer, so same_memory) in the comment's order.
Contents read_npz(const std::filesystem::path& path, const LoadOptions& options);
// Every tensor leaf becomes a member, but with extras a tensor tied to an
// earlier leaf, which becomes an alias in the archive comment (as long as
// the comment fits in 65535 bytes; later ties are stored as copies).
void write_npz(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

}  // namespace ckpt::numpy_detail
