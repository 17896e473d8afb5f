#pragma once
// Writing NumPy's .npy and .npz files as np.save and np.savez write them.
// Byte layout: layout.h, docs/formats/numpy.md.

#include <filesystem>
#include <string>
#include <string_view>

#include "ckpt/format.h"

namespace ckpt::numpy_detail {

// The prefix and header text that np.save writes for a C-order,
// little-endian array of `dtype` and `shape`: byte-identical to numpy's.
// Throws Error{kUnsupported} for a dtype numpy has no descr for.
std::string format_npy_header(DType dtype, const Shape& shape);

// The numpy descr of `dtype` ("<f4"), or throws Error{kUnsupported} naming
// the dtype and the reason (bfloat16 and float8 have none in plain numpy).
std::string_view npy_descr(DType dtype);

// Writes the one tensor of `tree` (bare, or the one leaf inside maps and
// lists) as an .npy at `path`, atomically: format_npy_header's header, then
// the C-order data. Throws Error{kUnsupported} naming `path` for a tree
// with other leaves or a dtype numpy lacks, {kInvalidArgument} for a tensor
// whose buffer does not match its dtype and shape.
void write_npy(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

// Every tensor leaf becomes a member, but with extras a tensor tied to an
// earlier leaf, which becomes an alias in the archive comment (as long as
// the comment fits in 65535 bytes; later ties are stored as copies).
void write_npz(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

}  // namespace ckpt::numpy_detail
