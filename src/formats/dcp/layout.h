#pragma once
// PyTorch Distributed Checkpoint (DCP) directories as
// torch.distributed.checkpoint.save writes them with its FileSystemWriter:
// the names of this page's files and the classes its `.metadata` pickle
// names. Byte layout and sources: docs/formats/dcp.md.

#include <string_view>

namespace ckpt::dcp_detail {

// torch/distributed/checkpoint/filesystem.py `_metadata_fn`.
inline constexpr std::string_view kMetadataFile = ".metadata";
// filesystem.py `DEFAULT_SUFFIX`: data files `__<rank>_<n>.distcp`.
inline constexpr std::string_view kDataSuffix = ".distcp";
// The data file ckpt's single-process writer writes (rank 0, file 0).
inline constexpr std::string_view kWriterDataFile = "__0_0.distcp";
// filesystem.py `CURRENT_DCP_VERSION`.
inline constexpr std::string_view kDcpVersion = "1.0.0";

// ckpt's extra attribute of Metadata (with SaveOptions::extras): a list of
// (path of a map, [its integer keys]) for the maps whose integer keys DCP's
// str(key) made strings, so that ckpt reads them back as integers. torch
// keeps it in the object's __dict__ and never reads it.
inline constexpr std::string_view kIntKeysAttribute = "ckpt_int_keys";

// Modules of the classes the metadata pickle names.
inline constexpr std::string_view kMetadataModule = "torch.distributed.checkpoint.metadata";
inline constexpr std::string_view kFilesystemModule = "torch.distributed.checkpoint.filesystem";

// The classes (module.name) a `.metadata` pickle may name besides the
// torch globals of the torch reader's allowlist (torch.Size, torch dtypes,
// torch.serialization._get_layout): DCP's metadata dataclasses
// (metadata.py, filesystem.py `_StorageInfo`), the memory-format enum
// `_MEM_FORMAT_ENCODING`, and pathlib's paths, which StorageMeta's
// checkpoint_id holds. Each is kept as its class name, arguments and state,
// never imported or called.
inline constexpr std::string_view kMetadataClasses[] = {
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta",
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.filesystem._StorageInfo",
    "pathlib.PosixPath",
    "pathlib.PurePosixPath",
    "pathlib.WindowsPath",
    "pathlib.PureWindowsPath",
};

}  // namespace ckpt::dcp_detail
