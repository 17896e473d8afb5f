// RETURNN's model directory, read as RETURNN reads it (returnn/engine/base.py,
// EngineBase.get_existing_models, get_epoch_model, epoch_model_filename;
// returnn/torch/engine.py _save_model, _save_optimizer, delete_model).
// The rules, with their reasons, are in docs/manager.md, "Foreign run
// directories".

#include <algorithm>
#include <map>
#include <string>
#include <system_error>

#include "io/file_system.h"
#include "manager/foreign_files.h"
#include "manager/foreign_layouts.h"
#include "manager/learning_rates.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;

// RETURNN's `model` file prefix: "<prefix>.NNN" and "<prefix>.pretrain.NNN"
// (epoch_model_filename's "%03d"). i6's setups and RETURNN's examples name
// it "epoch".
constexpr std::string_view kModelPrefix = "epoch.";
constexpr std::string_view kPretrain = "pretrain.";

// What one epoch's files are, for one of its two names (plain, pretrain).
struct EpochFiles {
  bool torch = false;      // NAME.pt
  bool optimizer = false;  // NAME.opt.pt
  bool tf = false;         // NAME.index (complete with its data: checked later)
  bool orbax = false;      // NAME.orbax/_CHECKPOINT_METADATA
  bool orbax_optimizer = false;  // NAME.opt.orbax/
  bool any() const { return torch || tf || orbax; }
};

struct EpochNames {
  EpochFiles plain, pretrain;
};

// Splits "epoch.[pretrain.]NNN<rest>" into (pretrain, NNN, rest).
bool split_name(std::string_view name, bool& pretrain, int64_t& epoch, std::string_view& rest) {
  if (!name.starts_with(kModelPrefix)) return false;
  name.remove_prefix(kModelPrefix.size());
  pretrain = name.starts_with(kPretrain);
  if (pretrain) name.remove_prefix(kPretrain.size());
  const size_t digits = std::min(name.find_first_not_of("0123456789"), name.size());
  // "%03d": at least three digits.
  if (digits < 3) return false;
  const auto number = decimal_number(name.substr(0, digits));
  if (!number) return false;
  epoch = *number;
  rest = name.substr(digits);
  return true;
}

}  // namespace

std::string returnn_model_name(int64_t epoch, bool pretrain) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%03lld", static_cast<long long>(epoch));
  return std::string(kModelPrefix) + (pretrain ? std::string(kPretrain) : "") + digits;
}

std::optional<fs::path> returnn_learning_rates_path(const fs::path& run_dir) {
  for (const fs::path& candidate : {run_dir / kLearningRatesFile, run_dir / ".." / kLearningRatesFile}) {
    if (regular_file_exists(candidate)) return candidate.lexically_normal();
  }
  return std::nullopt;
}

std::optional<RunListing> list_returnn_run(const fs::path& run_dir) {
  const std::vector<RunEntry> entries = run_entries(run_dir);
  std::map<int64_t, EpochNames> epochs;
  bool seen = false;
  for (const RunEntry& entry : entries) {
    bool pretrain = false;
    int64_t epoch = 0;
    std::string_view rest;
    if (!split_name(entry.name, pretrain, epoch, rest)) continue;
    EpochNames& names = epochs[epoch];
    EpochFiles& files = pretrain ? names.pretrain : names.plain;
    if (entry.file && rest == ".pt") {
      files.torch = seen = true;
    } else if (entry.file && rest == ".opt.pt") {
      files.optimizer = seen = true;
    } else if (entry.file && (rest == ".index" || rest == ".meta" || rest.starts_with(".data-"))) {
      if (rest == ".index") files.tf = true;
      seen = true;
    } else if (entry.directory && rest == ".orbax") {
      files.orbax = regular_file_exists(run_dir / entry.name / "_CHECKPOINT_METADATA");
      seen = true;
    } else if (entry.directory && rest == ".opt.orbax") {
      files.orbax_optimizer = seen = true;
    }
  }
  if (!seen) return std::nullopt;

  const std::optional<fs::path> rates_file = returnn_learning_rates_path(run_dir);
  const LearningRates rates = rates_file ? read_learning_rates(*rates_file) : LearningRates{};

  RunListing listing{.run_dir = run_dir, .layout = "returnn", .checkpoints = {}};
  // The newest epoch whose torch model has its optimizer state: RETURNN
  // resumes training from no later one (get_existing_models with
  // for_training), so torch models after it are a save cut short between
  // the model and the optimizer.
  std::optional<int64_t> newest_resumable;
  for (const auto& [epoch, names] : epochs) {
    // RETURNN tries the plain name first, then the pretrain one.
    const bool use_pretrain = !names.plain.any() && names.pretrain.any();
    const EpochFiles& files = use_pretrain ? names.pretrain : names.plain;
    const std::string name = returnn_model_name(epoch, use_pretrain);
    const fs::path base = run_dir / name;
    CheckpointEntry entry;
    entry.epoch = epoch;
    std::vector<fs::path> paths;
    if (files.torch) {
      entry.path = base.string() + ".pt";
      paths.push_back(entry.path);
      if (files.optimizer) {
        paths.push_back(base.string() + ".opt.pt");
        newest_resumable = epoch;
      }
    } else if (files.tf) {
      auto bundle = tf_bundle_files(base, entries);
      if (!bundle) continue;  // an index without its data
      entry.path = base;
      paths = std::move(*bundle);
    } else if (files.orbax) {
      entry.path = base.string() + ".orbax";
      paths.push_back(entry.path);
      if (files.orbax_optimizer) paths.push_back(base.string() + ".opt.orbax");
    } else {
      continue;  // only an optimizer state, or an incomplete .orbax/
    }
    if (const auto found = rates.find(epoch); found != rates.end()) entry.metrics = found->second.scores;
    set_files(entry, std::move(paths));
    listing.checkpoints.push_back(std::move(entry));
  }
  if (newest_resumable) {
    std::erase_if(listing.checkpoints, [&](const CheckpointEntry& entry) {
      return *entry.epoch > *newest_resumable && entry.path.extension() == ".pt";
    });
  }
  sort_listing(listing.checkpoints);
  return listing;
}

}  // namespace ckpt::detail
