// The dcp Format: reading in reader.cc (over metadata.cc), writing in
// writer.cc; the names of the layout in layout.h and docs/formats/dcp.md.

#include "formats/dcp/format.h"

#include "ckpt/error.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/writer.h"

namespace ckpt {
namespace {

class DcpFormat final : public Format {
 public:
  std::string_view id() const override { return "dcp"; }
  std::string_view description() const override {
    return "PyTorch Distributed Checkpoint directory (torch.distributed.checkpoint: .metadata + .distcp files)";
  }
  std::vector<std::string_view> extensions() const override { return {}; }
  FormatCapabilities capabilities() const override {
    return {.read = true, .write = true, .nested_tree = true, .lists_and_int_keys = true, .ties = true};
  }
  std::vector<DType> dtypes() const override { return dcp_detail::writable_dtypes(); }

  // A directory is never a single file: detect_path() claims it.
  bool detect(std::span<const std::byte> head, uint64_t file_size) const override { return false; }
  bool detect_path(const std::filesystem::path& path) const override {
    return dcp_detail::detect_checkpoint(path);
  }

  Contents read(const std::filesystem::path& path, const LoadOptions& options) const override {
    try {
      return dcp_detail::read_checkpoint(path, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }

  void write(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) const override {
    try {
      dcp_detail::write_checkpoint(path, tree, options);
    } catch (Error& error) {
      error.with_path(path);
      throw;
    }
  }
};

}  // namespace

const Format& dcp_format() {
  static const DcpFormat kFormat;
  return kFormat;
}

}  // namespace ckpt
