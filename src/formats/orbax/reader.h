#pragma once
// Reading an Orbax checkpoint directory: a step directory (with
// _CHECKPOINT_METADATA and one folder per item) or one item's directory
// (with _METADATA), whose arrays are zarr v2, in an OCDBT database or one
// folder per array.

#include <filesystem>

#include "ckpt/format.h"

namespace ckpt::orbax_detail {

// True if `path` is a directory holding _METADATA or _CHECKPOINT_METADATA.
// Never throws.
bool detect_checkpoint(const std::filesystem::path& path) noexcept;

// The tree of `path`: an item's tree as _METADATA describes it; a step's
// tree is {item name: item tree}, or the item's tree itself when the only
// item is "default" (Orbax's name for the unnamed item). An item directory
// holding ckpt's record (metadata.h find_record) reads as the record's tree.
// Contents.metadata is _CHECKPOINT_METADATA flattened (see metadata.h),
// without the record.
//
// With options.lazy (and not options.verify), compressed arrays are decoded
// when their bytes are first used (see read_zarr_array): damage that only
// decoding finds throws Error{kCorrupt} from that use. Otherwise every array
// is decoded here, on options.threads threads.
// Throws Error{kNotFound} if `path` does not exist, {kUnsupported} if it is
// not an Orbax directory or holds what ckpt does not read, {kCorrupt} naming
// the file and entry for any defect.
Contents read_checkpoint(const std::filesystem::path& path, const LoadOptions& options);

}  // namespace ckpt::orbax_detail
