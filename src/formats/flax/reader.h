#pragma once
// Reading Flax msgpack files, and telling them from other files by their
// first bytes. Byte layout: layout.h, docs/formats/flax.md.

#include <cstdint>
#include <filesystem>
#include <span>

#include "ckpt/format.h"

namespace ckpt::flax_detail {

// Reads a Flax msgpack file; see format.h for the tree it gives.
Contents read_file(const std::filesystem::path& path, const LoadOptions& options);

// True if `head` (the first bytes of a file of `file_size` bytes) is a
// top-level msgpack map that validates as far as `head` reaches and, if the
// whole file is in `head`, ends exactly at its end.
bool detect_head(std::span<const std::byte> head, uint64_t file_size);

}  // namespace ckpt::flax_detail
