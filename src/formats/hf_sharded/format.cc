// The hf_sharded Format: Hugging Face's sharded layout. Reading lives
// in reader.cc, writing in writer.cc (both over the safetensors reader and
// writer), the index in index.cc; the layout in layout.h and
// docs/formats/hf_sharded.md.

#include "formats/hf_sharded/format.h"

#include "ckpt/error.h"
#include "formats/hf_sharded/reader.h"
#include "formats/hf_sharded/writer.h"

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
  FormatCapabilities capabilities() const override {
    // As safetensors (each shard is one), plus shards.
    return {.read = true,
            .write = true,
            .nested_tree = true,
            .lists_and_int_keys = true,
            .checksums = true,
            .single_tensor = false,
            .metadata = true,
            .shards = true,
            .colliding_names = true,
            .ties = true};
  }
  std::vector<DType> dtypes() const override {
    std::vector<DType> result;
    for (const DTypeInfo& info : all_dtypes()) result.push_back(info.dtype);
    return result;
  }

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
