#pragma once
// Writing an Orbax checkpoint: one item directory in the per-array zarr v2
// layout (use_ocdbt=False), with _METADATA and _CHECKPOINT_METADATA as Orbax
// writes them. See docs/formats/orbax.md.

#include <filesystem>

#include "ckpt/format.h"

namespace ckpt::orbax_detail {

// capabilities().write.
inline constexpr bool kWriterReady = true;

// Writes `tree` as one Orbax item directory at `path` (what
// ocp.PyTreeCheckpointer(use_ocdbt=False).save(path, tree) writes, minus
// _sharding, which numpy arrays do not need): _METADATA, _CHECKPOINT_METADATA
// (without timestamps, so that a save is deterministic), _strings.json when
// the tree holds strings, and per array `<name>/.zarray` plus one
// uncompressed chunk covering the array (`<name>/0.0`; "0" when 0-d).
// Tensors are np.ndarray leaves; bool, int and float leaves Python scalars
// (0-d "|b1", "<i8", "<f8" arrays); none, empty maps and empty lists keep
// their kinds. With options.extras, integer map keys are written as their
// decimal text and bytes leaves as None, and _CHECKPOINT_METADATA's
// custom_metadata holds ckpt's record of the exact tree (metadata.h
// find_record), from which ckpt reads it back unchanged.
//
// Atomic (io/atomic_directory.h): everything is written into an
// AtomicDirectory beside `path` (with options.fsync, made durable by one
// syncfs() of that file system rather than an fsync per file), which then
// replaces `path` with one rename (an exchange when `path` is an existing
// checkpoint, whose old copy is removed afterwards), and the parent is
// fsynced: a reader sees the old checkpoint or the new one, never a
// mixture. A failure leaves `path` as it was and removes the temporary
// directory.
//
// Throws Error{kUnsupported} naming the entry for what Orbax cannot hold (a
// root that is not a map or list, two leaves with one Orbax parameter name,
// keys with "/", a map with both the integer key N and the string key "N";
// without extras also bytes and integer map keys; with extras, strings that
// are not UTF-8), {kInvalidArgument} if `path`
// is something other than an Orbax checkpoint or an empty directory, {kIo}
// if writing fails.
void write_checkpoint(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

}  // namespace ckpt::orbax_detail
