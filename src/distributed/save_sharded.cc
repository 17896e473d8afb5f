// save_sharded and load_sharded (ckpt/distributed.h; docs/distributed.md)
// over the protocol of distributed/sharded_commit.h.

#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/distributed.h"
#include "distributed/sharded_commit.h"
#include "formats/hf_sharded/writer.h"

namespace ckpt {
namespace fs = std::filesystem;

void save_sharded(const fs::path& given, const Tree& local_tree, const std::map<std::string, ShardSpec>& shards,
                  Communicator& comm, const SaveOptions& options) {
  const fs::path path = given.has_filename() ? given : given.parent_path();  // "out/" names "out"
  distributed_detail::commit_sharded(local_tree, shards, comm,
                                     {.directory = path,
                                      .state_subdirectory = {},
                                      .agreement = {},
                                      .record_files = false,
                                      .save = options,
                                      .files_synced = options.fsync,
                                      .check_target = [&] { hf_sharded_detail::check_target_directory(path); },
                                      .commit_files = {}});
}

Tree load_sharded(const fs::path& path, const std::map<std::string, Box>& boxes, Communicator& comm,
                  const LoadOptions& options) {
  distributed_detail::check_communicator(comm, path);
  LoadOptions with_boxes = options;
  with_boxes.boxes = boxes;
  Tree tree;
  distributed_detail::exchange(comm, path, [&] {
    tree = load(path, with_boxes);
    return std::string();
  });
  return tree;
}

}  // namespace ckpt
