// The torch Format plugin: reads zip (torch >= 1.6) and legacy torch.save
// files, writes zip files as torch 2.x lays them out.

#include "formats/torch/format.h"
#include "formats/torch/reader.h"
#include "formats/torch/writer.h"

namespace ckpt {
namespace {

class TorchFormat final : public Format {
 public:
  std::string_view id() const override { return "torch"; }
  std::string_view description() const override { return "PyTorch torch.save (.pt/.pth/.bin/.ckpt; zip and legacy)"; }
  std::vector<std::string_view> extensions() const override { return {".pt", ".pth", ".bin", ".ckpt"}; }
  FormatCapabilities capabilities() const override {
    return {.read = true, .write = true, .nested_tree = true, .lists_and_int_keys = true, .checksums = true, .metadata = true,
            .colliding_names = true, .ties = true};
  }
  std::vector<DType> dtypes() const override {
    std::vector<DType> dtypes;
    for (const DTypeInfo& info : all_dtypes()) dtypes.push_back(info.dtype);
    return dtypes;
  }
  bool detect(std::span<const std::byte> head, uint64_t file_size) const override {
    return torch_detail::detect_file(head, file_size);
  }
  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    return torch_detail::read_file(path, options);
  }
  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    torch_detail::write_file(path, tree, options);
  }
};

}  // namespace

const Format& torch_format() {
  static const TorchFormat format;
  return format;
}

}  // namespace ckpt
