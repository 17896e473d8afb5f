#pragma once
// TensorFlow tensor bundle V2: the constants of its byte layout, as
// docs/formats/tf.md describes them. Sources: tensorflow/tensorflow
// core/util/tensor_bundle/tensor_bundle.{h,cc}, core/lib/io/{table_builder,
// format}.cc, core/lib/hash/crc32c.h, python/checkpoint/save_util.py.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace ckpt::tf_detail {

// LevelDB table footer magic, shared by TensorFlow's .index files
// (core/lib/io/format.h kTableMagicNumber).
constexpr uint64_t kTableMagic = 0xdb4775248b80fb57ull;
// LevelDB's footer: two block handles padded to 40 bytes, then the magic.
constexpr size_t kTableFooterSize = 48;
// After every block: a compression type byte and a masked CRC-32C.
constexpr size_t kBlockTrailerSize = 5;

// TableBuilder options of BundleWriter (tensor_bundle.cc): no compression,
// these block sizes. With them LevelDB 1.23 writes the same bytes as TF.
constexpr size_t kTableBlockSize = 262144;
constexpr int kTableBlockRestartInterval = 16;

// The key of the BundleHeaderProto (tensor_bundle.h kHeaderEntryKey).
constexpr std::string_view kHeaderKey = "";

// VersionDef written by BundleWriter and checked by BundleReader
// (tensor_bundle.h kTensorBundleVersion, kTensorBundleMinProducer/Consumer).
constexpr int kBundleVersion = 1;
constexpr int kBundleMinProducer = 0;
constexpr int kBundleMinConsumer = 0;

// BundleHeaderProto.Endianness.
constexpr int kLittleEndian = 0;
constexpr int kBigEndian = 1;

// tensorflow.DataType codes other than the numeric ones in DTypeInfo::tf_code.
constexpr int kDtString = 7;

// Object-based checkpoints (python/checkpoint/save_util.py, trackable/base.py).
constexpr std::string_view kObjectGraphKey = "_CHECKPOINTABLE_OBJECT_GRAPH";
constexpr std::string_view kAttributesComponent = ".ATTRIBUTES";

// The CheckpointState file beside the bundles (python/training/checkpoint_management.py).
constexpr std::string_view kStateFileName = "checkpoint";
// The variables of a SavedModel directory (python/saved_model/constants.py).
constexpr std::string_view kSavedModelVariables = "variables/variables";

// crc32c::Mask (core/lib/hash/crc32c.h): stored CRCs are rotated and offset
// so that a CRC of data holding CRCs is not trivially zero.
constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;
constexpr uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }
constexpr uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rotated = masked - kCrcMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

// ckpt's limit (not TensorFlow's) on the data shards it writes: the five
// digits of DataFilename's "%05d". The writer holds every shard's temporary
// file open until it commits them all.
constexpr int kMaxWriteShards = 99999;

// "<prefix>.index" and "<prefix>.data-%05d-of-%05d" (tensor_bundle.cc
// MetaFilename, DataFilename).
inline std::filesystem::path index_path(const std::filesystem::path& prefix) {
  return prefix.string() + ".index";
}
inline std::filesystem::path shard_path(const std::filesystem::path& prefix, int shard, int num_shards) {
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".data-%05d-of-%05d", shard, num_shards);
  return prefix.string() + suffix;
}

}  // namespace ckpt::tf_detail
