#pragma once
// Format: the interface every checkpoint format implements (safetensors, npz,
// npy, and later torch, tf, flax, orbax). Formats are registered explicitly in
// one place, src/formats/registry.cc; see registry.h.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/box.h"
#include "ckpt/checksum.h"
#include "ckpt/dtype.h"
#include "ckpt/tree.h"
#include "ckpt/url.h"

namespace ckpt {

// String key/value pairs stored beside the tensors (safetensors' __metadata__
// minus ckpt's own key).
using Metadata = std::map<std::string, std::string>;

// One stored tensor, in file order.
struct EntryInfo {
  std::string name;     // the leaf's dotted name in the tree
  DType dtype;
  Shape shape;
  uint64_t offset = 0;  // byte offset of the data in the file (0 if not applicable)
  uint64_t nbytes = 0;
  std::string checksum;  // stored digest as lower-case hex; empty if none
};

// What reading a checkpoint gives: the tree (tensors viewing the mapped file),
// and what the file says about itself.
struct Contents {
  std::string format;               // the id of the format that read it
  Tree tree;
  Metadata metadata;                // user metadata
  std::vector<EntryInfo> entries;   // tensors in file order
  ChecksumKind checksum = ChecksumKind::kNone;  // kind of EntryInfo::checksum
  int format_version = 0;           // ckpt's own extras version; 0 for plain files
};

struct LoadOptions {
  // Read as this format id instead of detecting it; empty: detect.
  std::string format;
  // Check every stored checksum (reads every byte). Throws Error{kCorrupt}
  // naming the first tensor whose bytes disagree.
  bool verify = false;
  // False: read every tensor into heap memory before returning (one parallel
  // read per file region, see materialize()), so that nothing refers to the
  // file afterwards. True: tensors map the file and are read when touched.
  bool lazy = true;
  // Threads for a non-lazy load; 0 picks min(hardware threads, 4).
  unsigned threads = 0;
  // A path that is an http(s) URL (ckpt/url.h): how it is fetched.
  FetchOptions fetch;
  // For a URL (with lazy): open it without downloading it first. A
  // safetensors file's header is read with one range request; each tensor's
  // bytes are fetched when first used (materialize() and prefetch() fetch
  // many at once, neighbours coalesced) into the cache's sparse file and
  // checked against the tensor's stored checksum where the file has one
  // (ckpt's extras). Other formats are downloaded whole, as without it.
  bool remote_lazy = false;
  // Boxes to load instead of whole tensors (ckpt/box.h): each leaf named
  // here (a dotted name, as Tree::find_path finds it) comes back as a heap
  // tensor holding only that box of it, of shape box.sizes, read as
  // read_box() reads (only the pieces and pages the box needs); the other
  // leaves come as without it. Contents::entries still describe the file.
  // Throws Error{kNotFound} naming an entry that is absent or not a tensor,
  // Error{kInvalidArgument} for a box outside its tensor.
  std::map<std::string, Box> boxes;
};

// What a save does to the file beside a checkpoint that names the latest
// checkpoint of its directory and the ones before it (a TF bundle's
// `checkpoint` state file, as tf.train.latest_checkpoint reads it).
enum class StateFilePolicy {
  // Update a state file the directory already has (this checkpoint becomes
  // the latest and the last of the history); create none. A save into a
  // directory that TensorFlow's saves keep a state file in becomes the one
  // tf.train.latest_checkpoint names; a save into a fresh directory writes
  // only the checkpoint, as tf.train.Checkpoint.write does.
  kIfPresent,
  // Create the state file, or update it: what tf.train.Checkpoint.save
  // does, and what a checkpoint manager drives.
  kUpdate,
  // Never read or write it (a copy that must not become the latest).
  kLeave,
};

struct SaveOptions {
  // Format id ("safetensors", "npz", ...); empty: from the path's extension,
  // safetensors when the extension names no format.
  std::string format;
  // Store ckpt's extras (the full tree, format version, checksums) where the
  // format has room for them. Off: plain files, byte-identical to the
  // reference writers' (for safetensors: huggingface's `safetensors`).
  bool extras = true;
  ChecksumKind checksum = ChecksumKind::kXxh3;
  // Per-tensor checksums the caller has computed already, of kind
  // `checksum` as checksum_hex() gives them, by leaf name (as
  // Tree::tensor_leaves() names the leaves): a writer that stores
  // per-tensor checksums (ckpt's safetensors) takes a tensor's from here
  // instead of reading its bytes for it. The caller vouches for them (the
  // manager passes those of the digest it has just computed over a snapshot
  // nothing else can change); a wrong one is stored as given and fails the
  // tensor's verification later. Null: none.
  std::shared_ptr<const std::map<std::string, std::string>> known_checksums;
  Metadata metadata;
  // fsync the file and its directory before the rename / after it.
  bool fsync = true;
  // Threads for the positioned writes; 0 picks min(hardware threads, 4).
  unsigned threads = 0;
  // 0: one shard. Formats that split a checkpoint into data shards
  // (FormatCapabilities::shards; TF bundles: PREFIX.data-0000K-of-0000N;
  // safetensors and hf_sharded: the directory PATH of Hugging Face's
  // model-0000K-of-0000N.safetensors + model.safetensors.index.json)
  // start a new shard before a tensor would take the current one past this
  // many bytes; a tensor of more bytes gets a shard of its own. Shards hold
  // whole tensors, in the writer's order. Formats without the capability
  // ignore it.
  uint64_t max_shard_bytes = 0;
  // The state file naming the directory's latest checkpoint (see
  // StateFilePolicy). Formats that keep no such file (all but TF bundles)
  // ignore it.
  StateFilePolicy state_file = StateFilePolicy::kIfPresent;
};

struct FormatCapabilities {
  bool read = false;
  bool write = false;
  bool nested_tree = false;     // keeps non-tensor leaves and nested containers
  // Keeps lists apart from maps and integer map keys apart from string keys,
  // so that a tree comes back with the very containers and keys it was saved
  // with. Without it (Flax, whose to_state_dict makes every list and tuple a
  // map keyed "0", "1", ... and every key its str()), a list is written as a
  // map keyed by its positions in decimal and an integer key as its decimal
  // string: leaf names stay the same, restore() matches a target's list with
  // such a map, and a map whose integer and string keys would meet as
  // strings ({1: a, "1": b}) is Error{kUnsupported}.
  bool lists_and_int_keys = false;
  bool checksums = false;
  bool single_tensor = false;   // holds exactly one tensor (npy)
  bool metadata = false;        // keeps SaveOptions::metadata
  // The writer splits a checkpoint into data shards by
  // SaveOptions::max_shard_bytes (TF bundles; safetensors, hf_sharded).
  bool shards = false;
  // Keeps two leaves whose dotted names are one ({"a.b": x, "a": {"b": y}})
  // apart, so that both read back; without it, saving such a tree throws
  // Error{kUnsupported} (Orbax names each array by its keys joined with ".").
  bool colliding_names = false;
  // Stores tensors that share memory (Tensor::same_memory: tied weights)
  // once, with SaveOptions::extras where the format needs ckpt's record for
  // it, and reads them back sharing it again.
  bool ties = false;
  // Writes a file (and a folder) of its own for every tensor (Orbax's zarr
  // arrays): a save costs file-system operations per tensor, and no two
  // tensors can share bytes.
  bool file_per_tensor = false;
  // Keeps a file beside its checkpoints that names the directory's latest
  // one, written as SaveOptions::state_file says (TF's `checkpoint` file).
  bool state_file = false;
};

class Format {
 public:
  virtual ~Format() = default;

  // Short id used by --to and in inspect --json: "safetensors", "npz", "npy".
  virtual std::string_view id() const = 0;
  virtual std::string_view description() const = 0;
  // File name extensions with the dot, used as a hint only: {".safetensors"}.
  virtual std::vector<std::string_view> extensions() const = 0;
  virtual FormatCapabilities capabilities() const = 0;
  // The dtypes the format can store.
  virtual std::vector<DType> dtypes() const = 0;

  // True if the file starting with `head` (its first bytes, up to 4096; the
  // whole file if shorter) is in this format. `file_size` is the full size.
  virtual bool detect(std::span<const std::byte> head, uint64_t file_size) const = 0;

  // Formats whose checkpoint is not one file (a TF bundle's prefix, an Orbax
  // step directory): true if `path`, which need not exist as a file (a
  // prefix), names one of theirs. Tried before detect(); the default says no.
  // Must not throw for paths that are not theirs.
  virtual bool detect_path(const std::filesystem::path& path) const { return false; }

  // Reads `path` lazily: tensors view a mapping of the file.
  // Throws Error{kCorrupt} (naming the file, entry and offset) if validation fails.
  virtual Contents read(const std::filesystem::path& path, const LoadOptions& options) const = 0;

  // Writes `tree` to `path` atomically (temporary name, sync, rename).
  // Throws Error{kUnsupported} if the tree holds what the format cannot.
  virtual void write(const std::filesystem::path& path, const Tree& tree,
                     const SaveOptions& options) const = 0;
};

}  // namespace ckpt
