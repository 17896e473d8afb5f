#pragma once
// OCDBT (Optionally-Cooperative Distributed B+Tree), the key-value store
// that Orbax writes its zarr arrays into by default. Byte layout:
// docs/formats/orbax.md, after tensorstore's
// tensorstore/kvstore/ocdbt/index.rst and format/*.cc (the source of truth).
//
// Every encoded structure (manifest, version tree node, b-tree node) is
//   magic u32 BE | length u64 LE (whole structure) | version varint (0) |
//   compression varint (0 none, 1 zstd) | body | CRC-32C u32 LE
// where the CRC covers every byte before it and the body is one zstd frame
// when compressed.

#include <cstddef>
#include <cstdint>

namespace ckpt::orbax_detail {

// tensorstore format/manifest.cc kManifestMagic.
constexpr uint32_t kManifestMagic = 0x0cdb3a2a;
// tensorstore format/version_tree_codec.h kVersionTreeNodeMagic.
constexpr uint32_t kVersionTreeNodeMagic = 0x0cdb1234;
// tensorstore format/btree_codec.h kBtreeNodeMagic.
constexpr uint32_t kBtreeNodeMagic = 0x0cdb20de;
// The only format version of each structure (k*FormatVersion = 0).
constexpr uint32_t kFormatVersion = 0;

// compression_format of the envelope and compression_method of the config.
constexpr uint32_t kCompressionNone = 0;
constexpr uint32_t kCompressionZstd = 1;

// magic + length + CRC-32C (codec_util.cc kMinLength).
constexpr size_t kEnvelopeMinSize = 4 + 8 + 4;
constexpr size_t kEnvelopeHeaderSize = 4 + 8;

// Config manifest_kind (config.h ManifestKind): kSingle holds the versions,
// kNumbered keeps them in manifest.<generation> files (not read by ckpt).
constexpr uint8_t kManifestKindSingle = 0;
constexpr uint8_t kManifestKindNumbered = 1;
// config.h kMaxVersionTreeArityLog2.
constexpr uint8_t kMaxVersionTreeArityLog2 = 16;

// btree_codec.h kMaxNodeArity; btree.h kMaxKeyLength; data_file_id.h
// kMaxPathLength.
constexpr uint64_t kMaxNodeArity = 1024 * 1024;
constexpr uint64_t kMaxKeyLength = 65535;
constexpr uint64_t kMaxPathLength = 65535;

// Leaf value_kind: stored in the node, or a reference into a data file.
constexpr uint8_t kInlineValue = 0;
constexpr uint8_t kOutOfLineValue = 1;

// ckpt's own caps: a decoded node (tensorstore's default
// max_decoded_node_bytes is 8 MiB) and the number of nodes one tree may have.
constexpr uint64_t kMaxDecodedNodeBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxBtreeNodes = uint64_t{1} << 20;

}  // namespace ckpt::orbax_detail
