#pragma once
// Preloads: parts of a model's state taken from other checkpoints by name,
// with the options RETURNN's `preload_from_files` has, applied in order after
// the main checkpoint, each reporting what it set.
//
//   ckpt::PreloadSpec encoder{.name = "pretrained", .source = "pretrain/run",
//                             .prefix = {{"encoder.", "encoder."}}};
//   ckpt::PreloadReport r = ckpt::apply_preloads(state, {&encoder, 1},
//                                                {.stage = ckpt::TrainingStage::kFreshTraining});
//   state = std::move(r.state);
//
// Names are the dotted names of tree.h. Prefixes here are plain string
// prefixes, as RETURNN has them ("enc" also matches "encx.w"; write
// "encoder." for the module). See docs/modules.md for each option and where
// it differs from RETURNN.

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/tree.h"

namespace ckpt {

// When a preload applies (RETURNN's init_for_train).
enum class PreloadWhen {
  kNotInTraining,  // init_for_train=False: only outside training (search, forward)
  kFreshTraining,  // init_for_train=True: only when training starts fresh, never on a resumed run
  kAlways,         // init_for_train="always": every run; its parameters are init-only (never saved)
};

// How the current run started.
enum class TrainingStage {
  kFreshTraining,      // training, no committed checkpoint to continue from
  kContinuedTraining,  // training, resumed from the run's latest checkpoint
  kNotTraining,        // no training (search, forward, export)
};

// True if a spec with `when` applies in `stage`.
bool preload_applies(PreloadWhen when, TrainingStage stage) noexcept;

struct PreloadSpec {
  // For reports and errors (RETURNN's preload_from_files dict key).
  std::string name;
  // Any path ckpt::load reads; a run directory (any layout
  // list_run_directory knows) gives its latest checkpoint.
  std::filesystem::path source;
  // Source prefix -> target prefix, plain string prefixes. A source name
  // starting with a source prefix (the longest that fits) is loaded into
  // the target prefix + the rest of the name; source names that match no
  // source prefix are not loaded. RETURNN's single "prefix" P (the target
  // prefix of every source name) is {"", P}. Empty: names stay as they are.
  std::map<std::string, std::string> prefix;
  // Target name -> source name (as in the source, after checkpoint_key,
  // before any prefix). A source leaf named here is loaded into the targets
  // that name it, not through `prefix`.
  std::map<std::string, std::string> var_name_mapping;
  // Target parameters in this spec's scope (under a target prefix, or every
  // one without prefixes) that the source lacks are let pass (reported as
  // missing) instead of being an error.
  bool ignore_missing = false;
  // Target names (exact) and target name prefixes (plain) never written.
  std::vector<std::string> ignore_params;
  std::vector<std::string> ignore_params_prefixes;
  // The sub-tree of the source to read (a dotted name, e.g. "model" for
  // torch.save({"model": sd, "optimizer": ...})); none: the whole source.
  std::optional<std::string> checkpoint_key;
  PreloadWhen when = PreloadWhen::kFreshTraining;
  // May write a parameter that an earlier spec (in the same call) wrote.
  bool overrides = false;
};

// A spec's source, read.
struct PreloadSource {
  // The file (or bundle prefix, or directory) that was loaded: a run
  // directory's latest checkpoint resolved.
  std::filesystem::path path;
  Tree state;
};

// Reads `source`: a directory that list_run_directory() finds checkpoints in
// gives its latest (the last in its listing); anything else goes to
// ckpt::load. Throws what those throw (Error{kNotFound} for a missing path,
// also for a run directory without a checkpoint).
PreloadSource read_preload_source(const std::filesystem::path& source);

// What one spec did.
struct PreloadResult {
  std::string name;               // the spec's
  PreloadWhen when = PreloadWhen::kFreshTraining;  // the spec's
  bool applied = false;           // false: skipped in this stage (its source not read)
  std::filesystem::path source;   // what was read (PreloadSource::path); empty when skipped
  // (target name, source name) for every parameter set, in target order.
  std::vector<std::pair<std::string, std::string>> set;
  // Target names in scope that the source lacks (ignore_missing let them pass).
  std::vector<std::string> missing;
  // Target names that a source name maps to but the target does not have
  // (skipped, as RETURNN notes them).
  std::vector<std::string> unexpected;
  // Target names skipped through ignore_params / ignore_params_prefixes.
  std::vector<std::string> ignored;
  // Target names set here that an earlier spec had set (overrides).
  std::vector<std::string> overridden;
};

struct PreloadReport {
  // The state with every preload applied (tensors share the sources'
  // memory); every other leaf as given.
  Tree state;
  // One per spec, in the order given, skipped ones included.
  std::vector<PreloadResult> preloads;

  // The target names set by applied kAlways specs, in order: init-only
  // parameters (ModuleFileOptions::init_only), loaded on every run and never
  // saved.
  std::vector<std::string> init_only() const;
};

struct PreloadOptions {
  TrainingStage stage = TrainingStage::kFreshTraining;
  // Reads a spec's source; empty: read_preload_source(spec.source).
  std::function<PreloadSource(const PreloadSpec& spec)> read_source;
};

// Applies `specs` to `state` (the model's state after the main checkpoint),
// in order, each only where preload_applies(spec.when, options.stage).
// All or nothing: on an error nothing is returned and `state` is untouched.
// Throws, the message naming the spec, its source and the parameters:
//  * Error{kNotFound}: checkpoint_key not in the source; a source prefix that
//    matches no source name, or a target prefix no target name; a
//    var_name_mapping source name the source lacks, or target name the
//    target lacks; target parameters in scope that the source lacks (all of
//    them listed) without ignore_missing; a spec that sets nothing at all
//    (also with ignore_missing: as RETURNN, a preload that loads nothing is
//    a mistake);
//  * Error{kMismatch}: a source leaf of another shape, dtype or kind than
//    the target's (naming the parameter and both shapes and dtypes);
//  * Error{kInvalidArgument}: a spec writing a parameter an earlier spec
//    wrote, unless it `overrides`; a checkpoint_key that is not a container;
//  * whatever reading a source throws.
PreloadReport apply_preloads(const Tree& state, std::span<const PreloadSpec> specs,
                             const PreloadOptions& options = {});

}  // namespace ckpt
