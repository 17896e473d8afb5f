#pragma once
// Reading torch.save files: the zip format (torch >= 1.6) and the legacy
// sequence-of-pickles format (_use_new_zipfile_serialization=False).
// Byte layout: docs/formats/torch.md.

#include <filesystem>
#include <span>

#include "ckpt/format.h"
#include "formats/torch/pickle_reader.h"
#include "io/mapped_file.h"

namespace ckpt::torch_detail {

// True for a zip whose first member lies in a folder and is not an .npy (torch
// zips start with "<archive>/data.pkl"), or a legacy file's magic pickle.
bool detect_file(std::span<const std::byte> head, uint64_t file_size);

// Reads `path` lazily: contiguous tensors view the mapped file, other views
// are gathered when first used. Throws Error{kCorrupt} naming the file, the
// record or tensor, and the offset; Error{kUnsupported} for refused globals.
Contents read_file(const std::filesystem::path& path, const LoadOptions& options);

// Reads the torch.save zip archive that occupies [offset, offset + size) of
// `file` (an archive embedded in a larger file: each item of a PyTorch DCP
// .distcp file), as read_file() reads a whole file. Offsets inside the
// archive (Contents::entries, error messages) count from `offset`.
// Throws as read_file() does, and Error{kCorrupt} if the range does not lie
// inside the file.
Contents read_embedded(std::shared_ptr<const detail::MappedFile> file, uint64_t offset, uint64_t size,
                       const LoadOptions& options);

// Builds the tree a pickle describes, making each tensor with `tensor_of`
// (called once per TensorRef index). Exposed for the legacy reader and tests.
// Throws Error{kUnsupported} for values a Tree cannot hold (integers wider
// than 64 bits, complex scalars, bare storages, dict keys that are not
// strings or integers) and Error{kCorrupt} for nesting deeper than 512 or a
// pickle whose shared references make a tree that costs more than 32 bytes
// per byte of `pickle_size` plus 4 MiB (reader.cc; docs/formats/torch.md).
// A memoized str or bytes is one payload shared by all its references.
Tree pickle_to_tree(const Pickle& pickle, size_t pickle_size, const std::function<Tensor(uint32_t)>& tensor_of);

}  // namespace ckpt::torch_detail
