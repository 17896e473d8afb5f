#pragma once
// What the manager does with a state on its way into a step directory: the
// state's name in it, a snapshot for an asynchronous save, the digest that
// tells an unchanged state, hard links from the previous step (dedup), and
// the files list of checkpoint.json.

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/tree.h"
#include "manager/step_record.h"

namespace ckpt::detail {

// "state" plus the format's first extension ("state.safetensors",
// "state.pt"); "state" for a format that keeps a state file beside its
// checkpoints (a TF bundle prefix: state.index, state.data-*) or has no
// extension (an Orbax directory).
std::string state_name(const Format& format);

// A copy of `state` that the caller's later writes cannot change: tensors
// in heap memory (writable) or lent memory (numpy, torch) are copied,
// tensors viewing them that shared memory share the copy again; mapped
// tensors (a private, read-only mapping of a file) and deferred views of
// mapped data are shared, not copied. The copies lie in one heap block:
// `spare` when it is large enough (the block of an earlier snapshot that is
// written and released, its pages already faulted in), else a new one.
// Throws Error{kUnsupported} when a copy needs more memory than the machine
// has.
struct Snapshot {
  Tree state;
  Buffer block;  // where the copies lie (empty if nothing was copied)
};
Snapshot snapshot_state(const Tree& state, Buffer spare = {});

// 16 hex digits of xxh3 over the whole tree: every container's kind, size
// and keys, every leaf's kind and value, every tensor's dtype, shape and
// the xxh3 of its bytes. Equal digests: the same state byte for byte.
std::string state_digest(const Tree& state);

// The files under `step_dir` (a temporary step directory), sorted by path,
// each with its size and the xxh3 of its bytes. Throws Error{kIo}.
std::vector<RecordedFile> record_state_files(const std::filesystem::path& step_dir);

// Hard-links each of `files` from `from_dir` into `to_dir` (copying where
// the file system refuses a link; a copy is fsynced with `fsync`). Returns
// false, with whatever it put into `to_dir` removed, when a source is gone
// or its size is not the recorded one; throws Error{kIo} for other failures.
bool link_state_files(const std::filesystem::path& from_dir, const std::filesystem::path& to_dir,
                      const std::vector<RecordedFile>& files, bool fsync);

}  // namespace ckpt::detail
