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
// F4 tensors come back as float4_e2m1fn_x2 with the last dimension halved
// (layout.h kFloat4Code).
// {kUnsupported} for a valid file holding a dtype ckpt lacks (F6_E2M3,
// F6_E3M2), an F4 tensor with an odd last dimension, or a newer extras
// version; {kNotFound}/{kIo} from opening the file.
Contents read_file(const std::filesystem::path& path, const LoadOptions& options);

// As read_file, for a whole file already in memory (a Python bytes object, a
// mapping the caller made): the tensors view `bytes`, which they keep alive.
// `label` names the source in errors (it need not exist as a file).
Contents read_bytes(const Buffer& bytes, const std::filesystem::path& label, const LoadOptions& options);

}  // namespace ckpt::safetensors_detail
