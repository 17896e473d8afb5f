#include "manager/returnn_writer.h"

#include <optional>
#include <system_error>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "core/text.h"
#include "io/file_system.h"
#include "manager/foreign_layouts.h"
#include "manager/learning_rates.h"
#include "manager/run_config.h"

namespace ckpt::detail {

namespace fs = std::filesystem;

namespace {

// The metric that is RETURNN's learningRate rather than a score.
constexpr std::string_view kLearningRateMetric = "learning_rate";

}  // namespace

void validate_returnn_parts(const std::vector<StatePart>& parts) {
  int models = 0, optimizers = 0;
  for (const StatePart& part : parts) {
    if (part.name == "state" || part.name == "model") {
      ++models;
    } else if (part.name == "optimizer") {
      ++optimizers;
    } else {
      throw Error(ErrorCode::kInvalidArgument,
                  "a RETURNN directory holds a model (part \"state\" or \"model\") and an optimizer state (part "
                  "\"optimizer\"), not a part " + detail::quoted(part.name));
    }
  }
  if (models != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "a RETURNN checkpoint needs exactly one model part (\"state\" or \"model\")");
  }
}

void write_returnn_epoch(const fs::path& run_dir, int64_t step, int64_t epoch, const std::vector<StatePart>& parts,
                         const std::map<std::string, double>& metrics, bool fsync) {
  validate_returnn_parts(parts);
  const std::string name = returnn_model_name(epoch);
  // The learning_rates record first: a refusal leaves nothing written.
  const fs::path rates_path = returnn_learning_rates_path(run_dir).value_or(run_dir / kLearningRatesFile);
  std::optional<LearningRates> rates;
  const auto learning_rate = metrics.find(std::string(kLearningRateMetric));
  if (!metrics.empty()) {
    rates = regular_file_exists(rates_path) ? read_learning_rates(rates_path) : LearningRates{};
    EpochRecord& record = (*rates)[epoch];
    for (const auto& [metric, value] : metrics) {
      if (metric == kLearningRateMetric) {
        record.learning_rate = value;
      } else {
        record.scores[metric] = value;
      }
    }
    if (!record.learning_rate) {
      throw Error(ErrorCode::kInvalidArgument,
                  "epoch " + std::to_string(epoch) +
                      " has metrics but no learning rate, which RETURNN's learning_rates records need: pass the "
                      "metric \"learning_rate\"",
                  {.path = rates_path});
    }
  }
  const SaveOptions save_options{.format = "torch", .fsync = fsync, .state_file = StateFilePolicy::kLeave};
  const Tree* model = nullptr;
  for (const StatePart& part : parts) {
    if (part.name == "optimizer") {
      ckpt::save(run_dir / (name + ".opt.pt"), part.state, save_options);
    } else {
      model = &part.state;
    }
  }
  Tree file = Tree::map();
  file.set("model", *model);
  file.set("epoch", epoch);
  file.set("step", step);
  file.set("effective_learning_rate", learning_rate != metrics.end() ? Tree(learning_rate->second) : Tree());
  ckpt::save(run_dir / (name + ".pt"), file, save_options);
  if (rates) write_learning_rates(rates_path, *rates);
}

std::vector<CheckpointEntry> list_managed_returnn_run(const fs::path& run_dir) {
  std::optional<RunListing> listing = list_returnn_run(run_dir);
  if (!listing) return {};
  const std::optional<RunConfig> config = read_run_config(run_dir);
  if (config) {
    for (CheckpointEntry& entry : listing->checkpoints) {
      const auto found = entry.epoch ? config->committed_epochs.find(*entry.epoch) : config->committed_epochs.end();
      if (found != config->committed_epochs.end() && entry.path.extension() == ".pt") entry.step = found->second;
    }
  }
  return std::move(listing->checkpoints);
}

bool returnn_has_optimizer_states(const fs::path& run_dir) {
  std::error_code error;
  for (const fs::directory_entry& item : fs::directory_iterator(run_dir, error)) {
    const std::string name = item.path().filename().string();
    if (name.starts_with("epoch.") && name.ends_with(".opt.pt")) return true;
  }
  return false;
}

}  // namespace ckpt::detail
