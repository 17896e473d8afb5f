#pragma once
// The file-system pieces that ckpt's atomic commits (AtomicFile,
// AtomicDirectory) share: how an operating-system failure becomes an Error,
// syncing directories, and the names of temporaries. Knows no format.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

namespace ckpt::detail {

// Throws the Error for the system call failure `error` (an errno value) on
// `path`: {kNotFound} for ENOENT and ENOTDIR, {kIo} otherwise; the message
// is "`what`: <strerror(error)>", the context the path and `offset`.
[[noreturn]] void throw_io(const std::filesystem::path& path, std::string_view what, int error,
                           std::optional<uint64_t> offset = std::nullopt);

// True if `path` is a regular file (following links); false when it is
// absent, another kind of entry or cannot be examined. Never throws.
bool regular_file_exists(const std::filesystem::path& path) noexcept;

// fsync()s the file at `path` (opened read-only for it): its data and size
// reach the disk. Throws as throw_io, naming `path`.
void sync_file(const std::filesystem::path& path);

// fsync()s `directory` ("." when empty), so that the entries created,
// renamed or removed in it are durable. A file system that cannot sync
// directories (EINVAL) is not an error. Throws as throw_io, naming
// `for_path` (the file or directory the sync is for).
void sync_directory(const std::filesystem::path& directory, const std::filesystem::path& for_path);

// syncfs()s the file system that holds `directory`: every file and
// directory written on it reaches the disk, at the cost of one call (an
// fsync per file costs one each). Throws as sync_directory.
void sync_file_system(const std::filesystem::path& directory, const std::filesystem::path& for_path);

// A fresh temporary name beside `final_path`: "<parent>/.<name>.ckpt-tmp-<16
// random hex digits>". Names nothing yet; the caller creates it exclusively
// (O_EXCL, mkdir) and draws another on EEXIST.
std::filesystem::path temporary_sibling(const std::filesystem::path& final_path);

// A fresh name beside `final_path` for the old directory that a commit moves
// aside where the file system cannot exchange two directories:
// "<parent>/.<name>.ckpt-old-<16 random hex digits>". Unlike a temporary, it
// may hold the only committed copy (a crash between the two renames leaves
// nothing at `final_path`), so remove_abandoned_temporaries() removes it only
// once something is at `final_path` again.
std::filesystem::path aside_sibling(const std::filesystem::path& final_path);

// True if `file_name` (a name, not a path) has the form temporary_sibling()
// or aside_sibling() gives: what an interrupted AtomicFile or
// AtomicDirectory leaves behind.
bool is_temporary_name(std::string_view file_name);

// The target a temporary or aside name stands for: "<dir>/<name>" for
// "<dir>/.<name>.ckpt-tmp-<16 hex>" (or .ckpt-old-); nullopt for a path
// whose name is neither (what an owner of a directory passes to
// remove_abandoned_temporaries() for each of leftover_temporaries()).
std::optional<std::filesystem::path> temporary_target(const std::filesystem::path& temporary);

// Liveness of temporaries. The writer of a temporary holds flock(LOCK_EX) on
// it (the file, or the directory itself) for as long as it may still commit
// it; the kernel drops the lock when the writer closes it or dies (SIGKILL
// included), so a temporary that can be locked belongs to no live writer.
// See docs/design.md, "Temporaries and crashes", for the limits (NFS).

// The outcome of claim_temporary().
enum class Claim {
  kLocked,    // `fd` holds the lock and `path` still names it
  kUnlocked,  // the file system has no such locks (ENOLCK, EOPNOTSUPP, ...): ours, unprotected
  kLost,      // a cleaner took it first (it holds the lock, or removed the name): draw another name
};

// Takes the writer's lock on the temporary that `fd` opened at `path`, just
// after creating it: flock(LOCK_EX | LOCK_NB), then checks that `path` still
// names `fd`'s file (a cleaner may have locked and removed the new name
// between its creation and the lock). Never throws.
Claim claim_temporary(int fd, const std::filesystem::path& path) noexcept;

// Removes the temporaries of `final_path` that belong to no live writer:
// the entries of its directory named ".<name>.ckpt-tmp-<16 hex>" for its
// exact name (files, or directories with their contents) that can be locked
// (flock LOCK_EX | LOCK_NB) and are still the entry that was locked; and
// ".<name>.ckpt-old-<16 hex>" (aside_sibling) likewise, but only while
// something is at `final_path`. Never touches a temporary that is in use, one
// of another target, or one whose liveness cannot be told (a lock refused for
// any reason). Does nothing when `final_path`'s directory is itself a
// temporary: new, and its writer's alone (an AtomicDirectory being filled,
// where listing it once per file of thousands would cost their square).
// Returns how many it removed. Never throws; a missing or unreadable
// directory has none.
size_t remove_abandoned_temporaries(const std::filesystem::path& final_path) noexcept;

}  // namespace ckpt::detail
