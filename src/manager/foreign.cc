// Placeholder until this layout lands: recognizes nothing.
#include "manager/run_layouts.h"

namespace ckpt::detail {

std::optional<RunListing> list_foreign_run(const std::filesystem::path&) { return std::nullopt; }

}  // namespace ckpt::detail
