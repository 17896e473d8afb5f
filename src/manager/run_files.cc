#include "manager/run_files.h"

#include <cerrno>
#include <cstdio>
#include <system_error>

#include "io/atomic_directory.h"
#include "io/atomic_file.h"
#include "io/deferred_release.h"
#include "io/file_system.h"

namespace ckpt::detail {

std::vector<size_t> entries_to_remove(const std::vector<CheckpointEntry>& entries, bool any_policy,
                                      std::optional<int64_t> protected_step) {
  std::vector<size_t> remove;
  if (!any_policy) return remove;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i].kept_by.empty()) continue;
    if (protected_step && entries[i].step == protected_step) continue;
    remove.push_back(i);
  }
  return remove;
}

void remove_committed(const std::filesystem::path& path, bool durable) {
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, error))) return;
  const std::filesystem::path hidden = temporary_sibling(path);
  if (std::rename(path.c_str(), hidden.c_str()) != 0) {
    if (errno == ENOENT) return;
    throw_io(path, "cannot move the checkpoint out of the way to remove it", errno);
  }
  // Freeing the blocks (a millisecond per MiB where the file system frees
  // synchronously) is left to the background thread; best effort:
  // leftovers are removed by the next writer.
  remove_later(hidden, durable);
}

void remove_leftovers(const std::filesystem::path& run_dir) noexcept {
  for (const std::filesystem::path& temporary : AtomicDirectory::leftover_temporaries(run_dir)) {
    if (const std::optional<std::filesystem::path> target = temporary_target(temporary)) {
      remove_abandoned_temporaries(*target);
    }
  }
}

void write_tf_state_file(const std::filesystem::path& run_dir, const std::vector<CheckpointEntry>& entries,
                         bool fsync) {
  if (entries.empty()) return;
  // The paths are ckpt's own step names ("step-00000012/state"): ASCII with
  // nothing a text proto string would need to escape.
  const auto relative = [&](const CheckpointEntry& entry) {
    return entry.path.lexically_relative(run_dir).generic_string();
  };
  std::string text = "model_checkpoint_path: \"" + relative(entries.back()) + "\"\n";
  for (const CheckpointEntry& entry : entries) text += "all_model_checkpoint_paths: \"" + relative(entry) + "\"\n";
  AtomicFile file(run_dir / "checkpoint", {.fsync = fsync});
  file.write_at(std::as_bytes(std::span(text.data(), text.size())), 0);
  file.commit({.sync_directory = fsync});
}

}  // namespace ckpt::detail
