#pragma once
// The layouts list_run_directory (ckpt/run_directory.h) tries, one home each:
// ckpt's own (ckpt_layout.cc, beside the manager that writes it) and the
// foreign ones (foreign.cc). Each returns nullopt when `run_dir` does not
// hold its layout, a listing (possibly empty of checkpoints) when it does.

#include <optional>

#include "ckpt/run_directory.h"

namespace ckpt::detail {

// ckpt's layout: step-NNNNNNNN/ directories holding checkpoint.json.
std::optional<RunListing> list_ckpt_run(const std::filesystem::path& run_dir);

// RETURNN, Flax, TensorFlow, Lightning and Orbax run directories, in the
// order documented in docs/manager.md.
std::optional<RunListing> list_foreign_run(const std::filesystem::path& run_dir);

}  // namespace ckpt::detail
