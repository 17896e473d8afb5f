#pragma once
// The front door: save, load, open and detect, over every registered format
// (convert.h rewrites one in another format). No history management here
// (see the manager for that).

#include <filesystem>

#include "ckpt/format.h"
#include "ckpt/tree.h"
#include "ckpt/url.h"

namespace ckpt {

// Writes `tree` to `path` atomically: to a temporary name in the same
// directory, synced, renamed into place, the directory synced. On any failure
// an earlier file at `path` is untouched and no temporary is left behind.
// The format is options.format, else the one `path`'s extension names, else
// safetensors.
// Throws Error{kUnsupported} if the format cannot hold the tree (a tensor
// whose dtype is not in Format::dtypes() is refused before anything is
// written, naming the entry; so is options.metadata where the format has no
// place for metadata), {kIo} if the operating system refuses.
void save(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options = {});

// Returns the tree of `path`; tensors map the file lazily and keep the
// mapping alive. `path` may be an http(s) URL (ckpt/url.h): it is fetched
// into the cache first (options.fetch), or with options.remote_lazy opened
// over the network, each tensor fetched when first used. Throws Error{kNotFound} if `path` does not exist,
// {kUnsupported} if no format recognizes it, {kCorrupt} if it fails
// validation (or, with options.verify, a checksum).
Tree load(const std::filesystem::path& path, const LoadOptions& options = {});

// As load(), with everything the file says about itself: format, metadata,
// tensors in file order, checksums.
Contents open(const std::filesystem::path& path, const LoadOptions& options = {});

// Fetches the bytes of every tensor of `tree` that a lazy remote open
// (LoadOptions::remote_lazy) has not fetched yet, in one pass per file with
// neighbouring ranges coalesced; the tensors stay where they are (read on
// first use from the cache's file). Tensors of local files are untouched.
// Throws Error{kRemote} as ckpt::fetch does.
void prefetch(const Tree& tree);

// Replaces every tensor of `tree` that maps a file with one in heap memory.
// Tensors that map one file are read together: the span of the file they
// cover is read into one heap block with parallel positioned reads, and each
// tensor becomes a slice of it, so tensors that shared bytes (tied weights,
// views of one torch storage) still share them. Deferred views are gathered.
// Throws Error{kIo} if a read fails.
void materialize(Tree& tree, unsigned threads = 0);

// The format save() writes `path` in: options.format, else the one `path`'s
// extension names, else safetensors. Throws Error{kUnsupported} for an
// unknown options.format.
const Format& save_format(const std::filesystem::path& path, const SaveOptions& options = {});

// The format of `path` (a URL is fetched first): a format that claims the path itself (a TF bundle
// prefix, a directory; Format::detect_path), else by content (the extension
// only breaks ties).
// Throws Error{kNotFound} / {kUnsupported}.
const Format& detect(const std::filesystem::path& path);

// Full validation of `path`, every stored checksum included. Returns the
// contents on success; throws Error{kCorrupt} naming the first defect.
Contents verify(const std::filesystem::path& path);

}  // namespace ckpt
