#pragma once
// The Hugging Face sharded safetensors layout, as constants with their
// provenance. Mirrors docs/formats/hf_sharded.md; change both together.
//
//   DIR/model.safetensors.index.json        the index (JSON, below)
//   DIR/model-00001-of-0000N.safetensors    ordinary safetensors files
//   ...
//
//   {"ckpt": {...},                         ckpt's record (optional; HF ignores it)
//    "metadata": {"total_size": BYTES, ...},
//    "weight_map": {"NAME": "model-00001-of-0000N.safetensors", ...}}
//
// References: huggingface/transformers `modeling_utils.py`
// (PreTrainedModel.save_pretrained: the index is written as
// `json.dumps(index, indent=2, sort_keys=True) + "\n"`), `utils/__init__.py`
// (SAFE_WEIGHTS_INDEX_NAME), `trainer_utils.py` (load_sharded_checkpoint);
// huggingface/huggingface_hub `serialization/_base.py`
// (split_state_dict_into_shards_factory: the file names, total_size).

#include <cstdint>
#include <string_view>

namespace ckpt::hf_sharded_detail {

// transformers utils SAFE_WEIGHTS_INDEX_NAME; any "<prefix>.safetensors.index.json"
// is accepted when a directory holds exactly one.
constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr std::string_view kIndexSuffix = ".safetensors.index.json";
// huggingface_hub filename_pattern "model{suffix}.safetensors" with suffix
// f"-{idx + 1:05d}-of-{nb_shards:05d}".
constexpr std::string_view kShardPrefix = "model";
constexpr std::string_view kShardExtension = ".safetensors";
constexpr int kShardNumberDigits = 5;

// The index's keys (save_pretrained's `index` dict).
constexpr std::string_view kMetadataKey = "metadata";
constexpr std::string_view kWeightMapKey = "weight_map";
constexpr std::string_view kTotalSizeKey = "total_size";  // sum of the stored tensors' bytes
// ckpt's record: a top-level key that transformers' loaders never read.
constexpr std::string_view kCkptKey = "ckpt";
constexpr int64_t kCkptVersion = 1;
// Fields of ckpt's record.
constexpr std::string_view kVersionField = "version";
constexpr std::string_view kTreeField = "tree";      // the tree skeleton, as a JSON string
constexpr std::string_view kSlicesField = "slices";  // sharded tensors: NAME -> slice record
// The shards' metadata keys that ckpt added (kFormatMetadataKey), not the
// caller's: a reader leaves them out of Contents.metadata.
constexpr std::string_view kAddedMetadataField = "added_metadata";
// Fields of one slice record and of one of its pieces.
constexpr std::string_view kDTypeField = "dtype";     // ckpt's dtype name ("float32")
constexpr std::string_view kShapeField = "shape";     // the global shape
constexpr std::string_view kPiecesField = "pieces";
constexpr std::string_view kFileField = "file";       // shard file name
constexpr std::string_view kKeyField = "key";         // the piece's tensor name in that file
constexpr std::string_view kOffsetsField = "offsets";
constexpr std::string_view kSizesField = "sizes";

// The stored name of one piece of a sharded tensor NAME inside a shard file:
// kPieceKeyPrefix + NAME + "/" + offsets joined with ",". No tensor of a
// checkpoint may be named with this prefix, so that pieces never collide
// with whole tensors.
constexpr std::string_view kPieceKeyPrefix = "__ckpt_piece__/";

// save_pretrained's shards carry safetensors metadata {"format": "pt"}
// (safetensors.torch.save_file's convention, which transformers 4.x's
// load_state_dict requires of any file with metadata); ckpt writes it into
// every shard unless the caller's metadata sets "format".
constexpr std::string_view kFormatMetadataKey = "format";
constexpr std::string_view kFormatMetadataValue = "pt";

}  // namespace ckpt::hf_sharded_detail
