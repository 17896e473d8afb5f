#include "formats/orbax/writer.h"

#include <sys/stat.h>

#include <cerrno>
#include <set>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "core/parallel.h"
#include "formats/orbax/layout.h"
#include "formats/orbax/metadata.h"
#include "formats/orbax/reader.h"
#include "formats/orbax/zarr.h"
#include "formats/tree_json.h"
#include "io/atomic_directory.h"
#include "io/atomic_file.h"
#include "io/file_system.h"

namespace ckpt::orbax_detail {
namespace {

namespace fs = std::filesystem;

// Names Orbax and OCDBT use inside an item directory.
bool reserved(std::string_view name) {
  static const std::set<std::string_view> kNames = {
      kTreeMetadataFile, kCheckpointMetadataFile, kStringsFile,       kShardingFile, kArrayMetadataFolder,
      kOcdbtDataFolder,  kOcdbtManifestFile,      kCommitSuccessFile, ".",           ".."};
  return kNames.contains(name) || name.starts_with(kOcdbtProcessPrefix);
}

// One leaf as Orbax stores it.
struct PlannedLeaf {
  std::vector<MetadataKey> keys;
  std::string name;        // Orbax's parameter name
  std::string value_type;  // "np.ndarray", "scalar", "string", "None", "Dict", "List"
  Tensor array;            // arrays and scalars
  std::string text;        // strings
};

[[noreturn]] void unsupported(const std::string& message, const std::string& entry) {
  throw Error(ErrorCode::kUnsupported, message, {.entry = entry});
}

// Walks the tree in order, one PlannedLeaf per Orbax leaf. With `extras`,
// what Orbax cannot hold is approximated (integer map keys as their decimal
// text, bytes as None) and ckpt's record keeps the truth; `tensors` gets
// every tensor leaf with its parameter name, for the record.
class Planner {
 public:
  explicit Planner(bool extras) : extras_(extras) {}

  void plan(const Tree& node) {
    PlannedLeaf leaf;
    leaf.keys = keys_;
    leaf.name = MetadataLeaf{.keys = keys_}.param_name();
    const auto scalar = [&](DType dtype, const void* value) {
      leaf.value_type = "scalar";
      leaf.array = Tensor::from_bytes(dtype, {}, {static_cast<const std::byte*>(value), dtype_size(dtype)});
    };
    switch (node.kind()) {
      case Tree::Kind::kMap:
      case Tree::Kind::kList:
        if (node.size() == 0 && !keys_.empty()) {
          leaf.value_type = node.is_map() ? "Dict" : "List";
          break;
        }
        plan_children(node, leaf.name);
        return;
      case Tree::Kind::kTensor:
        leaf.value_type = "np.ndarray";
        leaf.array = node.tensor();
        tensors.push_back({leaf.name, &node});
        break;
      case Tree::Kind::kNone:
        leaf.value_type = "None";
        break;
      case Tree::Kind::kBool: {
        const bool value = node.boolean();
        scalar(DType::kBool, &value);
        break;
      }
      case Tree::Kind::kInt: {
        const int64_t value = node.integer();
        scalar(DType::kInt64, &value);
        break;
      }
      case Tree::Kind::kFloat: {
        const double value = node.real();
        scalar(DType::kFloat64, &value);
        break;
      }
      case Tree::Kind::kString:
        leaf.value_type = "string";
        leaf.text = node.string();
        break;
      case Tree::Kind::kBytes:
        if (!extras_) unsupported("Orbax has no place for raw bytes (ckpt's record keeps them with extras)", leaf.name);
        leaf.value_type = "None";
        break;
    }
    if (keys_.empty()) unsupported("an Orbax checkpoint's root must be a map or a list, not a single leaf", "");
    leaves.push_back(std::move(leaf));
  }

  std::vector<PlannedLeaf> leaves;
  std::vector<Tree::Leaf> tensors;

 private:
  void plan_children(const Tree& node, const std::string& name) {
    std::set<std::string> seen;  // Orbax's keys of this map
    for (const TreeEntry& entry : node.entries()) {
      if (node.is_map() && !std::holds_alternative<std::string>(entry.key) && !extras_) {
        unsupported("Orbax holds string dict keys only, not the integer key " + key_to_string(entry.key) +
                        " (ckpt's record keeps them with extras)",
                    name);
      }
      const std::string key = key_to_string(entry.key);
      if (key.empty() || key.find('/') != std::string::npos) {
        unsupported("an Orbax key must be non-empty and free of \"/\": '" + key + "'", name);
      }
      if (node.is_map() && !seen.insert(key).second) {
        unsupported("the map holds the integer key " + key + " and the string key '" + key +
                        "', one key to Orbax",
                    name);
      }
      keys_.push_back({key, node.is_list()});
      plan(entry.value);
      keys_.pop_back();
    }
  }

  bool extras_;
  std::vector<MetadataKey> keys_;
};

std::string tree_metadata_json(const std::vector<PlannedLeaf>& leaves) {
  detail::JsonWriter out;
  out.begin_object();
  out.key("tree_metadata");
  out.begin_object();
  for (const PlannedLeaf& leaf : leaves) {
    std::vector<std::string> names;
    for (const MetadataKey& key : leaf.keys) names.push_back(key.name);
    out.key(python_tuple_repr(names));
    out.begin_object();
    out.key("key_metadata");
    out.begin_array();
    for (const MetadataKey& key : leaf.keys) {
      out.begin_object();
      out.key("key");
      out.string(key.name);
      out.key("key_type");
      out.integer(key.sequence ? kKeyTypeSequence : kKeyTypeDict);
      out.end_object();
    }
    out.end_array();
    out.key("value_metadata");
    out.begin_object();
    out.key("value_type");
    out.string(leaf.value_type);
    out.key("skip_deserialize");
    out.boolean(leaf.value_type == "None" || leaf.value_type == "Dict" || leaf.value_type == "List");
    out.end_object();
    out.end_object();
  }
  out.end_object();
  out.key("use_ocdbt");
  out.boolean(false);
  out.key("use_zarr3");
  out.boolean(false);
  out.key("store_array_data_equal_to_fill_value");
  out.boolean(true);
  out.key("custom_metadata");
  out.null();
  out.end_object();
  return out.take();
}

// `record`: ckpt's record to put in custom_metadata (see metadata.h), or
// empty for none.
std::string checkpoint_metadata_json(const Tree* record_tree, std::span<const Tree::Leaf> tensors) {
  detail::JsonWriter out;
  out.begin_object();
  out.key("item_handlers");
  out.string(kPyTreeHandler);
  out.key("metrics");
  out.begin_object();
  out.end_object();
  out.key("performance_metrics");
  out.begin_object();
  out.end_object();
  out.key("custom_metadata");
  out.begin_object();
  if (record_tree != nullptr) {
    out.key(kRecordKey);
    out.begin_object();
    out.key("version");
    out.integer(kRecordVersion);
    out.key("tree");
    detail::write_tree_json(out, *record_tree, tensors);
    out.end_object();
  }
  out.end_object();
  out.end_object();
  return out.take();
}

// Files inside the temporary directory are not synced one by one (10,000
// arrays would cost 20,000 fsyncs): the AtomicDirectory's commit syncs the
// file system once before the rename.
void write_whole_file(const fs::path& path, std::span<const std::byte> bytes, const SaveOptions& options) {
  detail::AtomicFile file(path, {.fsync = false});
  if (!bytes.empty()) file.write_parallel({{.bytes = bytes, .offset = 0}}, 1);
  file.commit();
}

void write_text(const fs::path& path, std::string_view text, const SaveOptions& options) {
  write_whole_file(path, std::as_bytes(std::span(text)), options);
}

void check_target(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(path, error)) return;
  if (!fs::is_directory(path, error)) {
    throw Error(ErrorCode::kInvalidArgument, "an Orbax checkpoint is a directory; refusing to replace this file",
                {.path = path});
  }
  if (!detect_checkpoint(path) && !fs::is_empty(path, error)) {
    throw Error(ErrorCode::kInvalidArgument,
                "refusing to replace a non-empty directory that is not an Orbax checkpoint", {.path = path});
  }
}

}  // namespace

void write_checkpoint(const fs::path& path, const Tree& tree, const SaveOptions& options) {
  if (!tree.is_container()) unsupported("an Orbax checkpoint's root must be a map or a list, not a single leaf", "");
  Planner planner(options.extras);
  planner.plan(tree);
  const std::vector<PlannedLeaf>& leaves = planner.leaves;
  // Built before anything is written: a string that is not UTF-8 is refused here.
  const std::string checkpoint_metadata =
      checkpoint_metadata_json(options.extras ? &tree : nullptr, planner.tensors);
  std::set<std::string> names;
  bool has_strings = false;
  for (const PlannedLeaf& leaf : leaves) {
    if (!names.insert(leaf.name).second) {
      unsupported("two leaves share the Orbax parameter name '" + leaf.name + "' (keys joined with \".\")", leaf.name);
    }
    if (reserved(leaf.name)) unsupported("'" + leaf.name + "' is a name Orbax reserves for its own files", leaf.name);
    has_strings = has_strings || leaf.value_type == "string";
  }
  check_target(path);

  detail::AtomicDirectory directory(path, {.fsync = options.fsync, .files_synced = false});
  const fs::path& root = directory.path();
  write_text(root / kTreeMetadataFile, tree_metadata_json(leaves), options);
  write_text(root / kCheckpointMetadataFile, checkpoint_metadata, options);
  if (has_strings) {
    detail::JsonWriter strings;
    strings.begin_object();
    for (const PlannedLeaf& leaf : leaves) {
      if (leaf.value_type != "string") continue;
      strings.key(leaf.name);
      strings.string(leaf.text);
    }
    strings.end_object();
    write_text(root / kStringsFile, strings.text(), options);
  }
  std::vector<const PlannedLeaf*> arrays;
  for (const PlannedLeaf& leaf : leaves) {
    if (leaf.value_type == "np.ndarray" || leaf.value_type == "scalar") arrays.push_back(&leaf);
  }
  detail::parallel_for(arrays.size(), options.threads, [&](size_t i, unsigned) {
    const PlannedLeaf& leaf = *arrays[i];
    const Tensor& tensor = leaf.array;
    if (tensor.nbytes() != tensor.numel() * dtype_size(tensor.dtype())) {
      throw Error(ErrorCode::kInvalidArgument, "tensor's buffer does not match its dtype and shape", {.entry = leaf.name});
    }
    const fs::path array_dir = root / leaf.name;
    if (::mkdir(array_dir.c_str(), 0755) != 0) {
      detail::throw_io(array_dir, "cannot create the array's directory", errno);
    }
    // zarr chunks are positive: an empty array states chunks of 1 and stores none.
    Shape chunks = tensor.shape();
    for (int64_t& dimension : chunks) dimension = std::max<int64_t>(dimension, 1);
    const std::string zarray = zarray_json(tensor.dtype(), tensor.shape(), chunks, {.zstd_level = std::nullopt});
    write_text(array_dir / kZarrayFile, zarray, options);
    if (tensor.numel() > 0) {
      ZarrArray layout;
      layout.shape = tensor.shape();
      write_whole_file(array_dir / chunk_key(layout, std::vector<int64_t>(tensor.ndim(), 0)), tensor.bytes(), options);
    }
  });
  directory.commit();
}

}  // namespace ckpt::orbax_detail
