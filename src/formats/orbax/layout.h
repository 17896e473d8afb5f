#pragma once
// The layout of an Orbax checkpoint directory: the names of its files and
// folders, and the values Orbax writes into its metadata. Mirrors
// docs/formats/orbax.md; the bytes of OCDBT databases are in
// ocdbt_layout.h, zarr arrays' in zarr.h.
//
// Source: orbax-checkpoint (orbax/checkpoint/_src: checkpoint_manager.py,
// metadata/tree.py, handlers/pytree_checkpoint_handler.py,
// serialization/type_handlers.py) as ocp.PyTreeCheckpointer writes them.

#include <string_view>

namespace ckpt::orbax_detail {

// ---- A step directory: <step>/_CHECKPOINT_METADATA and one folder per item ----
inline constexpr std::string_view kCheckpointMetadataFile = "_CHECKPOINT_METADATA";
// The item a checkpoint saved without an item name lives in.
inline constexpr std::string_view kDefaultItem = "default";
// The handler _CHECKPOINT_METADATA names for a PyTree item.
inline constexpr std::string_view kPyTreeHandler =
    "orbax.checkpoint._src.handlers.pytree_checkpoint_handler.PyTreeCheckpointHandler";

// ---- An item directory ----
// The tree: one entry per leaf (keys, key types, value type).
inline constexpr std::string_view kTreeMetadataFile = "_METADATA";
// The values of string leaves, by parameter name.
inline constexpr std::string_view kStringsFile = "_strings.json";
// The jax shardings of the arrays (ckpt writes numpy arrays: none).
inline constexpr std::string_view kShardingFile = "_sharding";
inline constexpr std::string_view kArrayMetadataFolder = "array_metadatas";
// An array's zarr metadata: "<parameter name>/.zarray", a folder of its own
// (use_ocdbt=False) or a key of the OCDBT database.
inline constexpr std::string_view kZarrayFile = ".zarray";
// OCDBT: the manifest and data files of the item's database, and the
// per-process databases ("ocdbt.process_<N>/") that it refers to.
inline constexpr std::string_view kOcdbtManifestFile = "manifest.ocdbt";
inline constexpr std::string_view kOcdbtDataFolder = "d";
inline constexpr std::string_view kOcdbtProcessPrefix = "ocdbt.process_";
// What a finished save on a file system without atomic renames leaves.
inline constexpr std::string_view kCommitSuccessFile = "commit_success.txt";

// Orbax's KeyType (orbax/checkpoint/_src/metadata/tree.py).
inline constexpr int kKeyTypeSequence = 1;
inline constexpr int kKeyTypeDict = 2;

}  // namespace ckpt::orbax_detail
