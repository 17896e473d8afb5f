// Checkpoints in memory (include/ckpt/memory.h): the safetensors reader and
// planner, behind the public API.

#include "ckpt/memory.h"

#include <string>

#include "ckpt/error.h"
#include "formats/safetensors/reader.h"
#include "formats/safetensors/writer.h"

namespace ckpt {
namespace {

void require_native(const std::string& format, const std::filesystem::path& label) {
  if (!format.empty() && format != "safetensors") {
    throw Error(ErrorCode::kUnsupported,
                "only safetensors is read from or laid out in memory, not '" + format + "'", {.path = label});
  }
}

}  // namespace

Contents open_bytes(const Buffer& bytes, const std::filesystem::path& label, const LoadOptions& options) {
  require_native(options.format, label);
  return safetensors_detail::read_bytes(bytes, label, options);
}

struct PlannedFile::Plan {
  Plan(const Tree& tree, const SaveOptions& options) : file(tree, options) {}
  safetensors_detail::PlannedFile file;
};

PlannedFile::PlannedFile(const Tree& tree, const SaveOptions& options) {
  require_native(options.format, {});
  plan_ = std::make_unique<Plan>(tree, options);
}

PlannedFile::~PlannedFile() = default;
PlannedFile::PlannedFile(PlannedFile&&) noexcept = default;
PlannedFile& PlannedFile::operator=(PlannedFile&&) noexcept = default;

uint64_t PlannedFile::size() const { return plan_->file.size(); }
void PlannedFile::write_to(std::span<std::byte> out) const { plan_->file.write_to(out); }
void PlannedFile::write_file(const std::filesystem::path& path) const { plan_->file.write_file(path); }

}  // namespace ckpt
