// The two-phase commit of a sharded save (distributed/sharded_commit.h).

#include "distributed/sharded_commit.h"

#include <memory>
#include <optional>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/text.h"
#include "distributed/plan.h"
#include "distributed/wire.h"
#include "formats/hf_sharded/layout.h"
#include "formats/hf_sharded/writer.h"
#include "io/atomic_directory.h"
#include "io/mapped_file.h"

namespace ckpt::distributed_detail {

namespace fs = std::filesystem;

namespace {

// `path` (a file just written) as a WrittenFile named `relative`.
WrittenFile written_file(const fs::path& path, const fs::path& relative) {
  const std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(path);
  return {.path = relative.generic_string(), .size = file->size(),
          .xxh3 = detail::hex_digits(detail::xxh3_64(file->bytes()), 16)};
}

}  // namespace

void check_communicator(const Communicator& comm, const fs::path& path) {
  if (comm.size() == 0 || comm.rank() >= comm.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "a communicator of rank " + std::to_string(comm.rank()) + " in a world of " + std::to_string(comm.size()),
                {.path = path});
  }
}

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

void commit_sharded(const Tree& local_tree, const std::map<std::string, ShardSpec>& shards, Communicator& comm,
                    const ShardedCommit& commit) {
  const fs::path& path = commit.directory;
  check_communicator(comm, path);
  const size_t rank = comm.rank();
  const size_t size = comm.size();
  SaveOptions shard_options = commit.save;
  shard_options.format = "safetensors";

  // Phase 0: each rank announces what it holds; rank 0 opens the temporary
  // directory and names it.
  std::unique_ptr<detail::AtomicDirectory> directory;  // rank 0's
  std::vector<HeldBox> mine;
  const std::vector<std::string> announced = exchange(comm, path, [&] {
    mine = held_boxes(local_tree, shards);
    Encoder out;
    out.string(commit.agreement);
    out.string(encode_held(mine));
    if (rank == 0) {
      if (commit.check_target) commit.check_target();
      directory = std::make_unique<detail::AtomicDirectory>(
          path, detail::AtomicDirectoryOptions{.fsync = shard_options.fsync, .files_synced = commit.files_synced});
      if (!commit.state_subdirectory.empty()) {
        std::error_code error;
        fs::create_directories(directory->path() / commit.state_subdirectory, error);
        if (error) {
          throw Error(ErrorCode::kIo, "cannot create the state directory: " + error.message(),
                      {.path = directory->path() / commit.state_subdirectory});
        }
      }
      out.string(directory->path().string());
    }
    return out.take();
  });

  // Phase 1: every rank writes (and syncs) its shard file in the temporary.
  const std::vector<std::string> written = exchange(comm, path, [&] {
    std::vector<std::vector<HeldBox>> held(size);
    std::vector<std::string> agreements(size);
    fs::path temporary;
    for (size_t r = 0; r < size; ++r) {
      Decoder in(announced[r], r);
      agreements[r] = in.string();
      held[r] = decode_held(in.string(), r);
      if (r == 0) temporary = in.string();
      in.finish();
    }
    for (size_t r = 1; r < size; ++r) {  // the same message on every rank
      if (agreements[r] != agreements[0]) {
        throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(r) + " saves " +
                                                     detail::quoted(agreements[r]) + " where rank 0 saves " +
                                                     detail::quoted(agreements[0]));
      }
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
    const fs::path shard_directory = temporary / commit.state_subdirectory;
    const hf_sharded_detail::RankShard shard =
        hf_sharded_detail::write_rank_shard(shard_directory, rank, size, whole, pieces, shard_options);
    Encoder out;
    out.string(encode_rank_shard(shard));
    WrittenFile file;
    if (commit.record_files) file = written_file(shard_directory / shard.file, commit.state_subdirectory / shard.file);
    out.u64(file.size);
    out.string(file.xxh3);
    return out.take();
  });

  // Phase 2: rank 0 writes the index and renames the directory into place;
  // its outcome reaches every rank.
  std::optional<Error> error;
  if (rank == 0) {
    try {
      std::vector<hf_sharded_detail::RankShard> ranks;
      std::vector<WrittenFile> files;
      for (size_t r = 0; r < size; ++r) {
        Decoder in(written[r], r);
        ranks.push_back(decode_rank_shard(in.string(), r));
        WrittenFile file{.path = (commit.state_subdirectory / ranks.back().file).generic_string()};
        file.size = in.u64();
        file.xxh3 = in.string();
        in.finish();
        if (commit.record_files) files.push_back(std::move(file));
      }
      const fs::path state_directory = directory->path() / commit.state_subdirectory;
      hf_sharded_detail::write_sharded_index(state_directory, ranks, shard_options.extras ? &local_tree : nullptr,
                                             shard_options);
      if (commit.record_files) {
        const fs::path index(hf_sharded_detail::kIndexFile);
        files.push_back(written_file(state_directory / index, commit.state_subdirectory / index));
      }
      if (commit.commit_files) commit.commit_files(directory->path(), files);
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

}  // namespace ckpt::distributed_detail
