#pragma once
// Documents: what ckpt reports about checkpoints (inspect, verify, diff, the
// format list), each built once as a Tree of maps, lists and leaves, so that
// the CLI prints it as JSON (to_json) and the Python package hands it over as
// dicts and lists, with the same keys in the same order. A document is data,
// not a checkpoint: it is never saved.

#include <filesystem>
#include <ostream>
#include <string>

#include "ckpt/diff.h"
#include "ckpt/format.h"
#include "ckpt/tree.h"
#include "ckpt/url.h"

namespace ckpt {

// What `contents` (as open() or verify() returned it for `path`) holds:
//   {"path": str, "format": str, "format_version": int,
//    "checksum": "xxh3" | "crc32c" | "crc32" | none,
//    "tensors": [{"name", "dtype", "shape": [int...], "nbytes", "offset",
//                 "checksum": hex str | none}...],   // stored entries, file order
//    "values": {name: leaf...},                        // the non-tensor leaves
//    "metadata": {key: str...},
//    "total_nbytes": int}                              // sum over "tensors"
// Tied tensors stored once are listed (and counted) once, under the stored
// name; the names that share them are in the tree, not in "tensors".
Tree contents_document(const std::filesystem::path& path, const Contents& contents);

// What diff() found between the checkpoints `a` and `b`, compared with `atol`:
//   {"identical": bool, "a": str, "b": str, "atol": float, "compared": int,
//    "only_in_a": [name...], "only_in_b": [name...],
//    "kind_mismatched": [{"name", "a": kind, "b": kind}...],
//    "dtype_mismatched": [{"name", "a": dtype, "b": dtype}...],
//    "shape_mismatched": [{"name", "a": [int...], "b": [int...]}...],
//    "value_differences": [{"name", "dtype", "max_abs_diff", "differing_elements", "numel"}...],
//    "leaf_differences": [{"name", "a": leaf, "b": leaf}...],
//    "within_tolerance": [name...]}
Tree diff_document(const DiffReport& report, const std::filesystem::path& a, const std::filesystem::path& b,
                   double atol);

// The registered formats, in detection order:
//   {"formats": [{"id", "description", "extensions": [str...], "read", "write",
//                 "nested_tree", "lists_and_int_keys", "checksums", "single_tensor",
//                 "metadata", "shards", "colliding_names", "ties", "file_per_tensor",
//                 "state_file",
//                 "dtypes": [str...]}...]}
// (the booleans are FormatCapabilities' fields).
Tree formats_document();

// The URL cache (ckpt/url.h), as `ckpt cache ls --json` prints it:
//   {"cache_dir": str, "entries": [{"url", "path", "size", "sha256" (null
//    while incomplete), "etag", "last_modified" (null when the server sent
//    none), "time", "complete", "present" (bytes held)}...]}
Tree cache_document(const std::filesystem::path& cache_dir, const std::vector<CacheEntry>& entries);

// `document` as compact JSON text (core/json_writer.h's style): maps as
// objects (integer keys in decimal), lists as arrays, and leaves as JSON
// values: none as null, floats as numbers except NaN and the infinities as
// the strings "nan", "inf", "-inf", bytes as {"bytes_base64": "<base64>"},
// a tensor as {"tensor": {"dtype": str, "shape": [int...]}} (never its bytes).
std::string to_json(const Tree& document);

// Writes to_json(contents_document(path, contents)) to `out` (the same text),
// without building the document's "values": the leaves are written as the
// tree is walked and the text goes out in pieces, so that memory does not
// grow with the number of leaves (a file of 4M Nones).
void write_contents_json(std::ostream& out, const std::filesystem::path& path, const Contents& contents);

// A leaf for people (the CLI's tables): as to_json() writes it, except bytes
// as "bytes[N] 0a1b2c…" (the first 16 in hex) and a tensor as its dtype and
// shape, "float32 [2, 3]".
std::string leaf_text(const Tree& leaf);

}  // namespace ckpt
