// The hf_sharded Format: Hugging Face's sharded layout. Reading lives
// in reader.cc, writing in writer.cc (both over the safetensors reader and
// writer), the index in index.cc; the layout in layout.h and
// docs/formats/hf_sharded.md.

#include "formats/hf_sharded/format.h"

#include "ckpt/error.h"
#include "formats/hf_sharded/reader.h"
#include "formats/hf_sharded/writer.h"
#include "formats/safetensors/format.h"

namespace ckpt {
namespace {

class HfShardedFormat final : public Format {
 public:
  std::string_view id() const override { return "hf_sharded"; }
  std::string_view description() const override {
    return "Hugging Face sharded safetensors directory (model-0000K-of-0000N.safetensors + "
           "model.safetensors.index.json), as transformers' save_pretrained writes it";
  }
  std::vector<std::string_view> extensions() const override { return {}; }
  // Each shard is a safetensors file: what safetensors holds (it declares
  // shards: a safetensors save with max_shard_bytes writes this layout).
  FormatCapabilities capabilities() const override { return safetensors_format().capabilities(); }
  std::vector<DType> dtypes() const override { return safetensors_format().dtypes(); }

  // A directory is never a single file: detect_path() claims it.
  bool detect(std::span<const std::byte> head, uint64_t file_size) const override { return false; }
  bool detect_path(const std::filesystem::path& path) const override {
    return hf_sharded_detail::detect_directory(path);
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    return naming_file(path, [&] { return hf_sharded_detail::read_directory(path, options); });
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    naming_file(path, [&] { hf_sharded_detail::write_directory(path, tree, options); });
  }
};

}  // namespace

const Format& hf_sharded_format() {
  static const HfShardedFormat kFormat;
  return kFormat;
}

}  // namespace ckpt
