#pragma once
// Writing torch.save zip files, laid out as PyTorch 2.x writes them: records
// data.pkl, .format_version, .storage_alignment, byteorder, data/<key> (in
// string order), version, .data/serialization_id; every record's data
// 64-byte aligned with "FB" padding extras, data descriptors with CRC-32,
// zip64 end records. Record names: layout.h; byte layout: docs/formats/torch.md.

#include <filesystem>
#include <string_view>

#include "ckpt/format.h"
#include "io/atomic_file.h"

namespace ckpt::torch_detail {

// Writes `tree` to `path` atomically. Maps whose children are all tensors
// become OrderedDicts (state dicts), other maps dicts; lists become lists;
// bytes become Python bytes. Tensors whose bytes overlap in memory (tied
// weights, views read from a torch file) are written as one storage with
// views; a non-contiguous view is written as its whole storage plus strides.
// Throws Error{kUnsupported} for strings that are not valid UTF-8.
void write_file(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

// Writes `tree` as write_file() lays it out, its records in the folder
// `name`/, into `file` at `offset` (an archive embedded in a larger file: an
// item of a PyTorch DCP .distcp file); offsets inside the archive count from
// `offset`, as torch.save into a stream writes them. Returns the archive's
// size in bytes. Commit is the caller's. Throws as write_file() does.
uint64_t write_archive(detail::AtomicFile& file, uint64_t offset, const Tree& tree, std::string_view name,
                       const SaveOptions& options);

}  // namespace ckpt::torch_detail
