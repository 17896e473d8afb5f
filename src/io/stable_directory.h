#pragma once
// Reading a directory that a save may replace meanwhile. AtomicDirectory
// commits with one atomic exchange, so the directory at a path is always
// whole; but a reader opens its files one by one, and a save committed
// between two of those opens would give it files of two checkpoints. A
// reader that pins the directory it started with (an open descriptor, so
// that its inode cannot be freed and its number reused) and finds the same
// directory at the path when it is done read that one directory throughout:
// a replaced directory never comes back to its path (AtomicDirectory removes
// the old one; Orbax's own saves rename fresh ones). Knows no format.

#include <filesystem>
#include <functional>

namespace ckpt::detail {

// Runs `read`, which reads the directory at `path`; returns once a run saw
// the same directory at `path` before and after it. A run that threw is
// retried when the directory was replaced meanwhile (its error came from the
// swap: a file removed with the old directory, say), rethrown otherwise.
// Retries back off (1 ms, doubling, at most 100 ms apart: about 6 s over the
// default 64 runs), so that a reader slower than a run of quick saves (a
// sanitized build on a busy machine) waits for a gap between them instead of
// giving up. Throws Error{kIo} naming `path` when the directory was replaced
// during each of `attempts` runs; Error{kNotFound} / {kIo} if `path` cannot
// be opened as a directory.
void read_stable_directory(const std::filesystem::path& path, const std::function<void()>& read, int attempts = 64);

}  // namespace ckpt::detail
