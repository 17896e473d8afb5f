// The tf Format: TensorFlow tensor bundles (tf.train.Checkpoint, Keras,
// tf.compat.v1 Saver, SavedModel variables). Reading and writing live in
// reader.cc and writer.cc; the .index table in index_table.cc; names in
// names.cc; the byte layout in layout.h and docs/formats/tf.md.

#include "formats/tf/format.h"

#include "ckpt/error.h"
#include "formats/tf/paths.h"
#include "formats/tf/reader.h"
#include "formats/tf/writer.h"

namespace ckpt {
namespace {

class TfFormat final : public Format {
 public:
  std::string_view id() const override { return "tf"; }
  std::string_view description() const override {
    return "TensorFlow tensor bundle V2 (PREFIX.index + PREFIX.data-*; tf.train.Checkpoint, Keras, SavedModel "
           "variables)";
  }
  std::vector<std::string_view> extensions() const override { return {".index"}; }
  FormatCapabilities capabilities() const override {
    // Any tree with extras (the skeleton in the header); without extras
    // nested maps of tensors, bytes and strings only.
    return {.read = true, .write = true, .nested_tree = true, .lists_and_int_keys = true, .checksums = true, .single_tensor = false,
            .metadata = false, .shards = true, .colliding_names = true, .ties = true, .state_file = true};
  }
  std::vector<DType> dtypes() const override {
    std::vector<DType> result;
    for (const DTypeInfo& info : all_dtypes()) {
      if (info.tf_code > 0) result.push_back(info.dtype);
    }
    return result;
  }

  bool detect(std::span<const std::byte> head, uint64_t file_size) const override {
    return tf_detail::detect_index(head, file_size);
  }

  bool detect_path(const std::filesystem::path& path) const override {
    return tf_detail::find_prefix(path, {.require_magic = true}).has_value();
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    try {
      return tf_detail::read_bundle(path, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    try {
      tf_detail::write_bundle(path, tree, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }
};

}  // namespace

const Format& tf_format() {
  static const TfFormat kFormat;
  return kFormat;
}

}  // namespace ckpt
