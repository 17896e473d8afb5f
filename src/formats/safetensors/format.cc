// The safetensors Format: ckpt's native format. Reading and writing live in
// reader.cc and writer.cc; the byte layout in layout.h and
// docs/formats/safetensors.md.

#include "formats/safetensors/format.h"

#include "ckpt/error.h"
#include "formats/hf_sharded/writer.h"
#include "formats/safetensors/reader.h"
#include "formats/safetensors/writer.h"

namespace ckpt {
namespace {

class SafetensorsFormat final : public Format {
 public:
  std::string_view id() const override { return "safetensors"; }
  std::string_view description() const override {
    return "safetensors (Hugging Face); ckpt's native format, with the full tree and checksums in __metadata__";
  }
  std::vector<std::string_view> extensions() const override { return {".safetensors"}; }
  FormatCapabilities capabilities() const override {
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
    // Every ckpt dtype; complex128 only with extras (stored as F64 pairs).
    std::vector<DType> result;
    for (const DTypeInfo& info : all_dtypes()) result.push_back(info.dtype);
    return result;
  }

  bool detect(std::span<const std::byte> head, uint64_t file_size) const override {
    return safetensors_detail::detect_header(head, file_size);
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    try {
      return safetensors_detail::read_file(path, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    try {
      // With a maximum shard size: Hugging Face's sharded layout, a directory.
      if (options.max_shard_bytes > 0) return hf_sharded_detail::write_directory(path, tree, options);
      safetensors_detail::write_file(path, tree, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }
};

}  // namespace

const Format& safetensors_format() {
  static const SafetensorsFormat kFormat;
  return kFormat;
}

}  // namespace ckpt
