// Writing DCP directories as one process of torch.distributed.checkpoint
// .save writes them: the tree flattened as DCP flattens it, every item a
// torch.save archive in __0_0.distcp, the Metadata pickle.

#include "formats/dcp/writer.h"

#include <map>
#include <set>
#include <utility>

#include "ckpt/error.h"
#include "formats/dcp/layout.h"
#include "formats/dcp/metadata.h"  // IntKeys: the maps whose integer keys DCP makes strings
#include "formats/torch/pickle_writer.h"
#include "formats/torch/writer.h"
#include "io/atomic_directory.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace ckpt::dcp_detail {
namespace {

using torch_detail::PickleWriter;

struct Location {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// One leaf of the flattened tree.
struct OutItem {
  std::string fqn;
  KeyPath path;
  const Tree* value = nullptr;
  Location location;
};

// _traverse.py _is_terminal: a value is a leaf unless it is a map, or a
// list holding a tensor or a container that is not itself a leaf.
bool is_terminal(const Tree& node) {
  if (node.is_map()) return false;
  if (!node.is_list()) return true;
  for (const TreeEntry& entry : node.entries()) {
    if (entry.value.is_tensor()) return false;
    if (entry.value.is_container() && !is_terminal(entry.value)) return false;
  }
  return true;
}

void flatten(const Tree& node, KeyPath& path, std::vector<OutItem>& out, std::vector<IntKeys>& int_keys) {
  // An empty map would hold no item (DCP drops it); ckpt writes it as a
  // bytes item holding {} so that it comes back.
  if (!path.empty() && (is_terminal(node) || (node.is_map() && node.size() == 0))) {
    std::string fqn;
    for (const Key& key : path) {
      fqn += fqn.empty() ? "" : ".";
      fqn += key_to_string(key);
    }
    out.push_back({.fqn = std::move(fqn), .path = path, .value = &node});
    return;
  }
  IntKeys here{.map = path};
  for (const TreeEntry& entry : node.entries()) {
    // DCP keys dict entries by str(key); list positions stay integers.
    Key key = entry.key;
    if (node.is_map() && std::holds_alternative<int64_t>(entry.key)) {
      here.keys.push_back(std::get<int64_t>(entry.key));
      key = std::to_string(std::get<int64_t>(entry.key));
    }
    path.push_back(std::move(key));
    flatten(entry.value, path, out, int_keys);
    path.pop_back();
  }
  if (!here.keys.empty()) int_keys.push_back(std::move(here));
}

void key_path(PickleWriter& out, const KeyPath& path) {
  if (path.size() > 3) out.mark();
  for (const Key& key : path) {
    if (std::holds_alternative<int64_t>(key)) {
      out.integer(std::get<int64_t>(key));
    } else {
      out.str(std::get<std::string>(key));
    }
  }
  if (path.empty()) {
    out.empty_tuple();
  } else {
    out.tuple(path.size());
  }
}

void size_value(PickleWriter& out, std::span<const int64_t> values) {
  out.global("torch", "Size");
  if (values.size() > 3) out.mark();
  for (int64_t value : values) out.integer(value);
  if (values.empty()) {
    out.empty_tuple();
  } else {
    out.tuple(values.size());
  }
  out.tuple(1);
  out.reduce();
}

// An object of `cls` made as pickle makes a dataclass: NEWOBJ with no
// arguments; the caller writes its state and BUILD.
void new_object(PickleWriter& out, std::string_view module, std::string_view cls) {
  out.global(module, cls);
  out.empty_tuple();
  out.newobj();
}

void tensor_metadata(PickleWriter& out, const Tensor& tensor) {
  new_object(out, kMetadataModule, "TensorStorageMetadata");
  out.empty_dict();
  out.mark();
  out.str("properties");
  new_object(out, kMetadataModule, "TensorProperties");
  // TensorProperties.__getstate__: (dtype, layout, requires_grad,
  // memory_format encoding, pin_memory).
  out.mark();
  out.global("torch", dtype_info(tensor.dtype()).torch);
  out.global("torch.serialization", "_get_layout");
  out.str("torch.strided");
  out.tuple(1);
  out.reduce();
  out.boolean(false);
  out.global(kMetadataModule, "_MEM_FORMAT_ENCODING");
  out.integer(0);  // TORCH_CONTIGUOUS_FORMAT
  out.tuple(1);
  out.reduce();
  out.boolean(false);
  out.tuple(5);
  out.build();
  out.str("size");
  size_value(out, tensor.shape());
  out.str("chunks");
  out.empty_list();
  out.mark();
  new_object(out, kMetadataModule, "ChunkStorageMetadata");
  out.empty_dict();
  out.mark();
  out.str("offsets");
  const std::vector<int64_t> zeros(tensor.shape().size(), 0);
  size_value(out, zeros);
  out.str("sizes");
  size_value(out, tensor.shape());
  out.setitems();
  out.build();
  out.appends();
  out.setitems();
  out.build();
}

std::string metadata_pickle(const std::vector<OutItem>& items, const std::vector<IntKeys>& int_keys, bool extras) {
  PickleWriter out;
  new_object(out, kMetadataModule, "Metadata");
  out.empty_dict();
  out.mark();

  out.str("state_dict_metadata");
  out.empty_dict();
  out.mark();
  for (const OutItem& item : items) {
    out.str(item.fqn);
    if (item.value->is_tensor()) {
      tensor_metadata(out, item.value->tensor());
    } else {
      new_object(out, kMetadataModule, "BytesStorageMetadata");
    }
  }
  out.setitems();

  out.str("planner_data");
  out.empty_dict();
  out.mark();
  for (const OutItem& item : items) {
    out.str(item.fqn);
    key_path(out, item.path);
  }
  out.setitems();

  out.str("storage_data");
  out.empty_dict();
  out.mark();
  for (const OutItem& item : items) {
    new_object(out, kMetadataModule, "MetadataIndex");
    out.empty_dict();
    out.mark();
    out.str("fqn");
    out.str(item.fqn);
    out.str("offset");
    if (item.value->is_tensor()) {
      const std::vector<int64_t> zeros(item.value->tensor().shape().size(), 0);
      size_value(out, zeros);
    } else {
      out.none();
    }
    out.str("index");
    if (item.value->is_tensor()) {
      out.integer(0);
    } else {
      out.none();
    }
    out.setitems();
    out.build();
    new_object(out, kFilesystemModule, "_StorageInfo");
    out.empty_dict();
    out.mark();
    out.str("relative_path");
    out.str(kWriterDataFile);
    out.str("offset");
    out.integer(static_cast<int64_t>(item.location.offset));
    out.str("length");
    out.integer(static_cast<int64_t>(item.location.length));
    out.setitems();
    out.build();
  }
  out.setitems();

  out.str("storage_meta");
  new_object(out, kMetadataModule, "StorageMeta");
  out.empty_dict();
  out.mark();
  // No checkpoint_id or save_id: the same tree saves to the same bytes
  // wherever it goes (torch fills in its path and a uuid; load needs neither).
  out.str("checkpoint_id");
  out.none();
  out.str("save_id");
  out.none();
  out.str("load_id");
  out.none();
  out.str("modules");
  out.empty_list();
  out.setitems();
  out.build();

  out.str("version");
  out.str(kDcpVersion);
  if (extras && !int_keys.empty()) {
    // ckpt's extra attribute (torch keeps it in the object's __dict__ and
    // reads nothing from it): the maps whose integer keys DCP made strings.
    out.str(kIntKeysAttribute);
    out.empty_list();
    out.mark();
    for (const IntKeys& map : int_keys) {
      key_path(out, map.map);
      out.empty_list();
      out.mark();
      for (int64_t key : map.keys) out.integer(key);
      out.appends();
      out.tuple(2);
    }
    out.appends();
  }
  out.setitems();
  out.build();
  return out.finish();
}

}  // namespace

std::vector<DType> writable_dtypes() {
  std::vector<DType> dtypes;
  for (const DTypeInfo& info : all_dtypes()) {
    if (!info.torch.empty()) dtypes.push_back(info.dtype);
  }
  return dtypes;
}

void write_checkpoint(const fs::path& path, const Tree& tree, const SaveOptions& options) {
  if (!tree.is_map()) {
    throw Error(ErrorCode::kInvalidArgument, "a DCP checkpoint holds a state dict: the tree must be a map");
  }
  std::vector<OutItem> items;
  std::vector<IntKeys> int_keys;
  KeyPath root;
  flatten(tree, root, items, int_keys);
  std::set<std::string_view> names;
  for (const OutItem& item : items) {
    if (!names.insert(item.fqn).second) {
      throw Error(ErrorCode::kUnsupported, "two leaves have the same DCP fqn", {.entry = item.fqn});
    }
    if (item.value->is_tensor() && dtype_info(item.value->tensor().dtype()).torch.empty()) {
      throw Error(ErrorCode::kUnsupported,
                  "dtype " + std::string(dtype_name(item.value->tensor().dtype())) + " has no torch dtype",
                  {.entry = item.fqn});
    }
  }

  detail::AtomicDirectory directory(path, {.fsync = options.fsync, .files_synced = options.fsync});
  {
    detail::AtomicFile data(directory.path() / kWriterDataFile, {.fsync = options.fsync});
    // Each item is a torch.save archive (torch.save into a stream names its
    // folder "archive/"), written by the torch writer straight into the
    // data file, one after the other.
    uint64_t offset = 0;
    // Tensors by the bytes they view (address, size): one that views the
    // very bytes of an earlier one (tied weights) points at that one's
    // archive, stored once and read back tied. Deferred tensors (no address
    // yet) are each stored on their own.
    std::map<std::pair<const std::byte*, uint64_t>, size_t> stored;
    for (size_t i = 0; i < items.size(); ++i) {
      OutItem& item = items[i];
      if (item.value->is_tensor()) {
        const Tensor& tensor = item.value->tensor();
        const std::byte* address = tensor.buffer().address();
        if (address != nullptr && tensor.nbytes() != 0) {
          const auto [found, fresh] = stored.emplace(std::make_pair(address, tensor.nbytes()), i);
          const Tensor& earlier = items[found->second].value->tensor();
          if (!fresh && earlier.same_memory(tensor) && earlier.dtype() == tensor.dtype() &&
              earlier.shape() == tensor.shape()) {
            item.location = items[found->second].location;
            continue;
          }
        }
      }
      uint64_t length = 0;
      try {
        length = torch_detail::write_archive(data, offset, *item.value, "archive",
                                             {.extras = false, .threads = options.threads});
      } catch (Error& error) {
        throw error.with_entry(item.fqn);
      }
      item.location = {.offset = offset, .length = length};
      offset += length;
    }
    data.commit({.sync_directory = false});
  }
  {
    const std::string pickle = metadata_pickle(items, int_keys, options.extras);
    detail::AtomicFile metadata(directory.path() / kMetadataFile, {.fsync = options.fsync});
    metadata.write_at(std::as_bytes(std::span(pickle)), 0);
    metadata.commit({.sync_directory = false});
  }
  directory.commit();
}

}  // namespace ckpt::dcp_detail
