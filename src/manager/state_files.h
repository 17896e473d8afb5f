#pragma once
// What the manager does with a state on its way into a step directory: the
// state's name in it, a snapshot for an asynchronous save, the digest that
// tells an unchanged state, hard links from the previous step (dedup), and
// the files list of checkpoint.json.

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/tree.h"
#include "io/file_hashes.h"
#include "manager/step_record.h"

namespace ckpt::detail {

// "state" plus the format's first extension ("state.safetensors",
// "state.pt"); "state" for a format that keeps a state file beside its
// checkpoints (a TF bundle prefix: state.index, state.data-*) or has no
// extension (an Orbax directory).
std::string state_name(const Format& format);
// The state of a sharded save (Manager::save_sharded): the Hugging Face
// sharded directory "state/" (its shards and index inside).
inline constexpr std::string_view kShardedStateName = "state";
// The same for a part of a state saved in parts: `stem` plus the format's
// first extension ("encoder.safetensors"), `stem` alone as above.
std::string part_file_name(const Format& format, std::string_view stem);
// Throws Error{kInvalidArgument} unless `stem` is a part's name: 1 to 100
// letters, digits, '_' and '-' (no '.', so that a part's files, "NAME.*" or
// "NAME/...", never mix with another part's).
void validate_part_name(std::string_view stem);
// Whether the step directory's file `path` ('/'-separated, relative)
// belongs to the part stored as `file_name`: the file itself, a file below
// it (an Orbax directory), or a file of its TF prefix ("NAME.index").
bool file_of_part(std::string_view path, std::string_view file_name);

// The union of a state's parts, in part order (a map's keys from each part
// after those of the parts before): maps are merged key by key, recursively.
// Throws Error{kCorrupt} naming the entry and `part_paths` (one per part)
// when two parts hold one leaf, or a node that is a map in one and not in
// another.
Tree merge_parts(std::vector<Tree> parts, const std::vector<std::filesystem::path>& part_paths);

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

// `hex`: 16 hex digits of xxh3 over the whole tree: every container's kind,
// size and keys, every leaf's kind and value, every tensor's dtype, shape
// and the xxh3 of its bytes. Equal digests: the same state byte for byte.
// `checksums`: those xxh3s of the tensors' bytes, as checksum_hex(kXxh3)
// gives them, by leaf name (Tree::tensor_leaves()): a save of the same
// state takes them as SaveOptions::known_checksums instead of reading the
// bytes again. `threads`: for hashing the tensors (0: default_threads(); a
// background commit passes 1, leaving the other cores to the training loop).
struct StateDigest {
  std::string hex;
  std::shared_ptr<const std::map<std::string, std::string>> checksums;
};
StateDigest state_digest(const Tree& state, unsigned threads = 0);

// The files under `step_dir` (a temporary step directory), sorted by path,
// each with its size and the xxh3 of its bytes, but for those in `known`
// (linked from the previous step, or recorded already: their record is
// that); with `part`, only the files of the part stored under that name
// (file_of_part), so that each part is recorded as soon as it is written.
// A file in `hashed` (hashed as it was written: io/file_hashes.h) of the
// size found is recorded from there; the others are read back.
// Throws Error{kIo}.
std::vector<RecordedFile> record_state_files(const std::filesystem::path& step_dir,
                                             const std::set<std::string>& known = {}, std::string_view part = {},
                                             const std::vector<HashedFile>& hashed = {});

// Hard-links each of `files` from `from_dir` into `to_dir` (copying where
// the file system refuses a link; a copy is fsynced with `fsync`). Returns
// false, with what it put into `to_dir` removed (each file's top-level entry
// there: a part owns its name), when a source is gone or its size is not the
// recorded one; throws Error{kIo} for other failures.
bool link_state_files(const std::filesystem::path& from_dir, const std::filesystem::path& to_dir,
                      const std::vector<RecordedFile>& files, bool fsync);

}  // namespace ckpt::detail
