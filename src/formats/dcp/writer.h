#pragma once
// Writing PyTorch DCP checkpoint directories as one process of
// torch.distributed.checkpoint.save would (no process group): one data file
// `__0_0.distcp` holding each item as a torch.save archive back to back, and
// `.metadata`, the pickle of DCP's Metadata with its classes named as torch
// 2.13 names them, so that torch.distributed.checkpoint.load reads it.
// Byte layout: docs/formats/dcp.md.

#include <filesystem>
#include <vector>

#include "ckpt/format.h"

namespace ckpt::dcp_detail {

// The dtypes a DCP checkpoint can hold: those torch has.
std::vector<DType> writable_dtypes();

// Writes `tree` as a DCP directory at `path`, atomically (a temporary
// directory beside it, synced with options.fsync, renamed into place).
// The tree is flattened as DCP's flatten_state_dict does (_traverse.py):
// maps are walked (integer keys become their decimal strings, as DCP's
// str(key) makes them), lists that hold tensors or maps are walked by
// position, and every other value is a leaf: a tensor is one chunk of its
// whole size (TensorStorageMetadata), anything else is torch.save'd as a
// bytes item (BytesStorageMetadata). fqns are the path joined with ".".
// Empty maps hold no item and do not come back.
// Throws Error{kUnsupported} if two leaves get one fqn or a tensor's dtype
// has no torch dtype, {kInvalidArgument} for a tree that is not a map.
void write_checkpoint(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

}  // namespace ckpt::dcp_detail
