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

// True if `file_name` (a name, not a path) has the form temporary_sibling()
// gives: what an interrupted AtomicFile or AtomicDirectory leaves behind.
bool is_temporary_name(std::string_view file_name);

}  // namespace ckpt::detail
