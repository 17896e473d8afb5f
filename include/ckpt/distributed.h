#pragma once
// Sharded saves across processes (issue 20): every rank writes the shard
// file of what it holds, rank 0 the index, committed as one step directory
// (Hugging Face's sharded safetensors layout, docs/formats/hf_sharded.md),
// and loads of any boxes on any number of ranks. ckpt has no cluster layer
// of its own: a Communicator wraps the engine the caller runs (ckpt/mpi.h
// for an MPI_Comm; the Python package adapts mpi4py and torch.distributed;
// ThreadGroup below for ranks that are threads of one process).
// docs/distributed.md describes the protocol.

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/box.h"
#include "ckpt/format.h"
#include "ckpt/tensor.h"
#include "ckpt/tree.h"

namespace ckpt {

// The collectives the protocol needs, over ranks 0 .. size()-1. Every rank
// calls the same collectives in the same order. A collective that cannot
// complete (a peer left, the engine failed) throws Error{kIo}, where the
// engine lets the caller go on; engines that abort the job instead (MPI's
// default error handler) end every rank.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual size_t rank() const = 0;
  virtual size_t size() const = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;
  // Every rank's `bytes`, indexed by rank (this rank's included).
  virtual std::vector<std::string> all_gather(std::string_view bytes) = 0;
  // Root's `bytes` on every rank (the others' `bytes` are ignored).
  virtual std::string broadcast(std::string_view bytes, size_t root) = 0;
  // Whether the collectives may be called from another thread than the
  // caller's while the caller goes on using its engine (its own messages
  // never meet these). The manager runs an asynchronous sharded save on its
  // background thread only then; otherwise the save blocks
  // (Manager::save_sharded). ThreadGroup's: yes; MpiCommunicator's: when
  // MPI runs at MPI_THREAD_MULTIPLE. False unless overridden.
  virtual bool callable_from_any_thread() const { return false; }
};

// Where this rank's tensor lies in a sharded tensor: the global tensor's
// shape and the offsets of the local tensor's first element; its sizes are
// the local tensor's shape.
struct ShardSpec {
  Shape global_shape;
  std::vector<int64_t> offsets;
};

// Saves the state that the ranks of `comm` hold together as the checkpoint
// directory `path` (all ranks pass the same path). Every rank calls it with
// its `local_tree`: a tensor leaf named (dotted name) in `shards` is this
// rank's box of that global tensor; any other tensor leaf is a whole
// (replicated) tensor. A box (or whole tensor) that several ranks hold is
// written once, by the lowest of them. Rank 0's tree gives the checkpoint's
// structure and its non-tensor leaves, so it must name every tensor (a
// sharded one at its local box).
//
// The two-phase commit: rank 0 creates the temporary step directory beside
// `path` (io/atomic_directory.h) and broadcasts its name; every rank writes
// model-{rank+1}-of-{size}.safetensors there and syncs it (options.fsync);
// the ranks' descriptions are gathered (a barrier); rank 0 writes the index,
// syncs and renames the directory into place; a last collective carries its
// outcome to every rank. Until the rename nothing is visible at `path`, and
// a checkpoint there before stays intact; a rank that dies leaves only the
// temporary, which the next save at `path` removes.
//
// An Error on any rank (bad input, a failed write) is thrown on every rank,
// its message naming the rank, and nothing is committed. Throws
// Error{kInvalidArgument} for a `shards` entry that names no tensor leaf, a
// box outside its global shape, ranks that disagree on a tensor's dtype or
// global shape, boxes that overlap or leave a tensor uncovered, rank 0's
// tree not naming every tensor; what hf_sharded's writer throws for the
// target (a file, a non-empty directory of something else) and the tensors;
// {kIo} from the file system or the communicator.
void save_sharded(const std::filesystem::path& path, const Tree& local_tree,
                  const std::map<std::string, ShardSpec>& shards, Communicator& comm, const SaveOptions& options = {});

// Loads this rank's part of the checkpoint `path` (any number of ranks,
// whatever number saved it): each leaf named in `boxes` comes as that box of
// its global tensor, read from the shard files it overlaps only (box.h
// read_box); the other leaves come whole, as ckpt::load gives them (mapped,
// read when touched). Collective: the ranks of `comm` check together that
// every one of them could open the checkpoint (an Error on one is thrown on
// all, naming the rank). Throws what ckpt::load throws with
// LoadOptions::boxes.
Tree load_sharded(const std::filesystem::path& path, const std::map<std::string, Box>& boxes, Communicator& comm,
                  const LoadOptions& options = {});

// ---- Ranks that are threads of one process ----

// A group of `size` ranks in one process, each driven by its own thread
// through the Communicator that communicator(rank) gives. A rank leaves the
// group when its Communicator is destroyed: collectives then waiting, and
// every later one, throw Error{kIo} naming it (a rank that dies never hangs
// the others).
class ThreadGroup {
 public:
  // Throws Error{kInvalidArgument} if size is 0.
  explicit ThreadGroup(size_t size);
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  size_t size() const { return size_; }
  // Rank `rank`'s communicator; the group must outlive it. Throws
  // Error{kInvalidArgument} for a rank out of range or one already handed out.
  std::unique_ptr<Communicator> communicator(size_t rank);

 private:
  friend class ThreadCommunicator;
  std::vector<std::string> all_gather(size_t rank, std::string_view bytes);
  void leave(size_t rank);

  size_t size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> handed_out_;
  std::vector<std::string> slots_;
  std::vector<std::string> result_;
  size_t arrived_ = 0;
  uint64_t generation_ = 0;
  std::optional<size_t> departed_;  // the first rank that left
};

}  // namespace ckpt
