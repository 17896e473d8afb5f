// The flax Format: detection by content (a Flax checkpoint_<step> has no
// extension), reading and detection in reader.cc, writing in writer.cc.

#include "formats/flax/format.h"

#include "ckpt/error.h"
#include "core/dtype_sets.h"
#include "formats/flax/reader.h"
#include "formats/flax/writer.h"

namespace ckpt {
namespace {

class FlaxFormat final : public Format {
 public:
  std::string_view id() const override { return "flax"; }
  std::string_view description() const override {
    return "Flax msgpack (flax.serialization.to_bytes, flax.training.checkpoints checkpoint_<step>)";
  }
  std::vector<std::string_view> extensions() const override { return {".msgpack"}; }
  FormatCapabilities capabilities() const override {
    return {.read = true, .write = true, .nested_tree = true, .checksums = false, .metadata = false,
            .colliding_names = true, .ties = true};
  }
  std::vector<DType> dtypes() const override { return detail::numpy_and_ml_dtypes(); }

  bool detect(std::span<const std::byte> head, uint64_t file_size) const override {
    return flax_detail::detect_head(head, file_size);
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    return flax_detail::read_file(path, options);
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    try {
      flax_detail::write_file(path, tree, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }
};

}  // namespace

const Format& flax_format() {
  static const FlaxFormat kFormat;
  return kFormat;
}

}  // namespace ckpt
