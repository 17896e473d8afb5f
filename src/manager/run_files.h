#pragma once
// The file-system effects on a ckpt run directory that the manager and
// `ckpt prune` (prune_run_directory) share: deciding what retention lets go,
// removing a committed checkpoint without ever showing half of it, the
// leftovers of killed saves, and TF's `checkpoint` state file.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "ckpt/run_directory.h"

namespace ckpt::detail {

// The indices of `entries` (kept_by filled, oldest first) that retention
// lets go: those no policy keeps, when `any_policy`; never the one whose
// step is `protected_step`. Pure.
std::vector<size_t> entries_to_remove(const std::vector<CheckpointEntry>& entries, bool any_policy,
                                      std::optional<int64_t> protected_step = std::nullopt);

// Removes a committed checkpoint's `path` (a step directory, or a foreign
// checkpoint's file or directory): first renamed to a temporary name
// (temporary_sibling), so that no reader ever finds part of it under its
// name (it is gone from listings when this returns), then removed on the
// background thread of io/deferred_release.h (remove_later; after an fsync
// of the directory when `durable`, so that a crash never shows the old
// name with its files gone); what cannot be removed stays under the
// temporary name, for the next writer's cleanup. A missing path is not an
// error. Throws Error{kIo} naming `path` if the rename fails.
void remove_committed(const std::filesystem::path& path, bool durable = true);

// Removes the temporaries that killed saves left in `run_dir` (each of
// AtomicDirectory::leftover_temporaries no live writer holds,
// remove_abandoned_temporaries of its target). Never throws.
void remove_leftovers(const std::filesystem::path& run_dir) noexcept;

// Rewrites RUN_DIR/checkpoint, TensorFlow's state file, to name `entries`
// (a ckpt run's, oldest first) by their paths relative to `run_dir`, the
// newest as model_checkpoint_path, so that tf.train.latest_checkpoint(run_dir)
// finds it. Nothing is written for no entries. Throws Error{kIo}.
void write_tf_state_file(const std::filesystem::path& run_dir, const std::vector<CheckpointEntry>& entries,
                         bool fsync);

}  // namespace ckpt::detail
