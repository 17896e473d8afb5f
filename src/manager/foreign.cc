// The run directories other tools write, read as they are (read-only): the
// order in which the layouts are tried and the detection rule of each are
// in docs/manager.md, "Foreign run directories". RETURNN's is in
// returnn_layout.cc; TensorFlow's, Flax's, Lightning's and Orbax's here.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <system_error>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/orbax/layout.h"
#include "formats/tf/layout.h"
#include "formats/tf/paths.h"
#include "io/file_system.h"
#include "manager/foreign_files.h"
#include "manager/foreign_layouts.h"
#include "manager/run_layouts.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;

// The step a TF prefix's name ends in: "ckpt-12", "model.ckpt-1000" (the
// "-N" that tf.train.CheckpointManager and Saver's global_step append).
std::optional<int64_t> trailing_step(std::string_view name) {
  const size_t dash = name.rfind('-');
  if (dash == std::string_view::npos) return std::nullopt;
  return decimal_number(name.substr(dash + 1));
}

// TensorFlow: a `checkpoint` state file (tf.train.CheckpointManager,
// tf.train.Checkpoint.save, Saver); its checkpoints are the bundles it
// names, each taken by its file name in `run_dir`.
std::optional<RunListing> list_tf_run(const fs::path& run_dir) {
  const fs::path state_file = run_dir / tf_detail::kStateFileName;
  if (!regular_file_exists(state_file)) return std::nullopt;
  const tf_detail::StateFileContents state = tf_detail::read_state_file(state_file);
  std::vector<std::string> names;
  std::vector<std::optional<double>> times;
  for (size_t i = 0; i < state.all_model_checkpoint_paths.size(); ++i) {
    names.push_back(fs::path(state.all_model_checkpoint_paths[i]).filename().string());
    times.push_back(state.all_model_checkpoint_timestamps.size() == state.all_model_checkpoint_paths.size()
                        ? std::optional<double>(state.all_model_checkpoint_timestamps[i])
                        : std::nullopt);
  }
  if (!state.model_checkpoint_path.empty()) {
    const std::string latest = fs::path(state.model_checkpoint_path).filename().string();
    if (std::find(names.begin(), names.end(), latest) == names.end()) {
      names.push_back(latest);
      times.push_back(std::nullopt);
    }
  }
  const std::vector<RunEntry> entries = run_entries(run_dir);
  RunListing listing{.run_dir = run_dir, .layout = "tf", .checkpoints = {}};
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty() || names[i] == "." || names[i] == "..") continue;
    const fs::path prefix = run_dir / names[i];
    if (std::any_of(listing.checkpoints.begin(), listing.checkpoints.end(),
                    [&](const CheckpointEntry& entry) { return entry.path == prefix; })) {
      continue;  // named twice
    }
    auto files = tf_bundle_files(prefix, entries);
    if (!files) continue;  // pruned already, or an index without its data
    CheckpointEntry entry;
    entry.step = trailing_step(names[i]);
    entry.path = prefix;
    set_files(entry, std::move(*files), times[i]);
    listing.checkpoints.push_back(std::move(entry));
  }
  sort_listing(listing.checkpoints);
  return listing;
}

// A directory that ckpt::load reads as Orbax: it holds _CHECKPOINT_METADATA
// (a step) or _METADATA (one item).
bool complete_orbax_directory(const fs::path& directory) {
  return regular_file_exists(directory / orbax_detail::kCheckpointMetadataFile) ||
         regular_file_exists(directory / orbax_detail::kTreeMetadataFile);
}

// Flax: flax.training.checkpoints' "checkpoint_<step>", a msgpack file or
// (Flax on Orbax) a directory.
std::optional<RunListing> list_flax_run(const fs::path& run_dir) {
  constexpr std::string_view kPrefix = "checkpoint_";
  RunListing listing{.run_dir = run_dir, .layout = "flax", .checkpoints = {}};
  bool seen = false;
  for (const RunEntry& run_entry : run_entries(run_dir)) {
    if (!run_entry.name.starts_with(kPrefix)) continue;
    const auto step = decimal_number(std::string_view(run_entry.name).substr(kPrefix.size()));
    if (!step || !(run_entry.file || run_entry.directory)) continue;
    seen = true;
    const fs::path path = run_dir / run_entry.name;
    if (run_entry.directory && !complete_orbax_directory(path)) continue;
    CheckpointEntry entry;
    entry.step = step;
    entry.path = path;
    std::optional<double> commit_time;
    if (run_entry.directory && regular_file_exists(path / orbax_detail::kCheckpointMetadataFile)) {
      OrbaxStepRecord record = read_orbax_step_record(path);
      entry.metrics = std::move(record.metrics);
      commit_time = record.commit_time;
    }
    std::vector<fs::path> files = {path};
    // Flax keeps a checkpoint's multiprocess arrays beside its file, in
    // "<name>_gda/" (checkpoints.py MP_ARRAY_POSTFIX).
    std::error_code error;
    if (run_entry.file && fs::is_directory(run_dir / (run_entry.name + "_gda"), error)) {
      files.push_back(run_dir / (run_entry.name + "_gda"));
    }
    set_files(entry, std::move(files), commit_time);
    listing.checkpoints.push_back(std::move(entry));
  }
  if (!seen) return std::nullopt;
  sort_listing(listing.checkpoints);
  return listing;
}

// "epoch=2-step=300", "epoch=2-step=300-v1", "epoch=2-val_loss=0.12": the
// stem of a Lightning ModelCheckpoint file, its KEY=NUMBER parts joined
// by '-' (a trailing "-vN" is the version ModelCheckpoint adds to a name
// taken). Fills epoch, step and the other numbers as metrics; false if the
// stem is not of that shape or names neither epoch nor step.
bool parse_lightning_stem(std::string_view stem, CheckpointEntry& entry) {
  std::map<std::string, double> numbers;
  while (!stem.empty()) {
    const size_t equals = stem.find('=');
    if (equals == std::string_view::npos || equals == 0) return false;
    const std::string key(stem.substr(0, equals));
    if (key.find('-') != std::string::npos) {
      // Only the version may follow without '=': "...-v1".
      return false;
    }
    stem.remove_prefix(equals + 1);
    // The number: an optional sign, then up to the next '-' that starts
    // the next part (or the version).
    size_t end = stem.empty() || stem.front() != '-' ? 0 : 1;
    while (end < stem.size() && stem[end] != '-') ++end;
    // An exponent's sign: "1e-05".
    while (end + 1 < stem.size() && stem[end] == '-' && (stem[end - 1] == 'e' || stem[end - 1] == 'E')) {
      ++end;
      while (end < stem.size() && stem[end] != '-') ++end;
    }
    const std::string value(stem.substr(0, end));
    char* parsed_end = nullptr;
    const double number = std::strtod(value.c_str(), &parsed_end);
    if (value.empty() || parsed_end != value.c_str() + value.size()) return false;
    if (!numbers.emplace(key, number).second) return false;
    stem.remove_prefix(end);
    if (stem.empty()) break;
    stem.remove_prefix(1);  // '-'
    if (stem.size() > 1 && stem.front() == 'v' && decimal_number(stem.substr(1))) break;
  }
  const auto integer = [&](const char* key) -> std::optional<int64_t> {
    const auto found = numbers.find(key);
    if (found == numbers.end() || !(found->second >= 0 && found->second < 9.2e18) ||
        found->second != std::floor(found->second)) {
      return std::nullopt;
    }
    return static_cast<int64_t>(found->second);
  };
  entry.epoch = integer("epoch");
  entry.step = integer("step");
  if (!entry.epoch && !entry.step) return false;
  numbers.erase("epoch");
  numbers.erase("step");
  entry.metrics = std::move(numbers);
  return true;
}

// last.ckpt's epoch and step: the "epoch" and "global_step" integers of its
// top level (what Lightning's trainer saves), read lazily; left unknown if
// the file cannot be read (`ckpt verify` says why).
void read_lightning_counters(CheckpointEntry& entry) {
  try {
    const Contents contents = open(entry.path);
    if (!contents.tree.is_map()) return;
    const Tree* epoch = contents.tree.find(Key(std::string("epoch")));
    const Tree* step = contents.tree.find(Key(std::string("global_step")));
    if (epoch != nullptr && epoch->kind() == Tree::Kind::kInt) entry.epoch = epoch->integer();
    if (step != nullptr && step->kind() == Tree::Kind::kInt) entry.step = step->integer();
  } catch (const Error&) {
  }
}

// Lightning: ModelCheckpoint's "epoch=E-step=S.ckpt" files and last.ckpt
// (also "last-vN.ckpt").
std::optional<RunListing> list_lightning_run(const fs::path& run_dir) {
  RunListing listing{.run_dir = run_dir, .layout = "lightning", .checkpoints = {}};
  std::vector<fs::path> last;
  for (const RunEntry& run_entry : run_entries(run_dir)) {
    if (!run_entry.file || !run_entry.name.ends_with(".ckpt") || run_entry.name.starts_with(".")) continue;
    const std::string_view stem = std::string_view(run_entry.name).substr(0, run_entry.name.size() - 5);
    CheckpointEntry entry;
    entry.path = run_dir / run_entry.name;
    if (stem == "last" || (stem.starts_with("last-v") && decimal_number(stem.substr(6)))) {
      read_lightning_counters(entry);
      last.push_back(entry.path);
    } else if (!parse_lightning_stem(stem, entry)) {
      continue;
    }
    set_files(entry, {entry.path});
    listing.checkpoints.push_back(std::move(entry));
  }
  if (listing.checkpoints.empty()) return std::nullopt;
  sort_listing(listing.checkpoints, last);
  return listing;
}

// Orbax: orbax.checkpoint.CheckpointManager's "<step>/" directories, each
// complete once it holds _CHECKPOINT_METADATA (Orbax writes it last, and a
// step in progress is "<step>.orbax-checkpoint-tmp-<N>").
std::optional<RunListing> list_orbax_run(const fs::path& run_dir) {
  RunListing listing{.run_dir = run_dir, .layout = "orbax", .checkpoints = {}};
  bool seen = false;
  for (const RunEntry& run_entry : run_entries(run_dir)) {
    const auto step = decimal_number(run_entry.name);
    if (!step || !run_entry.directory) continue;
    const fs::path path = run_dir / run_entry.name;
    const fs::path record_file = path / orbax_detail::kCheckpointMetadataFile;
    // A bare number is a common name: only a directory that holds Orbax's
    // files, or is a step in progress, makes this an Orbax run.
    if (!regular_file_exists(record_file)) continue;
    seen = true;
    OrbaxStepRecord record = read_orbax_step_record(path);
    CheckpointEntry entry;
    entry.step = step;
    entry.path = path;
    entry.metrics = std::move(record.metrics);
    set_files(entry, {path}, record.commit_time);
    listing.checkpoints.push_back(std::move(entry));
  }
  if (!seen) {
    // Only steps in progress: still an Orbax run, with nothing committed.
    for (const RunEntry& run_entry : run_entries(run_dir)) {
      const size_t tmp = run_entry.name.find(".orbax-checkpoint-tmp-");
      if (run_entry.directory && tmp != std::string::npos && decimal_number(run_entry.name.substr(0, tmp))) {
        return listing;
      }
    }
    return std::nullopt;
  }
  sort_listing(listing.checkpoints);
  return listing;
}

}  // namespace

std::optional<RunListing> list_foreign_run(const fs::path& run_dir) {
  // The order of docs/manager.md: RETURNN first (its TF models come with a
  // `checkpoint` state file of their own), then TensorFlow, Flax, Lightning,
  // Orbax. The first layout that recognizes the directory lists it.
  using Lister = std::optional<RunListing> (*)(const fs::path&);
  for (const Lister lister : {Lister{list_returnn_run}, Lister{list_tf_run}, Lister{list_flax_run},
                              Lister{list_lightning_run}, Lister{list_orbax_run}}) {
    if (std::optional<RunListing> listing = lister(run_dir)) return listing;
  }
  return std::nullopt;
}

}  // namespace ckpt::detail
