#include "formats/tf/writer.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/json_writer.h"
#include "formats/tf/layout.h"
#include "formats/tf/names.h"
#include "formats/tf/paths.h"
#include "formats/tf/shard_trailer.h"
#include "formats/tf/strings.h"
#include "formats/tf/tensor_bundle.pb.h"
#include "formats/tree_json.h"
#include "io/atomic_file.h"

namespace ckpt::tf_detail {

using tf::BundleEntryProto;
using tf::BundleHeaderProto;
using tf::TensorShapeProto;
namespace {

namespace fs = std::filesystem;

[[noreturn]] void unsupported(std::string message, const TreePath& path) {
  throw Error(ErrorCode::kUnsupported, std::move(message), {.entry = join_names(path)});
}

// One leaf to store.
struct Item {
  TreePath path;
  std::string key;
  int dtype = 0;
  Shape shape;
  std::span<const std::byte> bytes;  // what goes into the shard
  const Tensor* tensor = nullptr;    // numeric leaves
  std::string* encoded = nullptr;    // string leaves (owned by the writer)
  uint32_t crc = 0;                  // unmasked
  int shard = 0;                     // the data shard holding its bytes
  int64_t offset = 0;                // in that shard
  size_t tied_to = SIZE_MAX;         // index of the item whose bytes it shares
};

class Writer {
 public:
  Writer(const fs::path& path, const SaveOptions& options) : prefix_(prefix_for_write(path)), options_(options) {}

  void write(const Tree& tree) {
    if (!tree.is_map()) unsupported("a TensorFlow bundle holds named tensors: the tree must be a map", {});
    object_based_ = tree.find(std::string(kObjectGraphKey)) != nullptr;
    TreePath path;
    collect(tree, path);
    assign_keys();
    lay_out();
    create_directory();
    // Every file is written in full under a temporary name before any is
    // renamed into place: a failed write (disk full) changes nothing. Each
    // shard is closed once written (sealed), so that a bundle of thousands
    // of shards holds one descriptor at a time.
    const int num_shards = static_cast<int>(shard_sizes_.size());
    std::vector<std::unique_ptr<detail::AtomicFile>> shards = write_shards(num_shards);
    detail::AtomicFile index(index_path(prefix_), {.fsync = options_.fsync});
    write_index(index, tree, num_shards);
    // The renames back to back, nothing synced between them (the index's
    // commit syncs the directory for all): a kill between the shards' and
    // the index's renames (old index, new data) has a window of a few
    // renames, not of fsyncs.
    index.seal();
    for (auto& shard : shards) shard->commit({.sync_directory = false});
    index.commit();
    // The new .index names none of the shards of an earlier bundle of
    // another shard count at this prefix: remove them.
    remove_stale_shards(prefix_, num_shards);
    update_state_file(prefix_, {.policy = options_.state_file, .fsync = options_.fsync});
  }

 private:
  // Depth first in tree order, as Tree::tensor_leaves() lists tensors.
  void collect(const Tree& node, TreePath& path) {
    for (const TreeEntry& child : node.entries()) {
      if (!std::holds_alternative<std::string>(child.key) && !options_.extras) {
        path.push_back(key_to_string(child.key));
        unsupported("integer keys cannot be stored in a TensorFlow bundle without extras", path);
      }
      path.push_back(key_to_string(child.key));
      visit(child.value, path);
      path.pop_back();
    }
  }

  void visit(const Tree& value, TreePath& path) {
    if (value.is_tensor()) {
      add_tensor(value.tensor(), path);
    } else if (value.kind() == Tree::Kind::kBytes || value.kind() == Tree::Kind::kString) {
      add_strings(value, path);
    } else if (value.is_list() && holds_only_strings(value) && (!options_.extras || is_rectangular(value))) {
      add_strings(value, path);  // refuses a ragged list
    } else if (value.is_container() && value.size() > 0 && (value.is_map() || options_.extras)) {
      collect(value, path);  // list positions name the children with extras
    } else if (!options_.extras) {
      unsupported(std::string("a ") + std::string(tree_kind_name(value.kind())) +
                      (value.is_container() ? " (empty)" : "") +
                      " cannot be stored in a TensorFlow bundle without extras (tensors, bytes, strings and "
                      "lists of them only)",
                  path);
    }
    // With extras, other leaves and empty containers live in the skeleton only.
  }

  bool is_rectangular(const Tree& list) {
    try {
      Shape shape;
      bool shape_known = false;
      std::vector<std::string> elements;
      flatten_strings(list, 0, shape, shape_known, elements, {});
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  // True for a (nested) list whose leaves are all bytes or strings (an empty
  // list included): a DT_STRING tensor.
  static bool holds_only_strings(const Tree& list) {
    for (const TreeEntry& child : list.entries()) {
      const Tree& value = child.value;
      if (value.is_list() ? !holds_only_strings(value)
                          : value.kind() != Tree::Kind::kBytes && value.kind() != Tree::Kind::kString) {
        return false;
      }
    }
    return true;
  }

  void add_tensor(const Tensor& tensor, const TreePath& path) {
    if (!tensor.has_data()) unsupported("a tensor without data (a spec) cannot be stored", path);
    Item item;
    item.path = path;
    item.dtype = dtype_info(tensor.dtype()).tf_code;
    item.shape = tensor.shape();
    item.tensor = &tensor;
    items_.push_back(std::move(item));
  }

  // Walks a (nested) list of Bytes / strings, recording its shape.
  void flatten_strings(const Tree& node, size_t depth, Shape& shape, bool& shape_known,
                       std::vector<std::string>& elements, const TreePath& path) {
    if (!node.is_list()) {
      if (node.kind() == Tree::Kind::kBytes) {
        elements.push_back(node.bytes().data);
      } else if (node.kind() == Tree::Kind::kString) {
        elements.push_back(node.string());
      } else {
        unsupported("a list stores as a DT_STRING tensor only if it holds bytes or strings, not a " +
                        std::string(tree_kind_name(node.kind())),
                    path);
      }
      if (!shape_known) shape_known = true;
      if (depth != shape.size()) unsupported("a ragged list of strings cannot be stored", path);
      return;
    }
    const auto size = static_cast<int64_t>(node.size());
    if (!shape_known && depth == shape.size()) {
      shape.push_back(size);
      if (size == 0) shape_known = true;
    } else if (depth >= shape.size() || shape[depth] != size) {
      unsupported("a ragged list of strings cannot be stored", path);
    }
    for (const TreeEntry& child : node.entries()) flatten_strings(child.value, depth + 1, shape, shape_known, elements, path);
  }

  void add_strings(const Tree& value, const TreePath& path) {
    Item item;
    item.path = path;
    item.dtype = kDtString;
    std::vector<std::string> elements;
    bool shape_known = false;
    flatten_strings(value, 0, item.shape, shape_known, elements, path);
    EncodedStrings encoded = encode_strings(elements);
    strings_.push_back(std::move(encoded.bytes));
    item.encoded = &strings_.back();
    item.crc = encoded.crc;
    items_.push_back(std::move(item));
  }

  void assign_keys() {
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < items_.size(); ++i) {
      Item& item = items_[i];
      item.key = key_of(item.path, object_based_);
      if (item.key == kHeaderKey) unsupported("the empty key is the bundle's header", item.path);
      const auto [it, inserted] = seen.emplace(item.key, i);
      if (!inserted) {
        unsupported("two leaves map to the key '" + item.key + "' (the other: " + join_names(items_[it->second].path) + ")",
                    item.path);
      }
    }
  }

  // Shards and offsets in tree order; tied tensors share their first leaf's
  // bytes. A tensor with bytes starts a new shard when the current one holds
  // bytes already and would grow past options_.max_shard_bytes.
  void lay_out() {
    std::map<std::pair<const std::byte*, size_t>, size_t> by_address;
    const uint64_t limit = options_.max_shard_bytes;
    shard_sizes_.assign(1, 0);
    int64_t offset = 0;
    for (size_t i = 0; i < items_.size(); ++i) {
      Item& item = items_[i];
      if (item.tensor != nullptr) {
        const Buffer& buffer = item.tensor->buffer();
        if (buffer.address() != nullptr && !buffer.empty()) {
          const auto [it, inserted] = by_address.emplace(std::make_pair(buffer.address(), buffer.size()), i);
          if (!inserted && items_[it->second].dtype == item.dtype) {
            item.tied_to = it->second;
            item.shard = items_[it->second].shard;
            item.offset = items_[it->second].offset;
            continue;
          }
        }
        item.bytes = item.tensor->bytes();
      } else {
        item.bytes = std::as_bytes(std::span(*item.encoded));
      }
      const uint64_t size = item.bytes.size();
      const uint64_t used = shard_sizes_.back();
      if (limit > 0 && size > 0 && used > 0 && size > limit - std::min(used, limit)) {
        if (shard_sizes_.size() >= static_cast<size_t>(kMaxWriteShards)) {
          throw Error(ErrorCode::kUnsupported,
                      "max_shard_bytes " + std::to_string(limit) + " would split the bundle into more than " +
                          std::to_string(kMaxWriteShards) + " shards",
                      {.entry = join_names(item.path)});
        }
        shard_sizes_.push_back(0);
        offset = 0;
      }
      item.shard = static_cast<int>(shard_sizes_.size() - 1);
      item.offset = offset;
      offset += static_cast<int64_t>(size);
      shard_sizes_.back() = static_cast<uint64_t>(offset);
    }
  }

  // As BundleWriter, the prefix's directory is created if missing.
  void create_directory() const {
    const fs::path directory = prefix_.parent_path();
    std::error_code error;
    if (directory.empty() || fs::is_directory(directory, error)) return;
    fs::create_directories(directory, error);
    if (error) throw Error(ErrorCode::kIo, "cannot create the directory: " + error.message(), {.path = directory});
  }

  // Writes and seals every shard under its temporary name; commit() renames.
  std::vector<std::unique_ptr<detail::AtomicFile>> write_shards(int num_shards) {
    std::vector<std::vector<detail::WriteSpan>> spans(static_cast<size_t>(num_shards));
    for (Item& item : items_) {
      if (item.tied_to != SIZE_MAX) continue;
      detail::WriteSpan span{item.bytes, static_cast<uint64_t>(item.offset), nullptr};
      if (item.tensor != nullptr) {
        uint32_t* crc = &item.crc;
        span.on_chunk = [crc](std::span<const std::byte> chunk) { *crc = detail::crc32c(chunk, *crc); };
      }
      spans[static_cast<size_t>(item.shard)].push_back(std::move(span));
    }
    std::vector<std::unique_ptr<detail::AtomicFile>> files;
    for (int shard = 0; shard < num_shards; ++shard) {
      auto file = std::make_unique<detail::AtomicFile>(shard_path(prefix_, shard, num_shards),
                                                       detail::AtomicFileOptions{.fsync = options_.fsync});
      const uint64_t data_size = shard_sizes_[static_cast<size_t>(shard)];
      file->resize(data_size + (options_.extras ? kShardTrailerSize : 0));
      file->write_parallel(spans[static_cast<size_t>(shard)], options_.threads);
      if (options_.extras) {  // after the data: the digest needs every CRC
        const uint64_t digest = shard_digest(extents_of(shard));
        file->write_at(shard_trailer(digest), data_size);
        shard_records_.push_back({data_size + kShardTrailerSize, digest});
      }
      file->seal();
      files.push_back(std::move(file));
    }
    for (Item& item : items_) {
      if (item.tied_to != SIZE_MAX) item.crc = items_[item.tied_to].crc;
    }
    return files;
  }

  // What shard `shard` stores, by offset (the writer's order): its trailer's digest.
  std::vector<ShardExtent> extents_of(int shard) const {
    std::vector<ShardExtent> extents;
    for (const Item& item : items_) {
      if (item.tied_to != SIZE_MAX || item.shard != shard) continue;
      extents.push_back({static_cast<uint64_t>(item.offset), item.bytes.size(), item.crc});
    }
    return extents;
  }

  // The tree's skeleton, tensors named by their keys.
  std::string skeleton(const Tree& tree) const {
    std::vector<Tree::Leaf> tensors;
    for (const Item& item : items_) {
      if (item.tensor != nullptr) tensors.push_back({item.key, nullptr});
    }
    const std::vector<Tree::Leaf> leaves = tree.tensor_leaves();
    if (leaves.size() != tensors.size()) throw Error(ErrorCode::kInvalidArgument, "tensor leaves miscounted");
    for (size_t i = 0; i < leaves.size(); ++i) tensors[i].value = leaves[i].value;
    detail::JsonWriter out;
    detail::write_tree_json(out, tree, tensors);
    return out.text();
  }

  void write_index(detail::AtomicFile& file, const Tree& tree, int num_shards) {
    std::vector<IndexRecord> records;
    records.reserve(items_.size() + 1);
    records.push_back(header_record(num_shards, options_.extras ? skeleton(tree) : std::string(), shard_records_));
    std::vector<size_t> by_key(items_.size());
    for (size_t i = 0; i < by_key.size(); ++i) by_key[i] = i;
    std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return items_[a].key < items_[b].key; });
    for (size_t i : by_key) {
      const Item& item = items_[i];
      BundleEntryProto entry;
      entry.set_dtype(item.dtype);
      TensorShapeProto* shape = entry.mutable_shape();
      for (int64_t dim : item.shape) shape->add_dim()->set_size(dim);
      entry.set_shard_id(item.shard);
      entry.set_offset(item.offset);
      entry.set_size(static_cast<int64_t>(item.tensor != nullptr ? item.tensor->nbytes() : item.bytes.size()));
      entry.set_crc32c(mask_crc(item.crc));
      records.emplace_back(item.key, entry.SerializeAsString());
    }
    const std::string table = build_index_table(records);
    file.write_at(std::as_bytes(std::span(table)), 0);
  }

  fs::path prefix_;
  SaveOptions options_;
  bool object_based_ = false;
  std::vector<Item> items_;
  std::deque<std::string> strings_;  // stable addresses
  std::vector<uint64_t> shard_sizes_;  // bytes of each data shard (without a trailer)
  std::vector<ShardRecord> shard_records_;  // with extras: each shard's size and trailer digest
};

}  // namespace

IndexRecord header_record(int num_shards, const std::string& skeleton, const std::vector<ShardRecord>& shards) {
  BundleHeaderProto header;
  header.set_ckpt_tree(skeleton);
  for (const ShardRecord& shard : shards) {
    tf::CkptShard* record = header.add_ckpt_shards();
    record->set_size(shard.size);
    record->set_digest(shard.digest);
  }
  header.set_num_shards(num_shards);
  header.set_endianness(kLittleEndian);
  header.mutable_version()->set_producer(kBundleVersion);
  header.mutable_version()->set_min_consumer(kBundleMinConsumer);
  return {std::string(kHeaderKey), header.SerializeAsString()};
}

void write_bundle(const fs::path& path, const Tree& tree, const SaveOptions& options) {
  Writer(path, options).write(tree);
}

}  // namespace ckpt::tf_detail
