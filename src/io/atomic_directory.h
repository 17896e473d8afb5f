#pragma once
// AtomicDirectory: builds a directory under a temporary name beside its
// final path and commits it with one rename, so that a reader sees the old
// directory or the new one, never a mixture, and a failure never destroys
// the old one. Knows no format. The directory counterpart of AtomicFile.
//
//   AtomicDirectory directory(path, {.fsync = true});
//   write files under directory.path() (AtomicFile{.fsync = false} each,
//   or any other way);
//   directory.commit();      // sync, rename into place, sync the parent
//   // destructor without commit(): the temporary and its contents are removed

#include <filesystem>
#include <vector>

namespace ckpt::detail {

struct AtomicDirectoryOptions {
  // commit() makes the new directory durable before it becomes visible and
  // its parent's entry after.
  bool fsync = true;
  // With fsync: the caller synced every file it wrote under path()
  // (AtomicFile{.fsync = true}), so commit() fsyncs only the directories.
  // Off: commit() syncs the whole file system once (syncfs), which costs
  // far less than an fsync per file when there are thousands.
  bool files_synced = false;
};

class AtomicDirectory {
 public:
  // Creates the empty temporary directory "<parent>/.<name>.ckpt-tmp-<random>"
  // (io/file_system.h temporary_sibling) beside `final_path`, and holds the
  // writer's lock on it (flock on the directory, claim_temporary) until
  // commit() or destruction. First removes the temporaries of `final_path`
  // that belong to no live writer (remove_abandoned_temporaries).
  // Throws Error{kInvalidArgument} if `final_path` has no file name,
  // {kNotFound} if its parent does not exist, {kIo} naming `final_path` if
  // the directory cannot be created.
  explicit AtomicDirectory(std::filesystem::path final_path, AtomicDirectoryOptions options = {});
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;
  // Abandons the directory unless commit() succeeded: removes the temporary
  // with everything in it, leaving `final_path` as it was. Never throws.
  ~AtomicDirectory();

  // The temporary directory, where the caller writes the files.
  const std::filesystem::path& path() const { return temp_path_; }
  const std::filesystem::path& final_path() const { return final_path_; }

  // Syncs what lies under path() (with options.fsync; see files_synced),
  // then puts it at final_path(): a rename when nothing is there; when a
  // directory is there, an atomic exchange (renameat2 RENAME_EXCHANGE) after
  // which the old directory lies under the temporary name, to be removed.
  // Where the file system cannot exchange, the old directory is moved aside
  // first, to aside_sibling() (not atomic: a crash between the two renames
  // leaves no directory at final_path(), the old one under its aside name,
  // which no cleaner removes until final_path() exists again). The old
  // directory stays locked by this writer from before the rename until it
  // is removed, so that no cleaner removes it while a crash could still
  // bring it back (before the parent is synced). Then syncs the parent (with options.fsync) and only
  // then removes the old directory, so that a crash never leaves the old
  // entry visible with its files gone: on the background thread of
  // io/deferred_release.h (remove_later), so that freeing its blocks is not
  // part of the commit; until then it lies under its temporary name
  // (drain_deferred_releases() waits for it). Removing it is best effort: what
  // cannot be removed keeps its temporary name, for leftover_temporaries().
  // Throws Error{kInvalidArgument} if final_path() is something other than
  // a directory, or if commit() already succeeded; {kIo} (or {kNotFound})
  // naming final_path() if a sync or rename fails: before the rename,
  // final_path() is left as it was; a failed sync of the parent after it
  // throws with the new directory in place (and the old one left over).
  void commit();

  // True if the last component of `path` is a temporary name of AtomicFile
  // or AtomicDirectory (".<name>.ckpt-tmp-<16 hex digits>", or the aside
  // name ".<name>.ckpt-old-<16 hex digits>").
  static bool is_temporary(const std::filesystem::path& path);
  // The entries of `directory` that are such temporaries (files or
  // directories), sorted: what commits interrupted by a crash left behind,
  // for whoever owns the directory (the checkpoint manager, when it opens a
  // run directory) to remove: remove_abandoned_temporaries() of each target
  // removes those no live writer holds. Never throws; an unreadable directory has none.
  static std::vector<std::filesystem::path> leftover_temporaries(const std::filesystem::path& directory) noexcept;

 private:
  void sync_contents() const;
  // Renames the temporary into place; returns where the old directory now
  // lies (empty if there was none), to be removed once the parent is synced.
  std::filesystem::path install();
  std::filesystem::path final_path_;
  std::filesystem::path temp_path_;
  AtomicDirectoryOptions options_;
  int lock_fd_ = -1;  // the temporary, opened and locked
  bool committed_ = false;
};

}  // namespace ckpt::detail
