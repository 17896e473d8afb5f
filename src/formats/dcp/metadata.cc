// Parsing `.metadata`: the restricted unpickler (formats/torch) runs the
// pickle with DCP's classes allowed as plain records; this file reads those
// records into DcpMetadata and validates them.

#include "formats/dcp/metadata.h"

#include <map>
#include <set>
#include <utility>

#include "ckpt/error.h"
#include "core/text.h"
#include "formats/dcp/layout.h"
#include "formats/torch/pickle_reader.h"

namespace ckpt::dcp_detail {
namespace {

using torch_detail::Global;
using torch_detail::PickleValue;
using Kind = PickleValue::Kind;

[[noreturn]] void corrupt_metadata(const std::string& message, const std::string& fqn = {}) {
  throw Error(ErrorCode::kCorrupt, message, {.entry = fqn});
}

std::string qualified(std::string_view name) {
  std::string full(kMetadataModule);
  return full + "." + std::string(name);
}

// The BUILD state of an object of class `cls`, or nullptr if it had none.
const PickleValue* state_of(const PickleValue* object, const std::string& cls, const std::string& what,
                            const std::string& fqn = {}) {
  if (object->kind != Kind::kObject || object->text != cls) {
    corrupt_metadata(what + " is not a " + detail::quoted(cls) +
                (object->kind == Kind::kObject ? " but a " + detail::quoted(object->text) : std::string()),
            fqn);
  }
  return object->items.size() > 1 ? object->items[1] : nullptr;
}

// The value of attribute `name` in a dataclass's state dict, or nullptr.
const PickleValue* attribute(const PickleValue* state, std::string_view name) {
  if (state == nullptr || state->kind != Kind::kDict) return nullptr;
  for (size_t i = 0; i + 1 < state->items.size(); i += 2) {
    const PickleValue* key = state->items[i];
    if (key->kind == Kind::kStr && key->text == name) return state->items[i + 1];
  }
  return nullptr;
}

const PickleValue* required(const PickleValue* state, std::string_view name, const std::string& what,
                            const std::string& fqn = {}) {
  if (state == nullptr || state->kind != Kind::kDict) corrupt_metadata(what + " has no attributes", fqn);
  const PickleValue* value = attribute(state, name);
  if (value == nullptr) corrupt_metadata(what + " has no " + std::string(name), fqn);
  return value;
}

int64_t integer(const PickleValue* value, const std::string& what, const std::string& fqn) {
  if (value->kind != Kind::kInt) corrupt_metadata(what + " is not an integer", fqn);
  return value->integer;
}

uint64_t non_negative(const PickleValue* value, const std::string& what, const std::string& fqn) {
  const int64_t v = integer(value, what, fqn);
  if (v < 0) corrupt_metadata(what + " is negative (" + std::to_string(v) + ")", fqn);
  return static_cast<uint64_t>(v);
}

std::string text(const PickleValue* value, const std::string& what, const std::string& fqn) {
  if (value->kind != Kind::kStr) corrupt_metadata(what + " is not a string", fqn);
  return value->text;
}

// A torch.Size or tuple of non-negative integers.
std::vector<int64_t> sizes(const PickleValue* value, const std::string& what, const std::string& fqn) {
  if (value->kind != Kind::kTuple && value->kind != Kind::kList) corrupt_metadata(what + " is not a tuple", fqn);
  std::vector<int64_t> out;
  out.reserve(value->items.size());
  for (const PickleValue* item : value->items) out.push_back(static_cast<int64_t>(non_negative(item, what, fqn)));
  return out;
}

StorageLocation location_of(const PickleValue* info, const std::string& fqn) {
  const std::string cls = std::string(kFilesystemModule) + "._StorageInfo";
  const PickleValue* state = state_of(info, cls, "storage of an item", fqn);
  StorageLocation location;
  location.relative_path = text(required(state, "relative_path", "_StorageInfo", fqn), "relative_path", fqn);
  location.offset = non_negative(required(state, "offset", "_StorageInfo", fqn), "storage offset", fqn);
  location.length = non_negative(required(state, "length", "_StorageInfo", fqn), "storage length", fqn);
  const std::string& name = location.relative_path;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos) {
    corrupt_metadata("relative_path " + detail::quoted(name) + " is not a file name inside the checkpoint directory", fqn);
  }
  if (const PickleValue* transforms = attribute(state, "transform_descriptors");
      transforms != nullptr && transforms->kind != Kind::kNone) {
    if ((transforms->kind == Kind::kList || transforms->kind == Kind::kTuple) && !transforms->items.empty()) {
      std::string names;
      for (const PickleValue* item : transforms->items) {
        names += names.empty() ? "" : ", ";
        names += item->kind == Kind::kStr ? detail::quoted(item->text) : std::string("?");
      }
      throw Error(ErrorCode::kUnsupported,
                  "item is stored through transforms (" + names + "; DCP extensions such as compression), "
                  "which ckpt does not read",
                  {.entry = fqn});
    }
    if (transforms->kind != Kind::kList && transforms->kind != Kind::kTuple) {
      corrupt_metadata("transform_descriptors is not a list", fqn);
    }
  }
  return location;
}

DType dtype_of(const PickleValue* properties, const std::string& fqn) {
  const PickleValue* state = state_of(properties, qualified("TensorProperties"), "properties", fqn);
  // TensorProperties.__getstate__: (dtype, layout, requires_grad,
  // memory_format, pin_memory); a dataclass's dict in older versions.
  const PickleValue* dtype = nullptr;
  const PickleValue* layout = nullptr;
  if (state != nullptr && state->kind == Kind::kTuple && state->items.size() >= 2) {
    dtype = state->items[0];
    layout = state->items[1];
  } else {
    dtype = required(state, "dtype", "TensorProperties", fqn);
    layout = attribute(state, "layout");
  }
  if (dtype->kind != Kind::kGlobal || dtype->global != Global::kDType || !dtype->dtype) {
    corrupt_metadata("properties' dtype is not a torch dtype", fqn);
  }
  if (layout != nullptr && layout->kind != Kind::kNone &&
      !(layout->kind == Kind::kStr && layout->text == "torch.strided")) {
    throw Error(ErrorCode::kUnsupported, "tensor layout is not torch.strided", {.entry = fqn});
  }
  return *dtype->dtype;
}

// storage_data: MetadataIndex(fqn, offset, index) → _StorageInfo.
struct StorageKey {
  std::string fqn;
  std::optional<std::vector<int64_t>> offsets;  // chunk offsets; nullopt for bytes items
  bool operator<(const StorageKey& other) const {
    return std::tie(fqn, offsets) < std::tie(other.fqn, other.offsets);
  }
};

std::map<StorageKey, StorageLocation> storage_data(const PickleValue* dict) {
  if (dict->kind != Kind::kDict) corrupt_metadata("storage_data is not a dict");
  std::map<StorageKey, StorageLocation> out;
  for (size_t i = 0; i + 1 < dict->items.size(); i += 2) {
    const PickleValue* state = state_of(dict->items[i], qualified("MetadataIndex"), "key of storage_data");
    StorageKey key;
    key.fqn = text(required(state, "fqn", "MetadataIndex"), "MetadataIndex fqn", {});
    const PickleValue* offset = attribute(state, "offset");
    if (offset != nullptr && offset->kind != Kind::kNone) key.offsets = sizes(offset, "MetadataIndex offset", key.fqn);
    StorageLocation location = location_of(dict->items[i + 1], key.fqn);
    const std::string fqn = key.fqn;
    if (!out.emplace(std::move(key), std::move(location)).second) corrupt_metadata("storage_data names a chunk twice", fqn);
  }
  return out;
}

KeyPath path_of(const PickleValue* value, const std::string& fqn) {
  if (value->kind != Kind::kTuple && value->kind != Kind::kList) corrupt_metadata("planner_data path is not a tuple", fqn);
  if (value->items.empty()) corrupt_metadata("planner_data path is empty", fqn);
  KeyPath path;
  for (const PickleValue* key : value->items) {
    if (key->kind == Kind::kStr) {
      detail::require_utf8_name(key->text);
      path.emplace_back(key->text);
    } else if (key->kind == Kind::kInt && key->integer >= 0) {
      path.emplace_back(key->integer);
    } else {
      corrupt_metadata("planner_data path holds a key that is not a string or a list position", fqn);
    }
  }
  return path;
}

Item tensor_item(std::string fqn, const PickleValue* state, const std::map<StorageKey, StorageLocation>& storage) {
  Item item;
  item.fqn = std::move(fqn);
  item.tensor = true;
  const std::string& name = item.fqn;
  item.dtype = dtype_of(required(state, "properties", "TensorStorageMetadata", name), name);
  item.size = sizes(required(state, "size", "TensorStorageMetadata", name), "tensor size", name);
  const PickleValue* chunks = required(state, "chunks", "TensorStorageMetadata", name);
  if (chunks->kind != Kind::kList && chunks->kind != Kind::kTuple) corrupt_metadata("chunks is not a list", name);
  for (const PickleValue* chunk_value : chunks->items) {
    const PickleValue* chunk_state = state_of(chunk_value, qualified("ChunkStorageMetadata"), "chunk", name);
    Chunk chunk;
    chunk.offsets = sizes(required(chunk_state, "offsets", "ChunkStorageMetadata", name), "chunk offsets", name);
    chunk.sizes = sizes(required(chunk_state, "sizes", "ChunkStorageMetadata", name), "chunk sizes", name);
    if (chunk.offsets.size() != item.size.size() || chunk.sizes.size() != item.size.size()) {
      corrupt_metadata("chunk has " + std::to_string(chunk.offsets.size()) + " offsets and " +
                  std::to_string(chunk.sizes.size()) + " sizes for a tensor of " + std::to_string(item.size.size()) +
                  " dimensions",
              name);
    }
    for (size_t d = 0; d < item.size.size(); ++d) {
      if (chunk.offsets[d] > item.size[d] || chunk.sizes[d] > item.size[d] - chunk.offsets[d]) {
        corrupt_metadata("chunk at offset " + std::to_string(chunk.offsets[d]) + " of size " + std::to_string(chunk.sizes[d]) +
                    " in dimension " + std::to_string(d) + " lies outside the tensor's size " +
                    std::to_string(item.size[d]),
                name);
      }
    }
    const auto found = storage.find(StorageKey{name, chunk.offsets});
    if (found == storage.end()) corrupt_metadata("a chunk has no entry in storage_data", name);
    chunk.location = found->second;
    item.chunks.push_back(std::move(chunk));
  }
  return item;
}

}  // namespace

DcpMetadata parse_metadata(std::span<const std::byte> bytes) {
  const torch_detail::Pickle pickle = torch_detail::unpickle(bytes, {.plain_classes = kMetadataClasses});
  const PickleValue* state = state_of(pickle.root, qualified("Metadata"), "the pickle");
  DcpMetadata metadata;
  if (const PickleValue* version = attribute(state, "version"); version != nullptr && version->kind != Kind::kNone) {
    metadata.version = text(version, "version", {});
  }
  const PickleValue* items = required(state, "state_dict_metadata", "Metadata");
  if (items->kind != Kind::kDict) corrupt_metadata("state_dict_metadata is not a dict");
  const PickleValue* storage_value = attribute(state, "storage_data");
  if (storage_value == nullptr || storage_value->kind == Kind::kNone) corrupt_metadata("Metadata has no storage_data");
  const std::map<StorageKey, StorageLocation> storage = storage_data(storage_value);

  std::map<std::string, const PickleValue*> paths;
  if (const PickleValue* planner = attribute(state, "planner_data"); planner != nullptr && planner->kind == Kind::kDict) {
    for (size_t i = 0; i + 1 < planner->items.size(); i += 2) {
      if (planner->items[i]->kind == Kind::kStr) paths.emplace(planner->items[i]->text, planner->items[i + 1]);
    }
  }

  if (const PickleValue* extra = attribute(state, kIntKeysAttribute); extra != nullptr) {
    if (extra->kind != Kind::kList) corrupt_metadata(std::string(kIntKeysAttribute) + " is not a list");
    for (const PickleValue* pair : extra->items) {
      if (pair->kind != Kind::kTuple || pair->items.size() != 2 || pair->items[1]->kind != Kind::kList) {
        corrupt_metadata(std::string(kIntKeysAttribute) + " holds an entry that is not (path, [keys])");
      }
      IntKeys map;
      const PickleValue* path = pair->items[0];
      if (path->kind != Kind::kTuple || !path->items.empty()) map.map = path_of(path, std::string(kIntKeysAttribute));
      for (const PickleValue* key : pair->items[1]->items) {
        map.keys.push_back(integer(key, std::string(kIntKeysAttribute) + " key", {}));
      }
      metadata.int_keys.push_back(std::move(map));
    }
  }

  std::set<std::string> seen;
  for (size_t i = 0; i + 1 < items->items.size(); i += 2) {
    std::string fqn = text(items->items[i], "a key of state_dict_metadata", {});
    detail::require_utf8_name(fqn);
    if (!seen.insert(fqn).second) corrupt_metadata("state_dict_metadata names an item twice", fqn);
    const PickleValue* value = items->items[i + 1];
    Item item;
    if (value->kind == Kind::kObject && value->text == qualified("TensorStorageMetadata")) {
      item = tensor_item(fqn, value->items.size() > 1 ? value->items[1] : nullptr, storage);
    } else if (value->kind == Kind::kObject && value->text == qualified("BytesStorageMetadata")) {
      item.fqn = fqn;
      const auto found = storage.find(StorageKey{fqn, std::nullopt});
      if (found == storage.end()) corrupt_metadata("a bytes item has no entry in storage_data", fqn);
      item.location = found->second;
    } else {
      corrupt_metadata("state_dict_metadata value is neither TensorStorageMetadata nor BytesStorageMetadata", fqn);
    }
    const auto path = paths.find(fqn);
    item.path = path != paths.end() ? path_of(path->second, fqn) : KeyPath{fqn};
    metadata.items.push_back(std::move(item));
  }
  return metadata;
}

}  // namespace ckpt::dcp_detail
