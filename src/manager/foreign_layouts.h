#pragma once
// The foreign layouts that have a file of their own (foreign.cc tries them
// in the order of docs/manager.md, "Foreign run directories").

#include <filesystem>
#include <cstdint>
#include <optional>
#include <string>

#include "ckpt/run_directory.h"

namespace ckpt::detail {

// RETURNN's model directory (returnn_layout.cc): epoch.NNN.pt (+ .opt.pt),
// epoch.NNN.index / .data-* / .meta, epoch.NNN.orbax/, each also as
// epoch.pretrain.NNN; scores from the learning_rates file. nullopt when
// `run_dir` holds no such name.
std::optional<RunListing> list_returnn_run(const std::filesystem::path& run_dir);

// RETURNN's name of an epoch's model, without extension (its
// epoch_model_filename: "epoch.%03d", "epoch.pretrain.%03d").
std::string returnn_model_name(int64_t epoch, bool pretrain = false);

// The learning_rates file that belongs to the RETURNN directory `run_dir`:
// "run_dir/learning_rates" if that is a file, else "run_dir/../learning_rates"
// (i6's ReturnnTrainingJob keeps it in output/, beside output/models/), else
// nullopt.
std::optional<std::filesystem::path> returnn_learning_rates_path(const std::filesystem::path& run_dir);

}  // namespace ckpt::detail
