#pragma once
// Which files a tensor bundle is: the paths a user may give for one, and the
// `checkpoint` state file (a CheckpointState in protobuf text format) that
// names the latest bundle of a directory.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/format.h"

namespace ckpt::tf_detail {

struct FindPrefixOptions {
  // The .index file must end with LevelDB's table magic (detection); off,
  // it need only exist (reading, which validates it in full).
  bool require_magic = true;
};

// The bundle prefix that `path` names, or nullopt: `path` itself when
// "<path>.index" is a file; "<path>" minus ".index" when `path` is the
// .index file; for a directory holding a `checkpoint` state file, its
// model_checkpoint_path (relative to the directory unless absolute); for a
// SavedModel directory, its "variables/variables" bundle. Cheap
// checks only (see FindPrefixOptions); never throws.
std::optional<std::filesystem::path> find_prefix(const std::filesystem::path& path,
                                                 const FindPrefixOptions& options = {}) noexcept;

// As find_prefix(path, {.require_magic = false}), for reading. Throws Error{kNotFound} naming
// `path` (or the state file's entry) when no bundle is there, {kCorrupt} if
// the state file cannot be parsed.
std::filesystem::path resolve_prefix(const std::filesystem::path& path);

// The prefix that saving to `path` writes: `path` minus a ".index" suffix.
std::filesystem::path prefix_for_write(const std::filesystem::path& path);

// Removes what a bundle at `prefix` of another shard count left behind:
// regular files named "<prefix>.data-K-of-M" (K and M in decimal, at least
// five digits each, as DataFilename writes them) whose M differs from
// `num_shards`. Call it only after a bundle of `num_shards` shards was
// committed at `prefix` (its .index renamed into place): that .index names
// none of them, so nothing readable is lost. Leaves every other file alone
// (other prefixes, "<prefix>.data-..." names of another shape, temporaries).
// Best effort: a file that cannot be removed stays. Never throws. Returns
// the files removed.
std::vector<std::filesystem::path> remove_stale_shards(const std::filesystem::path& prefix, int num_shards) noexcept;

// The fields of a `checkpoint` state file (TensorFlow's CheckpointState),
// as stored: paths relative to the file's directory or absolute.
struct StateFileContents {
  std::string model_checkpoint_path;
  std::vector<std::string> all_model_checkpoint_paths;
  std::vector<double> all_model_checkpoint_timestamps;  // seconds since the epoch; may be empty
};

// Parses the state file `file` (unknown fields are ignored, as TensorFlow's
// text parser would refuse them only in a newer proto). Throws Error{kIo}
// if it cannot be read, {kCorrupt} naming it if it is not a CheckpointState
// in text format or is over 16 MiB.
StateFileContents read_state_file(const std::filesystem::path& file);

struct StateFileOptions {
  StateFilePolicy policy = StateFilePolicy::kIfPresent;
  bool fsync = true;  // fsync the state file and its directory
};

// Names the bundle at `prefix` as the latest of its directory in the
// directory's `checkpoint` state file, as options.policy says: kLeave does
// nothing; kIfPresent and kUpdate rewrite an existing state file
// (atomically) with model_checkpoint_path = the prefix's file name, which
// is also appended to all_model_checkpoint_paths (moved to the end if
// already listed; a timestamp is appended when the file keeps one per
// path). Without a state file, kIfPresent writes nothing and kUpdate
// creates one naming only this prefix, byte for byte as
// tf.train.Checkpoint.save writes its first:
//   model_checkpoint_path: "NAME"
//   all_model_checkpoint_paths: "NAME"
// Throws Error{kCorrupt} if an existing state file cannot be parsed, {kIo}.
void update_state_file(const std::filesystem::path& prefix, const StateFileOptions& options);

}  // namespace ckpt::tf_detail
