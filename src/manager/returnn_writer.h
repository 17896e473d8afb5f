#pragma once
// The manager's "returnn" layout (ManagerOptions::layout): writing a RETURNN
// model directory as RETURNN's torch engine does (returnn/torch/engine.py
// _save_model, _save_optimizer; learning_rate_control.py save), and listing
// it with the steps the manager recorded. docs/manager.md, "Managing a
// RETURNN directory".

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ckpt/manager.h"
#include "ckpt/run_directory.h"

namespace ckpt::detail {

// Throws Error{kInvalidArgument} unless `parts` is what the layout takes:
// one part "state" or "model" (the model's state), optionally "optimizer".
void validate_returnn_parts(const std::vector<StatePart>& parts);

// Writes epoch `epoch` of `run_dir`: "epoch.EEE.opt.pt" (the "optimizer"
// part as given, when there is one), then "epoch.EEE.pt" = {"model": the
// model part, "epoch": epoch, "step": step, "effective_learning_rate":
// metrics["learning_rate"] or None}, each atomically (ckpt::save), then the
// epoch's record in the learning_rates file (returnn_learning_rates_path,
// else RUN_DIR/learning_rates): the metrics merged into it as scores,
// "learning_rate" as its learningRate, every other record and meta entry
// kept. Nothing is written to learning_rates without metrics.
// Throws Error{kInvalidArgument} (before writing anything) for metrics
// without a learning rate where the file has none for the epoch (RETURNN's
// EpochData needs one); what ckpt::save and the learning_rates reader and
// writer throw.
void write_returnn_epoch(const std::filesystem::path& run_dir, int64_t step, int64_t epoch,
                         const std::vector<StatePart>& parts, const std::map<std::string, double>& metrics,
                         bool fsync);

// The RETURNN listing of `run_dir` (list_returnn_run; empty if it holds no
// RETURNN model), each epoch that ckpt_manager.json records as committed by
// a manager with its step filled in. The other epochs keep no step: they are
// not the manager's to remove.
std::vector<CheckpointEntry> list_managed_returnn_run(const std::filesystem::path& run_dir);

// True if the directory holds an optimizer state of any epoch
// (epoch.NNN.opt.pt): RETURNN then resumes only from epochs that have one.
bool returnn_has_optimizer_states(const std::filesystem::path& run_dir);

}  // namespace ckpt::detail
