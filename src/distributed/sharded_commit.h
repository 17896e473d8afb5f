#pragma once
// The two-phase commit of a sharded save (ckpt/distributed.h,
// docs/distributed.md), in one place for its two callers: save_sharded
// (the Hugging Face sharded directory at a path) and Manager::save_sharded
// (the same directory as the state of a step directory, beside the step's
// checkpoint.json). Also the step of the protocol both build on: run
// something on every rank, gather every rank's outcome, throw the same
// Error on every rank if one failed.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ckpt/distributed.h"
#include "ckpt/format.h"
#include "ckpt/tree.h"

namespace ckpt::distributed_detail {

// Throws Error{kInvalidArgument} naming `path` for a communicator whose
// rank is not below its size (or of size 0).
void check_communicator(const Communicator& comm, const std::filesystem::path& path);

// Runs `work` on this rank, gathers every rank's outcome and returns every
// rank's payload (indexed by rank); if any rank failed, throws the lowest
// failing rank's Error (its message prefixed "rank N: ", its path `path`
// where it has none) on every rank, so that none waits in a later
// collective for one that left. An exception other than ckpt::Error from
// `work` counts as Error{kIo} with its what(). Throws Error{kIo} when the
// communicator gathers a wrong number of messages, or what it throws.
std::vector<std::string> exchange(Communicator& comm, const std::filesystem::path& path,
                                  const std::function<std::string()>& work);

// One file that a rank wrote into the checkpoint: its path relative to the
// committed directory ('/'-separated), its size and the xxh3-64 of its
// bytes (16 lower-case hex digits).
struct WrittenFile {
  std::string path;
  uint64_t size = 0;
  std::string xxh3;
};

struct ShardedCommit {
  // The directory that the commit renames into place (all ranks pass the
  // same), and where the shards and the index go below it ("": in it).
  std::filesystem::path directory;
  std::filesystem::path state_subdirectory;
  // The same text on every rank (e.g. the step saved), else every rank
  // throws Error{kInvalidArgument} naming the first rank that differs from
  // rank 0 and both texts.
  std::string agreement;
  // Each rank reads its shard file back once (from the page cache) for
  // its xxh3, and rank 0 the index: commit_files below gets them all.
  bool record_files = false;
  // The shards' options (format, fsync, extras, metadata, threads, ...).
  SaveOptions save;
  // AtomicDirectoryOptions::files_synced for the directory (the files in
  // it are synced one by one with save.fsync).
  bool files_synced = true;
  // Rank 0, before the temporary directory exists: throws to refuse the
  // target (every rank throws it).
  std::function<void()> check_target;
  // Rank 0, after the index is written, before the rename: `temporary` is
  // the directory being built, `files` every file written into it (the
  // ranks' shard files, then the index; empty without record_files). What
  // it writes there is committed with the rest; what it throws fails every
  // rank and commits nothing.
  std::function<void(const std::filesystem::path& temporary, const std::vector<WrittenFile>& files)> commit_files;
};

// The protocol (docs/distributed.md): phase 0 each rank announces its boxes
// and the agreement, rank 0 checks the target, creates the temporary
// directory (and its state_subdirectory) and names it; phase 1 every rank
// writes model-{rank+1}-of-{size}.safetensors there (and syncs it); phase 2,
// after the gather, rank 0 writes the index, calls commit_files, renames
// the directory into place, and broadcasts its outcome. Until the rename
// nothing is visible at `directory`; a failure or a rank that leaves leaves
// only a temporary (removed by rank 0 where it can, else by the next save).
// Throws on every rank what save_sharded documents, plus what the hooks
// throw.
void commit_sharded(const Tree& local_tree, const std::map<std::string, ShardSpec>& shards, Communicator& comm,
                    const ShardedCommit& commit);

}  // namespace ckpt::distributed_detail
