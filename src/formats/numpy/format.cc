// The npy and npz Format plugins. Byte layout: docs/formats/numpy.md.
//
// Trees: an .npy reads as a bare tensor leaf (Tree(Tensor)); writing one
// takes a tree with exactly one leaf, a tensor (bare, or inside maps/lists).
// An .npz reads as a flat map from key (member name without ".npy") to
// tensor, in archive order, then the aliases of ckpt's archive comment (tied
// tensors); writing one stores every leaf under its dotted name (with
// extras, tied leaves once: see npz.cc), and refuses trees with non-tensor
// leaves.

#include <cstring>

#include "ckpt/error.h"
#include "formats/numpy/npy_layout.h"
#include "formats/numpy/numpy_format.h"
#include "formats/zip/zip_layout.h"
#include "formats/zip/zip_reader.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace ckpt {
namespace {

using numpy_detail::kMagic;
using numpy_detail::kMagicSize;

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
    return head.size() >= kMagicSize && std::memcmp(head.data(), kMagic.data(), kMagicSize) == 0;
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(path);
    const Buffer npy = file->slice(0, file->size());
    const numpy_detail::NpyLocation where{.path = path};
    const numpy_detail::NpyHeader header = numpy_detail::parse_npy_header(npy.bytes(), where);
    Tensor tensor = numpy_detail::npy_tensor(header, npy, where);
    Contents contents;
    contents.format = "npy";
    contents.entries.push_back({
        .name = "",
        .dtype = tensor.dtype(),
        .shape = tensor.shape(),
        .offset = header.data_offset,
        .nbytes = tensor.nbytes(),
    });
    contents.tree = Tree(std::move(tensor));
    return contents;
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    const std::vector<Tree::Leaf> leaves = tree.leaves();
    if (leaves.size() != 1 || !leaves[0].value->is_tensor()) {
      size_t tensors = 0;
      for (const Tree::Leaf& leaf : leaves) tensors += leaf.value->is_tensor() ? 1 : 0;
      throw Error(ErrorCode::kUnsupported,
                  "an .npy holds exactly one tensor, and this tree has " + std::to_string(leaves.size()) +
                      " leaves (" + std::to_string(tensors) + " tensors); use .npz or safetensors",
                  {.path = path});
    }
    const Tensor& tensor = leaves[0].value->tensor();
    if (tensor.nbytes() != tensor.numel() * dtype_size(tensor.dtype())) {
      throw Error(ErrorCode::kInvalidArgument, "tensor's buffer does not match its dtype and shape",
                  {.path = path, .entry = leaves[0].name});
    }
    std::string header;
    try {
      header = numpy_detail::format_npy_header(tensor.dtype(), tensor.shape());
    } catch (Error& error) {
      throw error.with_path(path).with_entry(leaves[0].name);
    }
    detail::AtomicFile file(path, {.fsync = options.fsync});
    file.write_at(std::as_bytes(std::span(header)), 0);
    if (!tensor.bytes().empty()) {
      file.write_parallel({{.bytes = tensor.bytes(), .offset = header.size()}}, options.threads);
    }
    file.commit();
  }
};

class NpzFormat final : public Format {
 public:
  std::string_view id() const override { return "npz"; }
  std::string_view description() const override { return "NumPy .npz (zip of .npy arrays)"; }
  std::vector<std::string_view> extensions() const override { return {".npz"}; }
  FormatCapabilities capabilities() const override { return {.read = true, .write = true, .ties = true}; }
  std::vector<DType> dtypes() const override { return numpy_dtypes(); }

  // A zip whose first member is "<key>.npy" (torch's zips start with
  // "<archive>/data.pkl" and are not claimed), or an archive without members
  // (what np.savez writes for no arrays).
  bool detect(std::span<const std::byte> head, uint64_t file_size) const override {
    const std::string_view first = zip_detail::first_entry_name(head);
    if (!first.empty()) return first.ends_with(".npy");
    return head.size() >= 4 && zip_detail::load_u32(head.data()) == zip_detail::kEndRecordSignature &&
           zip_detail::looks_like_zip(head, file_size);
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
