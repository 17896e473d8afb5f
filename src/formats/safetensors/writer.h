#pragma once
// Writing safetensors files in the reference writer's layout. Layout: layout.h.

#include <filesystem>

#include "ckpt/format.h"

namespace ckpt::safetensors_detail {

// Writes `tree` to `path` atomically: tensors ordered as the reference
// writer orders them (dtype rank descending, then name), compact JSON header
// with __metadata__ first, padded with spaces to a multiple of 8. With
// options.extras off and a flat map of names to tensors, the bytes equal
// those of huggingface's safetensors `save_file` for the same tensors and
// (at most one key of) metadata.
// Tied tensors (Tensor::same_memory, same dtype and shape): with extras the
// bytes are stored once, under the first leaf's name in tree order, and the
// others are recorded as aliases of it; without extras each leaf gets its own
// copy of the bytes.
// Throws Error{kUnsupported} if the file cannot hold the tree: without extras,
// any non-tensor leaf, list, integer key, empty nested container, or leaf
// names that collide; always, names or metadata that are not valid UTF-8, a
// tensor named "__metadata__", complex128 without extras, a header over
// kMaxHeaderSize. {kInvalidArgument} if options.metadata uses ckpt's own key
// (kCkptKey, reserved with or without extras). {kIo} from the file system.
void write_file(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

}  // namespace ckpt::safetensors_detail
