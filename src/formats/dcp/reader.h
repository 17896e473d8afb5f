#pragma once
// Reading PyTorch DCP checkpoint directories (torch.distributed.checkpoint
// .save with its FileSystemWriter, on any number of ranks): `.metadata`
// (metadata.h) and the `__<rank>_<n>.distcp` files whose items are each a
// torch.save archive (read by the torch format's reader). Byte layout:
// docs/formats/dcp.md.

#include <filesystem>

#include "ckpt/format.h"

namespace ckpt::dcp_detail {

// True if `path` is a directory holding a regular file `.metadata`. Never throws.
bool detect_checkpoint(const std::filesystem::path& path) noexcept;

// Reads the checkpoint at `path`: every tensor fqn becomes one tensor of its
// global size assembled from its chunks (each chunk a tensor viewing its
// torch.save archive in the mapped .distcp file; bytes are read when used),
// every bytes item the plain value torch.save'd there; nested fqns become
// the nested tree DCP flattened them from (its planner_data), so that names
// are the fqns. Tensors named in options.boxes are read only where their
// box overlaps chunks. Throws Error{kCorrupt} naming the file, the fqn and
// the offset for the first defect (metadata.h; an item outside its file, a
// chunk whose archive holds another dtype or shape than declared, chunks
// that overlap or leave a hole); Error{kUnsupported} for refused globals,
// in `.metadata` or in an item.
Contents read_checkpoint(const std::filesystem::path& path, const LoadOptions& options);

}  // namespace ckpt::dcp_detail
