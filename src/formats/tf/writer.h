#pragma once
// Writing TensorFlow tensor bundles (V2), one shard, as BundleWriter does.
// Layout: docs/formats/tf.md.

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "formats/tf/index_table.h"

namespace ckpt::tf_detail {

// Writes `tree` as the bundle PREFIX.index + PREFIX.data-00000-of-00001,
// where PREFIX is `path` minus a ".index" suffix. Tensors are laid out in
// tree order, back to back (tied tensors, Tensor::same_memory, once: their
// entries share the bytes); each entry records the bytes' masked CRC-32C.
// Entries: tensors of every ckpt dtype; Bytes and strings as DT_STRING
// scalars; (nested) lists of only Bytes/strings, rectangular, as DT_STRING
// tensors of that shape (an empty list: shape [0]). Keys: names.h key_of
// (object-based when the tree holds "_CHECKPOINTABLE_OBJECT_GRAPH" at the
// top; integer keys and list positions in decimal).
// With options.extras the header also holds the tree's skeleton (a field
// TensorFlow skips), so any tree reads back equal: numbers, none, empty
// containers and other lists live there only. Without extras the .index
// bytes equal TensorFlow's for the same entries.
// The prefix's directory is created if missing (as TensorFlow's
// BundleWriter does). Both files are written in full under temporary names
// (AtomicFile) before either is renamed: the data shard first, the .index
// last. A failed write leaves earlier files untouched and no temporary; a
// new prefix appears (its .index) only when complete. Overwriting an existing
// prefix is atomic per file, not as a pair: a crash between the two renames
// leaves the old .index beside the new data, which its CRCs then reject.
// Afterwards, if the prefix's directory holds a `checkpoint` state file, it
// is updated to name this prefix as the latest (paths.h update_state_file).
// Throws Error{kUnsupported} naming the leaf for what a bundle cannot hold:
// without extras, none, bool, int and float leaves, integer keys, empty maps,
// lists of anything but bytes/strings, ragged string lists; always, a root
// that is not a map, two leaves with one key, the empty key. {kIo} from the
// file system.
void write_bundle(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

// The header record (key "") as BundleWriter writes it, plus ckpt's
// skeleton when not empty.
IndexRecord header_record(int num_shards, const std::string& skeleton);

}  // namespace ckpt::tf_detail
