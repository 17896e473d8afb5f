#pragma once
// The `.metadata` file of a DCP checkpoint: a pickle of
// torch.distributed.checkpoint.metadata.Metadata, read with the torch
// format's restricted unpickler (DCP's classes allowlisted by name, see
// layout.h) into plain values, validated. Byte layout: docs/formats/dcp.md.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/tree.h"

namespace ckpt::dcp_detail {

// Where one item's bytes are: filesystem.py `_StorageInfo`.
struct StorageLocation {
  std::string relative_path;  // a file name in the checkpoint directory
  uint64_t offset = 0;
  uint64_t length = 0;
};

// One stored chunk of a tensor: metadata.py `ChunkStorageMetadata`.
struct Chunk {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  StorageLocation location;
};

// One entry of `state_dict_metadata`, in the pickle's order.
struct Item {
  std::string fqn;
  // The path of keys the planner flattened the fqn from (planner_data):
  // strings are dict keys, integers list positions. {fqn} where the
  // checkpoint has none.
  KeyPath path;
  bool tensor = false;            // TensorStorageMetadata; else BytesStorageMetadata
  DType dtype = DType::kFloat32;  // tensor: properties.dtype
  Shape size;                     // tensor: the global size
  std::vector<Chunk> chunks;      // tensor: its chunks, each with its location
  StorageLocation location;       // bytes: the torch.save'd object
};

// A map whose integer keys DCP stored as strings (ckpt's extra attribute,
// layout.h kIntKeysAttribute).
struct IntKeys {
  KeyPath map;  // as planner_data spells paths
  std::vector<int64_t> keys;
};

struct DcpMetadata {
  std::vector<Item> items;
  std::vector<IntKeys> int_keys;  // empty unless ckpt wrote the checkpoint
  std::string version;  // Metadata.version ("1.0.0"); empty before torch 2.4
};

// Parses `bytes`, the contents of a `.metadata` file.
// Throws Error{kUnsupported} naming the global for any global outside DCP's
// classes and the torch reader's allowlist (os.system, builtins.eval: never
// run), for transform descriptors (compressed items), and for layouts other
// than torch.strided; Error{kCorrupt} naming the fqn for the first defect:
// a value of the wrong kind, a chunk outside the tensor's size or of
// another rank, a chunk or bytes item without storage, a duplicate fqn, a
// relative path that leaves the directory, a size or offset that is
// negative.
DcpMetadata parse_metadata(std::span<const std::byte> bytes);

}  // namespace ckpt::dcp_detail
