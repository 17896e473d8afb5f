// The npy and npz Format plugins. Byte layout: docs/formats/numpy.md.
//
// Trees: an .npy reads as a bare tensor leaf (Tree(Tensor)); writing one
// takes a tree with exactly one leaf, a tensor (bare, or inside maps/lists).
// An .npz reads as a flat map from key (member name without ".npy") to
// tensor, in archive order, then the aliases of ckpt's archive comment (tied
// tensors); writing one stores every leaf under its dotted name (with
// extras, tied leaves once: see writer.cc), and refuses trees with non-tensor
// leaves. Reading and detection: reader.cc; writing: writer.cc.

#include "formats/numpy/format.h"

#include "formats/numpy/reader.h"
#include "formats/numpy/writer.h"

namespace ckpt {
namespace {

std::vector<DType> numpy_dtypes() {
  std::vector<DType> dtypes;
  for (const DTypeInfo& info : all_dtypes()) {
    if (!info.numpy_descr.empty()) dtypes.push_back(info.dtype);
  }
  return dtypes;
}

class NpyFormat final : public Format {
 public:
  std::string_view id() const override { return "npy"; }
  std::string_view description() const override { return "NumPy .npy (one array)"; }
  std::vector<std::string_view> extensions() const override { return {".npy"}; }
  FormatCapabilities capabilities() const override {
    return {.read = true, .write = true, .single_tensor = true};
  }
  std::vector<DType> dtypes() const override { return numpy_dtypes(); }

  bool detect(std::span<const std::byte> head, uint64_t file_size) const override {
    return numpy_detail::detect_npy(head);
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    return numpy_detail::read_npy(path, options);
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    numpy_detail::write_npy(path, tree, options);
  }
};

class NpzFormat final : public Format {
 public:
  std::string_view id() const override { return "npz"; }
  std::string_view description() const override { return "NumPy .npz (zip of .npy arrays)"; }
  std::vector<std::string_view> extensions() const override { return {".npz"}; }
  FormatCapabilities capabilities() const override { return {.read = true, .write = true, .ties = true}; }
  std::vector<DType> dtypes() const override { return numpy_dtypes(); }

  bool detect(std::span<const std::byte> head, uint64_t file_size) const override {
    return numpy_detail::detect_npz(head, file_size);
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    return numpy_detail::read_npz(path, options);
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    numpy_detail::write_npz(path, tree, options);
  }
};

}  // namespace

const Format& npy_format() {
  static const NpyFormat format;
  return format;
}

const Format& npz_format() {
  static const NpzFormat format;
  return format;
}

}  // namespace ckpt
