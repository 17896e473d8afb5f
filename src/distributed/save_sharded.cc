// The two-phase commit of a sharded save and the collective load
// (ckpt/distributed.h; docs/distributed.md).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/distributed.h"
#include "ckpt/error.h"
#include "distributed/plan.h"
#include "distributed/wire.h"
#include "formats/hf_sharded/writer.h"
#include "io/atomic_directory.h"

namespace ckpt {
namespace fs = std::filesystem;
namespace {

using distributed_detail::decode_outcome;
using distributed_detail::encode_outcome;

// One step of the protocol: runs `work` on this rank, gathers every rank's
// outcome, and returns every rank's payload; if any rank failed, throws the
// lowest failing rank's Error on every rank (all decode the same messages,
// so all throw, and none waits in a later collective for one that left).
std::vector<std::string> exchange(Communicator& comm, const fs::path& path, const std::function<std::string()>& work) {
  std::optional<Error> error;
  std::string payload;
  try {
    payload = work();
  } catch (const Error& failure) {
    error = failure;
  } catch (const std::exception& failure) {  // std::bad_alloc, a failure of the caller's types
    error.emplace(ErrorCode::kIo, failure.what());
  }
  const std::vector<std::string> gathered = comm.all_gather(encode_outcome(error, payload));
  if (gathered.size() != comm.size()) {
    throw Error(ErrorCode::kIo, "the communicator gathered " + std::to_string(gathered.size()) + " messages from " +
                                    std::to_string(comm.size()) + " ranks", {.path = path});
  }
  std::vector<std::string> payloads;
  payloads.reserve(gathered.size());
  for (size_t r = 0; r < gathered.size(); ++r) {
    std::optional<Error> failure;
    std::optional<std::string> got = decode_outcome(gathered[r], r, failure);
    if (failure) throw failure->with_path(path);
    payloads.push_back(std::move(*got));
  }
  return payloads;
}

void check_communicator(const Communicator& comm, const fs::path& path) {
  if (comm.size() == 0 || comm.rank() >= comm.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "a communicator of rank " + std::to_string(comm.rank()) + " in a world of " + std::to_string(comm.size()),
                {.path = path});
  }
}

}  // namespace

void save_sharded(const fs::path& given, const Tree& local_tree, const std::map<std::string, ShardSpec>& shards,
                  Communicator& comm, const SaveOptions& options) {
  using namespace distributed_detail;
  const fs::path path = given.has_filename() ? given : given.parent_path();  // "out/" names "out"
  check_communicator(comm, path);
  const size_t rank = comm.rank();
  const size_t size = comm.size();
  SaveOptions shard_options = options;
  shard_options.format = "safetensors";

  // Phase 0: each rank announces what it holds; rank 0 opens the temporary
  // step directory and names it.
  std::unique_ptr<detail::AtomicDirectory> directory;  // rank 0's
  std::vector<HeldBox> mine;
  const std::vector<std::string> announced = exchange(comm, path, [&] {
    mine = held_boxes(local_tree, shards);
    Encoder out;
    out.string(encode_held(mine));
    if (rank == 0) {
      hf_sharded_detail::check_target_directory(path);
      directory = std::make_unique<detail::AtomicDirectory>(
          path, detail::AtomicDirectoryOptions{.fsync = options.fsync, .files_synced = options.fsync});
      out.string(directory->path().string());
    }
    return out.take();
  });

  // Phase 1: every rank writes (and syncs) its shard file in the temporary.
  const std::vector<std::string> written = exchange(comm, path, [&] {
    std::vector<std::vector<HeldBox>> held(size);
    fs::path temporary;
    for (size_t r = 0; r < size; ++r) {
      Decoder in(announced[r], r);
      held[r] = decode_held(in.string(), r);
      if (r == 0) temporary = in.string();
      in.finish();
    }
    const std::vector<bool> writes = boxes_to_write(held, rank);
    const std::vector<Tree::Leaf> leaves = local_tree.tensor_leaves();
    Tree whole = Tree::map();
    std::vector<hf_sharded_detail::LocalPiece> pieces;
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!writes[i]) continue;
      const Tensor& tensor = leaves[i].value->tensor();
      if (mine[i].sharded) {
        pieces.push_back({.name = mine[i].name, .global_shape = mine[i].global_shape,
                          .offsets = mine[i].box.offsets, .data = tensor});
      } else {
        whole.set(mine[i].name, tensor);
      }
    }
    return encode_rank_shard(hf_sharded_detail::write_rank_shard(temporary, rank, size, whole, pieces, shard_options));
  });

  // Phase 2: rank 0 writes the index and renames the directory into place;
  // its outcome reaches every rank.
  std::optional<Error> error;
  if (rank == 0) {
    try {
      std::vector<hf_sharded_detail::RankShard> ranks;
      for (size_t r = 0; r < size; ++r) ranks.push_back(decode_rank_shard(written[r], r));
      hf_sharded_detail::write_sharded_index(directory->path(), ranks, options.extras ? &local_tree : nullptr,
                                             shard_options);
      directory->commit();
    } catch (const Error& failure) {
      error = failure;
    } catch (const std::exception& failure) {
      error.emplace(ErrorCode::kIo, failure.what());
    }
    directory.reset();  // a failed commit's temporary is removed before the others hear of it
  }
  const std::string outcome = comm.broadcast(rank == 0 ? encode_outcome(error, "") : std::string(), 0);
  std::optional<Error> failure;
  decode_outcome(outcome, 0, failure);
  if (failure) throw failure->with_path(path);
}

Tree load_sharded(const fs::path& path, const std::map<std::string, Box>& boxes, Communicator& comm,
                  const LoadOptions& options) {
  check_communicator(comm, path);
  LoadOptions with_boxes = options;
  with_boxes.boxes = boxes;
  Tree tree;
  exchange(comm, path, [&] {
    tree = load(path, with_boxes);
    return std::string();
  });
  return tree;
}

}  // namespace ckpt
