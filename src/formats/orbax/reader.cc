#include "formats/orbax/reader.h"

#include <simdjson.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "ckpt/cast.h"
#include "ckpt/error.h"
#include "core/text.h"
#include "core/parallel.h"
#include "formats/orbax/layout.h"
#include "formats/orbax/metadata.h"
#include "formats/orbax/ocdbt_reader.h"
#include "formats/orbax/zarr.h"
#include "formats/tree_json.h"
#include "io/file_system.h"
#include "io/mapped_file.h"
#include "io/stable_directory.h"

namespace ckpt::orbax_detail {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  const auto file = detail::MappedFile::open(path);
  const auto bytes = file->bytes();
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::string_view as_text(const Buffer& buffer) {
  return {reinterpret_cast<const char*>(buffer.data()), buffer.size()};
}

// One item directory: its arrays, in OCDBT or one folder each.
class ItemReader {
 public:
  // `zarr.defer`: arrays that need decoding are decoded when first used (see
  // read_zarr_array); else now, on `threads` threads (as are the checks of
  // `zarr.verify`).
  ItemReader(fs::path dir, unsigned threads, ZarrReadOptions zarr)
      : dir_(std::move(dir)), threads_(threads), zarr_(zarr) {}

  // The item's tree as _METADATA describes it; with `record` (ckpt's record
  // beside it), the tree the record describes, its tensors the item's arrays
  // (scalars and strings come from the record, so are not read).
  Tree read(const Record* record = nullptr, const fs::path& record_file = {}) {
    const fs::path metadata_path = dir_ / kTreeMetadataFile;
    const std::vector<MetadataLeaf> leaves = parse_tree_metadata(read_text(metadata_path), {.path = metadata_path});
    open_store();
    // Arrays first, on several threads (zstd chunks are decoded here unless
    // deferred; then this only looks the chunks up).
    std::vector<const MetadataLeaf*> array_leaves;
    for (const MetadataLeaf& leaf : leaves) {
      if (record ? holds_tensor(leaf) : holds_array(leaf)) array_leaves.push_back(&leaf);
    }
    std::vector<Tensor> tensors(array_leaves.size());
    detail::parallel_for(array_leaves.size(), zarr_.defer && !zarr_.verify ? 1 : threads_,
                         [&](size_t i, unsigned) { tensors[i] = array(*array_leaves[i]); });
    if (record) return tree_of_record(*record, record_file, array_leaves, tensors);
    for (size_t i = 0; i < array_leaves.size(); ++i) arrays_.emplace(array_leaves[i], std::move(tensors[i]));
    return build_tree(leaves, [&](const MetadataLeaf& leaf) { return value(leaf); }, {.path = metadata_path});
  }

 private:
  void open_store() {
    if (detail::regular_file_exists(dir_ / kOcdbtManifestFile)) {
      store_ = OcdbtStore::open(dir_);
      return;
    }
    // Per-process databases that Orbax did not merge.
    std::vector<fs::path> process_dirs;
    std::error_code error;
    for (const auto& child : fs::directory_iterator(dir_, error)) {
      const bool process_database = child.path().filename().string().starts_with(kOcdbtProcessPrefix);
      if (process_database && detail::regular_file_exists(child.path() / kOcdbtManifestFile)) {
        process_dirs.push_back(child.path());
      }
    }
    std::sort(process_dirs.begin(), process_dirs.end());
    for (const fs::path& process_dir : process_dirs) {
      if (!store_) {
        store_ = OcdbtStore::open(process_dir);
      } else {
        try {
          store_->merge(OcdbtStore::open(process_dir));
        } catch (Error& e) {
          throw e.with_path(process_dir);
        }
      }
    }
  }

  static bool holds_tensor(const MetadataLeaf& leaf) {
    return leaf.value_type == "jax.Array" || leaf.value_type == "np.ndarray";
  }
  static bool holds_array(const MetadataLeaf& leaf) { return holds_tensor(leaf) || leaf.value_type == "scalar"; }

  // The record's tree; each {"tensor": NAME} is the array whose parameter
  // name is NAME, and every array must be named exactly once.
  Tree tree_of_record(const Record& record, const fs::path& record_file,
                      const std::vector<const MetadataLeaf*>& array_leaves, std::vector<Tensor>& tensors) {
    const auto bad = [&](const std::string& message, const std::string& entry) {
      throw Error(ErrorCode::kCorrupt, std::string(kRecordEntry) + ": " + message,
                  {.path = record_file, .entry = entry.empty() ? std::string(kRecordEntry) : entry});
    };
    std::map<std::string, size_t, std::less<>> index;
    for (size_t i = 0; i < array_leaves.size(); ++i) {
      if (!index.emplace(array_leaves[i]->param_name(), i).second) {
        bad("two arrays of _METADATA share the parameter name " + detail::quoted(array_leaves[i]->param_name()),
            array_leaves[i]->param_name());
      }
    }
    std::vector<bool> used(tensors.size(), false);
    Tree tree;
    try {
      tree = detail::tree_from_json(record.tree, [&](std::string_view name) -> Tensor {
        const auto found = index.find(name);
        if (found == index.end()) {
          bad("the tree names array " + detail::quoted(std::string(name)) + ", which _METADATA does not list", std::string(name));
        }
        if (used[found->second]) bad("the tree names array " + detail::quoted(std::string(name)) + " twice", std::string(name));
        used[found->second] = true;
        return std::move(tensors[found->second]);
      });
    } catch (Error& error) {
      if (!error.context().path.empty()) throw;
      bad(error.message(), error.context().entry);
    }
    if (!tree.is_container()) bad("the tree is not a map or a list", "");
    for (size_t i = 0; i < used.size(); ++i) {
      if (!used[i]) {
        bad("array " + detail::quoted(array_leaves[i]->param_name()) + " of _METADATA is missing from the tree",
            array_leaves[i]->param_name());
      }
    }
    return tree;
  }

  Tree value(const MetadataLeaf& leaf) {
    const std::string& type = leaf.value_type;
    if (type == "None") return Tree();
    if (type == "Dict") return Tree::map();
    if (type == "List" || type == "Tuple") return Tree::list();
    if (type == "string") return Tree(string_value(leaf));
    if (type == "jax.Array" || type == "np.ndarray") return Tree(arrays_.at(&leaf));
    if (type == "scalar") return scalar(leaf, arrays_.at(&leaf));
    throw Error(ErrorCode::kUnsupported, "value_type " + detail::quoted(type) + " is not read by ckpt",
                {.path = dir_ / kTreeMetadataFile, .entry = leaf.param_name()});
  }

  std::string string_value(const MetadataLeaf& leaf) {
    const fs::path path = dir_ / kStringsFile;
    if (!strings_) {
      strings_.emplace();
      simdjson::dom::parser parser;
      simdjson::dom::object object;
      if (parser.parse(read_text(path)).get_object().get(object)) {
        throw Error(ErrorCode::kCorrupt, "_strings.json is not a JSON object", {.path = path});
      }
      for (const auto field : object) {
        std::string_view text;
        if (!field.value.get_string().get(text)) (*strings_)[std::string(field.key)] = std::string(text);
      }
    }
    const auto found = strings_->find(leaf.param_name());
    if (found == strings_->end()) {
      throw Error(ErrorCode::kCorrupt, "the string is missing from _strings.json",
                  {.path = path, .entry = leaf.param_name()});
    }
    return found->second;
  }

  // A Python scalar: stored as a 0-d array, read back as int, float or bool.
  Tree scalar(const MetadataLeaf& leaf, const Tensor& tensor) {
    if (tensor.numel() != 1 || !tensor.shape().empty()) {
      throw Error(ErrorCode::kCorrupt, "a scalar's array is not 0-d", {.path = dir_, .entry = leaf.param_name()});
    }
    switch (tensor.dtype()) {
      case DType::kBool:
        return Tree(static_cast<bool>(tensor.bytes()[0] != std::byte{0}));
      case DType::kInt8:
      case DType::kInt16:
      case DType::kInt32:
      case DType::kInt64:
      case DType::kUInt8:
      case DType::kUInt16:
      case DType::kUInt32:
        return Tree(cast(tensor, DType::kInt64).values<int64_t>()[0]);
      case DType::kFloat16:
      case DType::kBFloat16:
      case DType::kFloat32:
      case DType::kFloat64:
        return Tree(cast(tensor, DType::kFloat64).values<double>()[0]);
      default:
        return Tree(tensor);  // uint64, complex: kept as a 0-d tensor
    }
  }

  Tensor array(const MetadataLeaf& leaf) {
    const std::string name = leaf.param_name();
    if (store_) {
      const OcdbtValue* zarray = store_->find(name + "/" + std::string(kZarrayFile));
      if (zarray == nullptr) {
        throw Error(ErrorCode::kCorrupt, "the OCDBT database has no key " + detail::quoted(std::string(name) + "/.zarray"),
                    {.path = dir_, .entry = name});
      }
      const ErrorContext context{.path = dir_, .entry = name};
      const ZarrArray parsed = parse_zarray(as_text(store_->read(*zarray)), context);
      return read_zarr_array(parsed, [&](const std::string& key) -> std::optional<Buffer> {
        const OcdbtValue* chunk = store_->find(name + "/" + key);
        if (chunk == nullptr) return std::nullopt;
        return store_->read(*chunk);
      }, context, zarr_);
    }
    const fs::path array_dir = dir_ / name;
    const fs::path zarray = array_dir / kZarrayFile;
    if (!detail::regular_file_exists(zarray)) {
      throw Error(ErrorCode::kCorrupt, "the array has no .zarray file", {.path = zarray, .entry = name});
    }
    const ZarrArray parsed = parse_zarray(read_text(zarray), {.path = zarray, .entry = name});
    return read_zarr_array(parsed, [&](const std::string& key) -> std::optional<Buffer> {
      const fs::path chunk = array_dir / key;
      if (!detail::regular_file_exists(chunk)) return std::nullopt;
      const auto file = detail::MappedFile::open(chunk);
      return file->slice(0, file->size());
    }, {.path = array_dir, .entry = name}, zarr_);
  }

  fs::path dir_;
  unsigned threads_ = 0;
  ZarrReadOptions zarr_;
  std::optional<OcdbtStore> store_;
  std::map<const MetadataLeaf*, Tensor> arrays_;
  std::optional<std::map<std::string, std::string>> strings_;
};

// The items of a step directory: those item_handlers names, else every
// folder holding _METADATA, sorted.
std::vector<std::string> step_items(const fs::path& step) {
  std::vector<std::string> names;
  for (const std::string& name : item_names(read_text(step / kCheckpointMetadataFile))) {
    if (detail::regular_file_exists(step / name / kTreeMetadataFile)) names.push_back(name);
  }
  if (!names.empty()) return names;
  std::error_code error;
  for (const auto& child : fs::directory_iterator(step, error)) {
    if (detail::regular_file_exists(child.path() / kTreeMetadataFile)) names.push_back(child.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

bool detect_checkpoint(const fs::path& path) noexcept {
  try {
    std::error_code error;
    if (!fs::is_directory(path, error)) return false;
    return fs::is_regular_file(path / kTreeMetadataFile, error) ||
           fs::is_regular_file(path / kCheckpointMetadataFile, error);
  } catch (...) {
    return false;
  }
}

namespace {

Contents read_checkpoint_once(const fs::path& path, const LoadOptions& options) {
  // A lazy open decodes nothing; load-into-memory decodes now; verify checks
  // every chunk now, one at a time, and leaves a lazy open's arrays deferred.
  const ZarrReadOptions zarr{.defer = options.lazy, .verify = options.verify};
  Contents contents;
  contents.format = "orbax";
  const fs::path checkpoint_metadata = path / kCheckpointMetadataFile;
  const bool item = detail::regular_file_exists(path / kTreeMetadataFile);
  // ckpt's record: in an item directory that ckpt wrote (both files side by side).
  simdjson::dom::parser parser;
  std::optional<Record> record;
  if (detail::regular_file_exists(checkpoint_metadata)) {
    const std::string text = read_text(checkpoint_metadata);
    simdjson::dom::element root;
    if (item && !parser.parse(text).get(root)) record = find_record(root, {.path = checkpoint_metadata});
    contents.metadata = flatten_checkpoint_metadata(text, {.path = checkpoint_metadata},
                                                    record ? "custom_metadata." + std::string(kRecordKey) : "");
  }
  if (item) {
    contents.tree = ItemReader(path, options.threads, zarr).read(record ? &*record : nullptr, checkpoint_metadata);
    if (record) contents.format_version = static_cast<int>(record->version);
  } else {
    const std::vector<std::string> items = step_items(path);
    if (items.empty()) {
      throw Error(ErrorCode::kCorrupt, "the step directory holds no item (no folder with _METADATA)", {.path = path});
    }
    if (items.size() == 1 && items[0] == kDefaultItem) {
      contents.tree = ItemReader(path / kDefaultItem, options.threads, zarr).read();
    } else {
      contents.tree = Tree::map();
      for (const std::string& item : items) contents.tree.set(item, ItemReader(path / item, options.threads, zarr).read());
    }
  }
  for (const Tree::Leaf& leaf : contents.tree.tensor_leaves()) {
    const Tensor& tensor = leaf.value->tensor();
    contents.entries.push_back({.name = leaf.name, .dtype = tensor.dtype(), .shape = tensor.shape(),
                                .nbytes = tensor.nbytes()});
  }
  return contents;
}

}  // namespace

Contents read_checkpoint(const fs::path& path, const LoadOptions& options) {
  std::error_code error;
  if (!fs::exists(path, error)) throw Error(ErrorCode::kNotFound, "no such file or directory", {.path = path});
  if (!detect_checkpoint(path)) {
    throw Error(ErrorCode::kUnsupported, "not an Orbax checkpoint directory (no _METADATA or _CHECKPOINT_METADATA)",
                {.path = path});
  }
  // A save may replace the directory while its files are opened one by one:
  // the contents are those of one directory, read again if it was replaced.
  // Once read, the tree maps its files and needs the path no more.
  Contents contents;
  detail::read_stable_directory(path, [&] { contents = read_checkpoint_once(path, options); });
  return contents;
}

}  // namespace ckpt::orbax_detail
