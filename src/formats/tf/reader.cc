#include "formats/tf/reader.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/text.h"
#include "formats/tf/index_table.h"
#include "formats/tf/layout.h"
#include "formats/tf/names.h"
#include "formats/tf/paths.h"
#include "formats/tf/shard_trailer.h"
#include "formats/tf/slices.h"
#include "formats/tf/strings.h"
#include "formats/tf/tensor_bundle.pb.h"
#include "formats/tree_json.h"
#include "io/mapped_file.h"

namespace ckpt::tf_detail {

using tf::BundleEntryProto;
using tf::BundleHeaderProto;
using tf::TensorShapeProto;
using tf::TensorSliceProto;
using tf::VersionDef;
namespace {

namespace fs = std::filesystem;

std::optional<DType> dtype_from_tf(int64_t code) {
  for (const DTypeInfo& info : all_dtypes()) {
    if (info.tf_code > 0 && info.tf_code == code) return info.dtype;  // -1: TF has no code for it
  }
  return std::nullopt;
}

// One validated entry of the index.
struct Entry {
  std::string key;
  BundleEntryProto proto;
  std::optional<DType> dtype;  // nullopt: DT_STRING
  Shape shape;
  uint64_t numel = 0;
  Tree value;          // the leaf
  uint32_t crc = 0;    // unmasked, as stored
  std::vector<SliceSpec> slices;  // a sliced entry: its bytes are in slice entries
};

// A string tensor of `shape` as nested lists of Bytes (a scalar: one Bytes).
Tree nest_strings(std::vector<std::string>& elements, const Shape& shape, size_t dim, size_t& next) {
  if (dim == shape.size()) return Tree(Bytes{std::move(elements[next++])});
  Tree list = Tree::list();
  list.reserve(static_cast<size_t>(shape[dim]));
  for (int64_t i = 0; i < shape[dim]; ++i) list.push_back(nest_strings(elements, shape, dim + 1, next));
  return list;
}

class Reader {
 public:
  Reader(const fs::path& path, const LoadOptions& options) : options_(options) {
    prefix_ = resolve_prefix(path);
    index_path_ = index_path(prefix_);
  }

  Contents read() {
    index_ = detail::MappedFile::open(index_path_);
    std::vector<IndexRecord> records = read_index_table(index_->bytes(), index_path_);
    if (records.empty() || records.front().first != kHeaderKey) {
      fail_index("the header entry (empty key) is missing", records.empty() ? "" : records.front().first);
    }
    read_header(records.front().second);
    check_shard_records();
    std::vector<Entry> entries;
    entries.reserve(records.size() - 1);
    for (size_t i = 1; i < records.size(); ++i) {
      // A slice's key is binary (OrderedCode); the tensor name in it is a name.
      const std::string& key = records[i].first;
      const std::optional<std::string> name = is_slice_key(key) ? slice_key_name(key) : key;
      if (!name) fail_index("malformed slice key", key);
      detail::require_utf8_name(*name, {.path = index_path_});
      Entry entry = read_entry(key, records[i].second);
      if (!is_slice_key(entry.key)) {
        entries.push_back(std::move(entry));
        continue;
      }
      slice_parts_[*name].push_back(std::move(entry));  // in key order
    }
    for (Entry& entry : entries) {
      if (!entry.slices.empty()) assemble_slices(entry);
    }
    if (!slice_parts_.empty()) {
      fail_index("slices stored for a tensor that lists none", slice_parts_.begin()->first);
    }
    if (shard_records_.empty()) check_no_trailers();
    return assemble(entries);
  }

 private:
  [[noreturn]] void fail_index(std::string message, std::string_view entry = {},
                               ErrorCode code = ErrorCode::kCorrupt) const {
    throw Error(code, std::move(message), {.path = index_path_, .entry = std::string(entry)});
  }

  // TensorFlow's int32 fields are read as int64 (tensor_bundle.proto): one
  // past 32 bits is refused instead of truncated.
  void check_int32(int64_t value, std::string_view field, std::string_view entry = {}) const {
    if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
      fail_index(std::string(field) + " " + std::to_string(value) + " does not fit its declared int32", entry);
    }
  }

  void read_header(const std::string& bytes) {
    BundleHeaderProto header;
    if (!header.ParseFromString(bytes)) fail_index("the header is not a valid BundleHeaderProto");
    check_int32(header.num_shards(), "the header's num_shards");
    check_int32(header.endianness(), "the header's endianness");
    check_int32(header.version().producer(), "the header's version.producer");
    check_int32(header.version().min_consumer(), "the header's version.min_consumer");
    for (int64_t bad : header.version().bad_consumers()) check_int32(bad, "the header's version.bad_consumers");
    if (header.num_shards() <= 0) {
      fail_index("the header's num_shards is " + std::to_string(header.num_shards()) + "; must be at least 1");
    }
    if (header.endianness() == kBigEndian) {
      fail_index("big-endian bundles are not supported", {}, ErrorCode::kUnsupported);
    }
    if (header.endianness() != kLittleEndian) {
      fail_index("the header's endianness " + std::to_string(header.endianness()) + " is neither LITTLE nor BIG");
    }
    // CheckVersions (core/public/version.h semantics).
    const VersionDef& version = header.version();
    if (version.producer() < kBundleMinProducer || version.min_consumer() > kBundleVersion ||
        std::find(version.bad_consumers().begin(), version.bad_consumers().end(), kBundleVersion) !=
            version.bad_consumers().end()) {
      fail_index("bundle version (producer " + std::to_string(version.producer()) + ", min_consumer " +
                     std::to_string(version.min_consumer()) + ") excludes readers of version " +
                     std::to_string(kBundleVersion),
                 {}, ErrorCode::kUnsupported);
    }
    num_shards_ = static_cast<int>(header.num_shards());
    skeleton_ = header.ckpt_tree();
    shard_records_.assign(header.ckpt_shards().begin(), header.ckpt_shards().end());
    if (!shard_records_.empty() && shard_records_.size() != static_cast<size_t>(num_shards_)) {
      fail_index("ckpt's record lists " + std::to_string(shard_records_.size()) + " data shards, num_shards is " +
                 std::to_string(num_shards_));
    }
  }

  // The message of a shard that belongs to another save than the .index.
  std::string torn(const detail::MappedFile& file, const std::string& fact) const {
    return "data shard " + file.path().filename().string() + " " + fact +
           ": the two are from different saves (an overwrite of this prefix interrupted between the renames of "
           "its data and its .index)";
  }

  // With ckpt's record (extras): every shard has the recorded size and ends
  // with the recorded digest, read from its last 16 bytes only.
  void check_shard_records() {
    for (size_t id = 0; id < shard_records_.size(); ++id) {
      const tf::CkptShard& record = shard_records_[id];
      const detail::MappedFile& file = shard(static_cast<int>(id), {});
      const std::string index = index_path_.filename().string();
      const auto throw_torn = [&](const std::string& fact) {
        throw Error(ErrorCode::kCorrupt, torn(file, fact), {.path = file.path()});
      };
      if (file.size() != record.size()) {
        throw_torn("has " + std::to_string(file.size()) + " bytes where " + index + " records " +
                   std::to_string(record.size()));
      }
      const std::optional<uint64_t> digest = trailer_digest(file.bytes());
      if (!digest) throw_torn("ends without ckpt's trailer where " + index + " records one");
      if (*digest != record.digest()) {
        throw_torn("has the trailer digest " + detail::hex_digits(*digest, 16) + " where " + index + " records " +
                   detail::hex_digits(record.digest(), 16));
      }
    }
  }

  // Without a record (TensorFlow's bundles, ckpt's without extras): a shard
  // that ends with ckpt's trailer after every entry's bytes was written with
  // a record, so this .index belongs to another save.
  void check_no_trailers() const {
    for (const auto& [id, file] : shards_) {
      const auto end = data_end_.find(id);
      const uint64_t used = end == data_end_.end() ? 0 : end->second;
      if (file->size() < kShardTrailerSize || used > file->size() - kShardTrailerSize) continue;
      if (trailer_digest(file->bytes())) {
        throw Error(ErrorCode::kCorrupt,
                    torn(*file, "ends with ckpt's trailer where " + index_path_.filename().string() + " records none"),
                    {.path = file->path()});
      }
    }
  }

  Entry read_entry(const std::string& key, const std::string& bytes) {
    Entry entry;
    entry.key = key;
    BundleEntryProto& proto = entry.proto;
    if (!proto.ParseFromString(bytes)) fail_index("the entry is not a valid BundleEntryProto", key);
    const int64_t code = proto.dtype();
    if (code != kDtString) {
      entry.dtype = dtype_from_tf(code);
      if (!entry.dtype) {
        // DT_INVALID and reference types (100 + t) never name stored tensors.
        const bool invalid = code <= 0 || code >= 100;
        fail_index("dtype code " + std::to_string(code) +
                       (invalid ? " is not a valid tensorflow.DataType" : " is not supported by ckpt"),
                   key, invalid ? ErrorCode::kCorrupt : ErrorCode::kUnsupported);
      }
    }
    if (proto.shape().unknown_rank()) fail_index("the shape has unknown rank", key);
    for (const TensorShapeProto::Dim& dim : proto.shape().dim()) {
      if (dim.size() < 0) fail_index("shape dimension " + std::to_string(dim.size()) + " is negative", key);
      // TensorFlow declares the name a string (UTF-8); ckpt reads it as bytes.
      if (!detail::valid_utf8(dim.name())) fail_index("a shape dimension's name is not valid UTF-8", key);
      entry.shape.push_back(dim.size());
    }
    const size_t element_size = entry.dtype ? dtype_size(*entry.dtype) : 1;
    try {
      entry.numel = checked_numel(entry.shape, element_size);
    } catch (const Error&) {
      fail_index("the shape's element count or byte size overflows 64 bits", key);
    }
    if (proto.slices_size() > 0) {
      read_slice_list(entry);
      return entry;
    }
    if (proto.shard_id() < 0 || proto.shard_id() >= num_shards_) {
      fail_index("shard_id " + std::to_string(proto.shard_id()) + " is outside the header's " +
                     std::to_string(num_shards_) + " shards",
                 key);
    }
    if (proto.offset() < 0 || proto.size() < 0) {
      fail_index("negative offset or size (" + std::to_string(proto.offset()) + ", " + std::to_string(proto.size()) + ")",
                 key);
    }
    const auto size = static_cast<uint64_t>(proto.size());
    if (entry.dtype && size != entry.numel * element_size) {
      fail_index("size " + std::to_string(size) + " differs from the " + std::to_string(entry.numel * element_size) +
                     " bytes of its dtype and shape",
                 key);
    }
    if (!entry.dtype && size < entry.numel + 4) {
      fail_index("size " + std::to_string(size) + " is too small for " + std::to_string(entry.numel) + " strings", key);
    }
    entry.crc = unmask_crc(proto.crc32c());
    read_value(entry);
    return entry;
  }

  // A partitioned variable's slice list, checked against its shape.
  void read_slice_list(Entry& entry) {
    if (!entry.dtype) fail_index("sliced string tensors are not supported", entry.key, ErrorCode::kUnsupported);
    for (const TensorSliceProto& slice : entry.proto.slices()) {
      if (static_cast<size_t>(slice.extent_size()) != entry.shape.size()) {
        fail_index("a slice has " + std::to_string(slice.extent_size()) + " extents for a tensor of rank " +
                       std::to_string(entry.shape.size()),
                   entry.key);
      }
      SliceSpec spec;
      for (int d = 0; d < slice.extent_size(); ++d) {
        const TensorSliceProto::Extent& extent = slice.extent(d);
        const int64_t length = extent.has_length() ? extent.length() : -1;
        if (length < -1) fail_index("a slice's length " + std::to_string(length) + " is negative", entry.key);
        const int64_t dim = entry.shape[static_cast<size_t>(d)];
        const bool inside = length < 0 ? extent.start() == 0
                                       : extent.start() >= 0 && extent.start() <= dim && length <= dim - extent.start();
        if (!inside) fail_index("a slice lies outside the tensor's shape", entry.key);
        spec.push_back({extent.start(), length});
      }
      entry.slices.push_back(std::move(spec));
    }
  }

  // A partitioned variable as one heap tensor, from its slice entries.
  void assemble_slices(Entry& entry) {
    const auto found = slice_parts_.find(entry.key);
    const size_t stored = found == slice_parts_.end() ? 0 : found->second.size();
    if (stored != entry.slices.size()) {
      fail_index(std::to_string(entry.slices.size()) + " slices listed, " + std::to_string(stored) + " stored",
                 entry.key);
    }
    std::vector<Entry>& parts = found->second;
    std::sort(entry.slices.begin(), entry.slices.end());  // the slice keys' order
    Tensor full = Tensor::zeros(*entry.dtype, entry.shape);
    uint64_t covered = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const SliceSpec& spec = entry.slices[i];
      Shape lengths;
      for (size_t d = 0; d < spec.size(); ++d) lengths.push_back(spec[d].length < 0 ? entry.shape[d] : spec[d].length);
      if (parts[i].dtype != entry.dtype || parts[i].shape != lengths) {
        fail_index("a stored slice's dtype or shape disagrees with the slice list", entry.key);
      }
      covered += parts[i].numel;
      copy_slice(full.mutable_bytes(), entry.shape, dtype_size(*entry.dtype), spec, parts[i].value.tensor().bytes());
    }
    if (covered != entry.numel) fail_index("the slices do not cover the tensor exactly once", entry.key);
    entry.value = Tree(std::move(full));
    slice_parts_.erase(found);
  }

  const detail::MappedFile& shard(int id, const std::string& key) {
    auto& mapped = shards_[id];
    if (mapped == nullptr) {
      const fs::path path = shard_path(prefix_, id, num_shards_);
      std::error_code error;
      if (!fs::is_regular_file(path, error)) {
        throw Error(ErrorCode::kCorrupt, "data shard " + path.filename().string() + " is missing",
                    {.path = path, .entry = key});
      }
      mapped = detail::MappedFile::open(path);
    }
    return *mapped;
  }

  void read_value(Entry& entry) {
    const BundleEntryProto& proto = entry.proto;
    const int id = static_cast<int>(proto.shard_id());
    const detail::MappedFile& file = shard(id, entry.key);
    const auto offset = static_cast<uint64_t>(proto.offset());
    const auto size = static_cast<uint64_t>(proto.size());
    // With ckpt's record the trailer is no tensor's.
    const uint64_t data_size = shard_records_.empty() ? file.size() : file.size() - kShardTrailerSize;
    if (offset > data_size || size > data_size - offset) {
      throw Error(ErrorCode::kCorrupt,
                  "bytes [" + std::to_string(offset) + ", +" + std::to_string(size) + ") run past the shard's " +
                      std::to_string(data_size) + " bytes of data (is " + index_path_.filename().string() +
                      " from another save?)",
                  {.path = file.path(), .entry = entry.key, .offset = offset});
    }
    uint64_t& end = data_end_[id];
    end = std::max(end, offset + size);
    const std::span<const std::byte> bytes = file.bytes().subspan(static_cast<size_t>(offset), static_cast<size_t>(size));
    auto check_crc = [&](uint32_t actual) {
      if (actual != entry.crc) {
        throw Error(ErrorCode::kCorrupt,
                    "CRC-32C mismatch: stored " + detail::hex8(entry.crc) + ", computed " + detail::hex8(actual),
                    {.path = file.path(), .entry = entry.key, .offset = offset});
      }
    };
    if (entry.dtype) {
      if (options_.verify) check_crc(detail::crc32c(bytes));
      entry.value = Tree(Tensor(*entry.dtype, entry.shape, file.slice(offset, size)));
      return;
    }
    DecodedStrings strings;
    try {
      strings = decode_strings(bytes, entry.numel);
    } catch (Error& error) {
      throw Error(error.code(), error.message(),
                  {.path = file.path(), .entry = entry.key, .offset = offset + error.context().offset.value_or(0)});
    }
    if (options_.verify) check_crc(strings.crc);
    size_t next = 0;
    entry.value = nest_strings(strings.elements, entry.shape, 0, next);
  }

  static bool file_order(const Entry* a, const Entry* b) {
    if (a->proto.shard_id() != b->proto.shard_id()) return a->proto.shard_id() < b->proto.shard_id();
    if (a->proto.offset() != b->proto.offset()) return a->proto.offset() < b->proto.offset();
    return a->key < b->key;
  }

  // The tree from the keys (names.h), leaves in file order.
  Tree tree_from_keys(std::vector<Entry*> order) {
    std::vector<std::string> keys;
    keys.reserve(order.size());
    for (const Entry* entry : order) keys.push_back(entry->key);
    const std::vector<TreePath> paths = tree_paths_of(keys);
    Tree tree = Tree::map();
    for (size_t i = 0; i < order.size(); ++i) {
      Tree* node = &tree;
      for (size_t depth = 0; depth + 1 < paths[i].size(); ++depth) {
        Tree* child = node->find(paths[i][depth]);
        node = child != nullptr ? child : &node->set(paths[i][depth], Tree::map());
      }
      node->set(paths[i].back(), std::move(order[i]->value));
    }
    // Leaves are found once the tree is complete (children move while it grows).
    for (size_t i = 0; i < order.size(); ++i) {
      const Tree* node = &tree;
      for (const std::string& key : paths[i]) node = node->find(key);
      leaf_of_[order[i]] = node;
    }
    return tree;
  }

  // The tree from ckpt's skeleton: tensors by their keys, the rest inline.
  Tree tree_from_skeleton(std::vector<Entry>& entries) {
    std::unordered_map<std::string_view, Entry*> by_key;
    for (Entry& entry : entries) by_key.emplace(entry.key, &entry);
    std::vector<Entry*> resolved;  // in tree order
    Tree tree;
    try {
      tree = detail::tree_from_json(skeleton_, [&](std::string_view key) {
        const auto it = by_key.find(key);
        if (it == by_key.end() || !it->second->dtype) {
          throw Error(ErrorCode::kCorrupt, "ckpt's tree names " + detail::quoted(key) + ", which is no tensor entry");
        }
        resolved.push_back(it->second);
        return it->second->value.tensor();
      });
    } catch (Error& error) {
      error.with_path(index_path_);
      throw;
    }
    std::vector<Tree::Leaf> leaves = tree.tensor_leaves();
    for (size_t i = 0; i < leaves.size() && i < resolved.size(); ++i) leaf_of_[resolved[i]] = leaves[i].value;
    return tree;
  }

  Contents assemble(std::vector<Entry>& entries) {
    std::vector<Entry*> order;
    for (Entry& entry : entries) order.push_back(&entry);
    std::stable_sort(order.begin(), order.end(), file_order);
    Contents contents;
    contents.format = "tf";
    contents.checksum = ChecksumKind::kCrc32c;
    if (skeleton_.empty()) {
      contents.tree = tree_from_keys(order);
    } else {
      contents.tree = tree_from_skeleton(entries);
      contents.format_version = 1;
    }
    // Entries: numeric tensors in file order, named as the tree names them.
    std::unordered_map<const Tree*, std::string> names;
    for (const Tree::Leaf& leaf : contents.tree.tensor_leaves()) names.emplace(leaf.value, leaf.name);
    for (const Entry* entry : order) {
      const auto leaf = leaf_of_.find(entry);
      if (!entry->dtype || leaf == leaf_of_.end()) continue;
      contents.entries.push_back(EntryInfo{names.at(leaf->second), *entry->dtype, entry->shape,
                                           static_cast<uint64_t>(entry->proto.offset()),
                                           entry->slices.empty() ? static_cast<uint64_t>(entry->proto.size())
                                                                 : entry->numel * dtype_size(*entry->dtype),
                                           entry->slices.empty() ? detail::hex8(entry->crc) : std::string()});
    }
    return contents;
  }

  LoadOptions options_;
  fs::path prefix_;
  fs::path index_path_;
  std::shared_ptr<const detail::MappedFile> index_;
  int num_shards_ = 0;
  std::map<int, std::shared_ptr<const detail::MappedFile>> shards_;
  std::string skeleton_;  // ckpt's extras; empty if none
  std::vector<tf::CkptShard> shard_records_;  // ckpt's extras; empty if none
  std::map<int, uint64_t> data_end_;  // by shard: the end of the last entry's bytes
  std::map<std::string, std::vector<Entry>> slice_parts_;  // by tensor name, in key order
  std::unordered_map<const Entry*, const Tree*> leaf_of_;
};

}  // namespace

bool detect_index(std::span<const std::byte> head, uint64_t file_size) {
  if (file_size < kTableFooterSize || head.size() < 4) return false;
  // The first record of the first block: shared 0, key length 0 (the header
  // key ""), a short value length, then the header's first field: num_shards
  // (tag 0x08), which TensorFlow always writes.
  if (head[0] != std::byte{0} || head[1] != std::byte{0}) return false;
  if (static_cast<uint8_t>(head[2]) >= 0x80 || head[3] != std::byte{0x08}) return false;
  if (head.size() == file_size) return has_table_magic(head);
  return true;
}

Contents read_bundle(const fs::path& path, const LoadOptions& options) {
  return Reader(path, options).read();
}

}  // namespace ckpt::tf_detail
