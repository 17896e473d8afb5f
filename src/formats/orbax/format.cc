// The orbax Format. Reading lives in reader.cc (over ocdbt_reader.cc,
// zarr.cc and metadata.cc), writing in writer.cc; the byte layout in
// ocdbt_layout.h and docs/formats/orbax.md.

#include "formats/orbax/format.h"

#include "ckpt/error.h"
#include "core/dtype_sets.h"
#include "formats/orbax/reader.h"
#include "formats/orbax/writer.h"

namespace ckpt {
namespace {

class OrbaxFormat final : public Format {
 public:
  std::string_view id() const override { return "orbax"; }
  std::string_view description() const override {
    return "Orbax PyTree checkpoint directory (zarr v2 arrays in OCDBT or one folder per array)";
  }
  std::vector<std::string_view> extensions() const override { return {}; }
  FormatCapabilities capabilities() const override {
    return {.read = true, .write = orbax_detail::kWriterReady, .nested_tree = true, .lists_and_int_keys = true,
            .file_per_tensor = true};
  }
  std::vector<DType> dtypes() const override { return detail::numpy_and_ml_dtypes(); }

  // A directory is never a single file: detect_path() claims it.
  bool detect(std::span<const std::byte> head, uint64_t file_size) const override { return false; }
  bool detect_path(const std::filesystem::path& path) const override {
    return orbax_detail::detect_checkpoint(path);
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    try {
      return orbax_detail::read_checkpoint(path, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    try {
      orbax_detail::write_checkpoint(path, tree, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }
};

}  // namespace

const Format& orbax_format() {
  static const OrbaxFormat kFormat;
  return kFormat;
}

}  // namespace ckpt
