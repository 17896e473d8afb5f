#pragma once
// Reading safetensors files: validation as the reference reader does it, then
// tensors that view a mapping of the file. Layout: layout.h.

#include <cstdint>
#include <filesystem>
#include <span>

#include "ckpt/format.h"

namespace ckpt::safetensors_detail {

// True if `head` (the first bytes of a file of `file_size` bytes) starts a
// safetensors file: a header length N <= kMaxHeaderSize with 8 + N <=
// file_size, then optional JSON whitespace and '{'.
bool detect_header(std::span<const std::byte> head, uint64_t file_size);

// Maps `path` and returns its tensors (views of the mapping), in file order.
// With ckpt's extras in __metadata__ the tree is rebuilt from the stored
// skeleton, each alias (tied tensor) a Tensor over its stored tensor's Buffer
// (same_memory); otherwise it is a flat map name → tensor in file order.
// Contents.entries lists the stored tensors only, in file order.
// Throws Error{kCorrupt} naming the file, the entry and the byte offset if the
// file fails validation (or, with options.verify, a checksum);
// {kUnsupported} for a valid file holding a dtype ckpt lacks (F4, F8_E8M0, ...)
// or a newer extras version; {kNotFound}/{kIo} from opening the file.
Contents read_file(const std::filesystem::path& path, const LoadOptions& options);

}  // namespace ckpt::safetensors_detail
