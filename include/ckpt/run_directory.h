#pragma once
// What a run directory holds, as a list of checkpoints: ckpt's own layout
// (one step-NNNNNNNN/ directory per commit, see manager.h) and the layouts
// other tools write (RETURNN, Flax, TensorFlow, Lightning, Orbax), read as
// they are. Read-only: nothing here takes a lock or changes a file.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/tree.h"

namespace ckpt {

// One checkpoint found in a run directory.
struct CheckpointEntry {
  // Step and epoch, where the layout knows them (TF's ckpt-N and Orbax's N/
  // are steps; RETURNN's epoch.NNN and Lightning's epoch=E are epochs).
  std::optional<int64_t> step;
  std::optional<int64_t> epoch;
  // Scores recorded for it (ckpt's checkpoint.json; RETURNN's
  // learning_rates file; empty where the layout records none).
  std::map<std::string, double> metrics;
  // What ckpt::load / ckpt.load opens directly: a state file, a TF bundle
  // prefix, an Orbax / ckpt step directory's state.
  std::filesystem::path path;
  // A state saved in parts (Manager::save with StateParts): every part's
  // path, `path` first, each of which ckpt::load opens; the state is their
  // union (load_checkpoint). Empty for a state in one file.
  std::vector<std::filesystem::path> parts;
  // Every path that belongs to this checkpoint and goes when it is pruned
  // (RETURNN's epoch.NNN.opt.pt beside epoch.NNN.pt; a TF bundle's .index,
  // .data-* and .meta; a step directory as one path).
  std::vector<std::filesystem::path> files;
  // Bytes of `files` together.
  uint64_t size = 0;
  // Wall time of the commit (checkpoint.json), else the newest mtime of
  // `files`; seconds since the epoch.
  double time = 0;
  // The policies that keep it (filled by the manager's retention; empty for
  // a plain listing of a foreign directory).
  std::vector<std::string> kept_by;
};

// The checkpoints of one run directory, oldest first (by step, else epoch).
struct RunListing {
  std::filesystem::path run_dir;
  // "ckpt", "returnn", "flax", "tf", "lightning", "orbax"; "empty" for a
  // directory that holds no checkpoint of any layout.
  std::string layout;
  std::vector<CheckpointEntry> checkpoints;
};

// Lists `run_dir` in whichever layout it holds (ckpt's own first, then the
// foreign ones). Incomplete checkpoints (a temporary, an Orbax step without
// _CHECKPOINT_METADATA, a TF bundle without its data) are not listed; unknown
// files are ignored. Throws Error{kNotFound} if `run_dir` is not a directory,
// {kCorrupt} naming the file if a record it needs (checkpoint.json, a
// learning_rates file, TF's checkpoint state file) cannot be parsed.
RunListing list_run_directory(const std::filesystem::path& run_dir);

// Loads a listed checkpoint: ckpt::load of its path, or, for a state saved
// in parts, the union of its parts (maps merged key by key). Throws what
// ckpt::load throws, and Error{kCorrupt} naming the entry and the parts when
// two parts hold one leaf.
Tree load_checkpoint(const CheckpointEntry& entry, const LoadOptions& options = {});

// `listing` as a document (ckpt/document.h: to_json() gives `ckpt ls
// --json`, the Python package hands it over as dicts and lists):
//   {"run_dir": str, "layout": str,
//    "checkpoints": [{"step": int | none, "epoch": int | none,
//                     "metrics": {name: float...}, "path": str, "size": int,
//                     "time": float, "kept_by": [str...],
//                     "parts": [str...]   // only for a state saved in parts
//                    }...]}   // oldest first
// A number the layout does not know is none (JSON null).
Tree listing_document(const RunListing& listing);

}  // namespace ckpt
