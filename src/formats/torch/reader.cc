#include "formats/torch/reader.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <unordered_map>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/strided.h"
#include "core/text.h"
#include "formats/torch/layout.h"
#include "formats/zip/layout.h"
#include "formats/zip/reader.h"
#include "io/mapped_file.h"

namespace ckpt::torch_detail {
namespace {

using Kind = PickleValue::Kind;

constexpr size_t kMaxDepth = 512;
// What a pickle's tree may cost. Shared references (memo GETs) make one
// opcode stand for a whole subtree, which the tree copies (containers) or
// shares (strings and bytes, as the pickle does). Every node is charged what
// it takes in memory (below), and every string, bytes and string key its
// length at each reference, shared or not (what a JSON or Python rendering
// of the tree spells out); the whole may cost kTreeBytesPerByte bytes per
// byte of pickle plus kTreeSlack. A list of Nones, the densest legitimate
// pickle, costs 16 per byte; a state dict well under 8; repeated short
// strings ('cpu', dict keys) a few each.
constexpr uint64_t kTreeBytesPerByte = 32;
constexpr uint64_t kTreeSlack = uint64_t{4} << 20;
constexpr uint64_t kNodeCost = sizeof(Tree);              // where the node is stored
constexpr uint64_t kContainerCost = 64;                   // a map's or list's own node
constexpr uint64_t kMapEntryCost = sizeof(Key) + 16;      // the key and its index slots
constexpr uint64_t kPayloadCost = 48;                     // a string's or bytes' own node
constexpr uint64_t kTensorCost = sizeof(Tensor) + 64;     // its heap node and shape

// Byte-swapped copy of `bytes`, `unit` bytes at a time (big-endian files).
Buffer swapped(const Buffer& bytes, size_t unit) {
  Buffer out = Buffer::allocate(bytes.size());
  std::span<std::byte> dst = out.mutable_bytes();
  const std::byte* src = bytes.data();
  for (size_t i = 0; i + unit <= bytes.size(); i += unit) {
    for (size_t k = 0; k < unit; ++k) dst[i + k] = src[i + unit - 1 - k];
  }
  return out;
}

class TreeBuilder {
 public:
  TreeBuilder(size_t pickle_size, const std::function<Tensor(uint32_t)>& tensor_of)
      : budget_(kTreeBytesPerByte * pickle_size + kTreeSlack), tensor_of_(tensor_of) {}

  Tree build(const PickleValue* object) {
    try {
      return convert(object, 0);
    } catch (Error& error) {
      if (error.context().entry.empty() && !path_.empty()) error.with_entry(path_name());
      throw;
    }
  }

 private:
  std::string path_name() const {
    std::string name;
    for (const Key& key : path_) append_name(name, key_to_string(key));
    return name;
  }

  void charge(uint64_t bytes) {
    if (bytes > budget_) {
      throw Error(ErrorCode::kCorrupt,
                  "pickle's shared references expand to more values than the file can hold (its tree would take "
                  "more than " + std::to_string(kTreeBytesPerByte) + " bytes per byte of pickle)");
    }
    budget_ -= bytes;
  }

  // A string or bytes leaf; one Tree per memoized object, shared by every
  // reference to it.
  Tree text(const PickleValue* object, bool bytes) {
    charge(object->text.size());
    if (object->memoized) {
      if (auto found = shared_.find(object); found != shared_.end()) return found->second;
    }
    charge(kPayloadCost);
    Tree leaf = bytes ? Tree(Bytes{object->text}) : Tree(object->text);
    if (object->memoized) shared_.emplace(object, leaf);
    return leaf;
  }

  Tree convert(const PickleValue* object, size_t depth) {
    charge(kNodeCost);
    if (depth > kMaxDepth) throw Error(ErrorCode::kCorrupt, "values nested deeper than 512 levels (or a cycle)");
    switch (object->kind) {
      case Kind::kNone: return Tree();
      case Kind::kBool: return Tree(object->flag);
      case Kind::kInt: return Tree(object->integer);
      case Kind::kFloat: return Tree(object->real);
      case Kind::kStr: return text(object, false);
      case Kind::kBytes: return text(object, true);
      case Kind::kBigInt: throw Error(ErrorCode::kUnsupported, "integer wider than 64 bits");
      case Kind::kTensor: charge(kTensorCost); return Tree(tensor_of_(static_cast<uint32_t>(object->integer)));
      case Kind::kStorage: throw Error(ErrorCode::kUnsupported, "a bare storage (not a tensor) is not supported");
      case Kind::kObject: throw Error(ErrorCode::kUnsupported, "value " + detail::quoted(object->text) + " is not data");
      case Kind::kGlobal:
        if (object->global == Global::kDType) return text(object, false);  // "torch.float32"
        throw Error(ErrorCode::kUnsupported, "value " + detail::quoted(object->text) + " is not data");
      case Kind::kTuple:
      case Kind::kList:
      case Kind::kSet: {
        charge(kContainerCost);
        Tree list = Tree::list();
        list.reserve(object->items.size());
        for (size_t i = 0; i < object->items.size(); ++i) {
          path_.emplace_back(static_cast<int64_t>(i));
          list.push_back(convert(object->items[i], depth + 1));
          path_.pop_back();
        }
        return list;
      }
      case Kind::kDict: {
        charge(kContainerCost);
        Tree map = Tree::map();
        map.reserve(object->items.size() / 2);
        for (size_t i = 0; i + 1 < object->items.size(); i += 2) {
          const PickleValue* key = object->items[i];
          Key tree_key;
          if (key->kind == Kind::kStr) {
            detail::require_utf8_name(key->text);
            charge(kMapEntryCost + key->text.size());
            tree_key = key->text;
          } else if (key->kind == Kind::kInt) {
            charge(kMapEntryCost);
            tree_key = key->integer;
          } else {
            throw Error(ErrorCode::kUnsupported, "dict key of a kind other than string or integer");
          }
          path_.push_back(tree_key);
          Tree value = convert(object->items[i + 1], depth + 1);
          path_.pop_back();
          map.set(std::move(tree_key), std::move(value));
        }
        return map;
      }
    }
    throw Error(ErrorCode::kCorrupt, "unknown value");
  }

  uint64_t budget_;
  const std::function<Tensor(uint32_t)>& tensor_of_;
  std::vector<Key> path_;
  std::unordered_map<const PickleValue*, Tree> shared_;
};

// Where a storage's bytes are, for one file.
struct StorageBytes {
  Buffer bytes;             // exactly the storage's declared bytes
  uint64_t file_offset = 0; // of the first byte (0 if not mapped)
  std::string checksum;     // the record's CRC-32 (zip)
};

// The values of a lazy conjugate / negative view, in heap memory: conj
// negates the imaginary parts (a no-op on real dtypes), neg every value.
Tensor resolve_bits(const Tensor& view, const TensorRef& ref) {
  Tensor out = view.copy();
  std::span<std::byte> bytes = out.mutable_bytes();
  const size_t element_size = dtype_size(ref.dtype);
  const bool complex = ref.dtype == DType::kComplex64 || ref.dtype == DType::kComplex128;
  const bool floating = complex || ref.dtype == DType::kFloat16 || ref.dtype == DType::kBFloat16 ||
                        ref.dtype == DType::kFloat32 || ref.dtype == DType::kFloat64 ||
                        ref.dtype == DType::kFloat8E4M3FN || ref.dtype == DType::kFloat8E5M2;
  const bool fnuz = ref.dtype == DType::kFloat8E4M3FNUZ || ref.dtype == DType::kFloat8E5M2FNUZ;
  if (ref.neg && (ref.dtype == DType::kFloat8E8M0FNU || ref.dtype == DType::kFloat4E2M1FNx2)) {
    throw Error(ErrorCode::kUnsupported, "negative view of a " + std::string(dtype_name(ref.dtype)) + " tensor");
  }
  if (fnuz) {
    // No -0: 0x80 is NaN, so zero keeps its bits; every other value flips its sign.
    if (ref.neg) {
      for (std::byte& b : bytes) {
        if (b != std::byte{0} && b != std::byte{0x80}) b ^= std::byte{0x80};
      }
    }
    return out;
  }
  if (!floating && ref.neg) {
    // Integers: two's complement negation, little-endian.
    if (ref.dtype == DType::kBool) throw Error(ErrorCode::kUnsupported, "negative view of a bool tensor");
    for (size_t at = 0; at < bytes.size(); at += element_size) {
      unsigned carry = 1;
      for (size_t k = 0; k < element_size; ++k) {
        const unsigned value = (~static_cast<unsigned>(bytes[at + k]) & 0xFFu) + carry;
        bytes[at + k] = static_cast<std::byte>(value & 0xFF);
        carry = value >> 8;
      }
    }
    return out;
  }
  // Floats: flip sign bits (the top bit of each little-endian component).
  const size_t component = complex ? element_size / 2 : element_size;
  for (size_t at = 0; at < bytes.size(); at += element_size) {
    if (ref.neg) bytes[at + component - 1] ^= std::byte{0x80};
    if (complex && ref.neg) bytes[at + element_size - 1] ^= std::byte{0x80};
    if (complex && ref.conj) bytes[at + element_size - 1] ^= std::byte{0x80};
  }
  return out;
}

// Shared by both layouts: resolves TensorRefs against storages.
class TensorMaker {
 public:
  TensorMaker(const Pickle& pickle, bool big_endian, std::function<StorageBytes(uint32_t)> load)
      : pickle_(pickle), big_endian_(big_endian), load_(std::move(load)),
        storages_(pickle.storages.size()), tensors_(pickle.tensors.size()) {}

  Tensor operator()(uint32_t index) {
    std::optional<Tensor>& cached = tensors_[index];
    if (!cached) cached = make(pickle_.tensors[index]);
    return *cached;
  }

  // File offset and checksum of a made tensor's storage.
  const StorageBytes& storage_of(uint32_t tensor) const { return *storages_[pickle_.tensors[tensor].storage]; }

 private:
  Tensor make(const TensorRef& ref) {
    const StorageRef& storage_ref = pickle_.storages[ref.storage];
    std::optional<StorageBytes>& storage = storages_[ref.storage];
    const size_t element_size = dtype_size(ref.dtype);
    if (!storage) {
      StorageBytes loaded = load_(ref.storage);
      if (big_endian_) {
        const bool complex = ref.dtype == DType::kComplex64 || ref.dtype == DType::kComplex128;
        const size_t unit = complex ? element_size / 2 : element_size;
        if (unit > 1) loaded.bytes = swapped(loaded.bytes, unit);
      }
      storage = std::move(loaded);
    }
    Buffer buffer;
    if (detail::is_contiguous(ref.shape, ref.strides)) {
      // The common case, without copying the shape into a layout: the
      // elements [offset, offset + numel) must lie inside the storage.
      uint64_t numel = 0;
      try {
        numel = checked_numel(ref.shape, element_size);
      } catch (const Error& error) {
        throw Error(ErrorCode::kCorrupt, error.message() + " (storage " + detail::quoted(storage_ref.key) + ")");
      }
      const uint64_t storage_elements = storage->bytes.size() / element_size;
      if (numel != 0 && (ref.offset > storage_elements || numel > storage_elements - ref.offset)) {
        throw Error(ErrorCode::kCorrupt, "tensor view (offset " + std::to_string(ref.offset) + ", " +
                                             std::to_string(numel) + " elements) reaches past its storage of " +
                                             std::to_string(storage_elements) + " elements (storage " +
                                             detail::quoted(storage_ref.key) + ", " + std::string(dtype_name(ref.dtype)) + ")");
      }
      if (numel != 0) buffer = storage->bytes.slice(ref.offset * element_size, numel * element_size);
    } else {
      detail::StridedLayout layout{.base = storage->bytes,
                                   .element_size = element_size,
                                   .offset = ref.offset,
                                   .shape = ref.shape,
                                   .strides = ref.strides};
      try {
        detail::checked_view_extent(layout);
      } catch (Error& error) {
        throw Error(error.code(), error.message() + " (storage " + detail::quoted(storage_ref.key) + ", " +
                                      std::string(dtype_name(ref.dtype)) + ")");
      }
      buffer = detail::view_buffer(std::move(layout));
    }
    Tensor tensor(ref.dtype, ref.shape, std::move(buffer));
    if (ref.conj || ref.neg) return resolve_bits(tensor, ref);
    return tensor;
  }

  const Pickle& pickle_;
  bool big_endian_;
  std::function<StorageBytes(uint32_t)> load_;
  std::vector<std::optional<StorageBytes>> storages_;
  std::vector<std::optional<Tensor>> tensors_;
};

// The declared byte size of a storage.
uint64_t storage_nbytes(const StorageRef& storage) {
  const uint64_t element_size = storage.dtype ? dtype_size(*storage.dtype) : 1;
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(storage.numel, element_size, &nbytes)) {
    throw Error(ErrorCode::kCorrupt, "storage " + detail::quoted(storage.key) + " declares an impossible size");
  }
  return nbytes;
}

// The tree a pickle describes, with every tensor made by `maker`, and its
// entries in tree order: name, dtype, shape, size, the file offset of a
// contiguous tensor's first byte (where its storage lies in the file as is)
// and the storage record's checksum.
Contents contents_of(const Pickle& pickle, size_t pickle_size, TensorMaker& maker, ChecksumKind checksum) {
  std::vector<uint32_t> order;  // tensor index of each leaf, in tree order
  auto tensor_of = [&](uint32_t index) {
    order.push_back(index);
    return maker(index);
  };
  Tree tree = pickle_to_tree(pickle, pickle_size, tensor_of);
  Contents contents;
  contents.format = "torch";
  contents.checksum = checksum;
  std::vector<Tree::Leaf> leaves = tree.tensor_leaves();
  contents.entries.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size() && i < order.size(); ++i) {
    const Tensor& tensor = leaves[i].value->tensor();
    const TensorRef& ref = pickle.tensors[order[i]];
    const StorageBytes& storage = maker.storage_of(order[i]);
    const bool contiguous = detail::is_contiguous(ref.shape, ref.strides);
    contents.entries.push_back({.name = std::move(leaves[i].name),
                                .dtype = tensor.dtype(),
                                .shape = tensor.shape(),
                                .offset = contiguous && storage.file_offset != 0 && tensor.nbytes() != 0
                                              ? storage.file_offset + ref.offset * dtype_size(ref.dtype)
                                              : 0,
                                .nbytes = tensor.nbytes(),
                                .checksum = storage.checksum});
  }
  contents.tree = std::move(tree);
  return contents;
}

std::string record_text(const zip_detail::ZipReader& zip, const zip_detail::ZipEntry& entry) {
  const Buffer bytes = zip.read(entry);
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

// ckpt's metadata record: a pickled dict of strings.
Metadata read_metadata(const zip_detail::ZipReader& zip, const zip_detail::ZipEntry& record) {
  const Buffer bytes = zip.read(record);
  Metadata metadata;
  try {
    const Pickle pickle = unpickle(bytes.bytes());
    if (pickle.root->kind != Kind::kDict) throw Error(ErrorCode::kCorrupt, "metadata is not a dict");
    for (size_t i = 0; i + 1 < pickle.root->items.size(); i += 2) {
      const PickleValue* key = pickle.root->items[i];
      const PickleValue* value = pickle.root->items[i + 1];
      if (key->kind != Kind::kStr || value->kind != Kind::kStr) {
        throw Error(ErrorCode::kCorrupt, "metadata holds a value that is not a string");
      }
      metadata[key->text] = value->text;
    }
  } catch (Error& error) {
    throw error.with_entry(record.name);
  }
  return metadata;
}

Contents read_zip(std::shared_ptr<const detail::MappedFile> file, const LoadOptions& options,
                  const zip_detail::ZipOpenOptions& open_options = {}) {
  zip_detail::ZipReader zip(file, open_options);
  const zip_detail::ZipReadOptions read_options{.verify_crc = options.verify};
  if (zip.entries().empty()) throw Error(ErrorCode::kCorrupt, "zip archive has no records");
  const std::string& first = zip.entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos) {
    throw Error(ErrorCode::kCorrupt, "first record is not inside the archive's folder", {.entry = first});
  }
  const std::string prefix = first.substr(0, slash + 1);

  const std::string pickle_name = prefix + std::string(kPickleRecord);
  const zip_detail::ZipEntry* pickle_entry = zip.find(pickle_name);
  if (pickle_entry == nullptr) throw Error(ErrorCode::kCorrupt, "no data.pkl record", {.entry = pickle_name});

  bool big_endian = false;
  if (const zip_detail::ZipEntry* byteorder = zip.find(prefix + std::string(kByteOrderRecord))) {
    const std::string order = record_text(zip, *byteorder);
    if (order == kBigEndian) {
      big_endian = true;
    } else if (order != kLittleEndian) {
      throw Error(ErrorCode::kCorrupt, "byteorder is " + detail::quoted(order, {.max_bytes = 16}) + ", not 'little' or 'big'",
                  {.entry = byteorder->name});
    }
  }
  if (options.verify) {
    for (const zip_detail::ZipEntry& entry : zip.entries()) zip.read(entry, read_options);
  }

  const Buffer pickle_bytes = zip.read(*pickle_entry, read_options);
  Pickle pickle;
  try {
    pickle = unpickle(pickle_bytes.bytes(),
                      {.file_offset = pickle_entry->method == zip_detail::kMethodStored ? pickle_entry->data_offset : 0});
  } catch (Error& error) {
    throw error.with_entry(pickle_entry->name);
  }

  auto load = [&](uint32_t index) {
    const StorageRef& ref = pickle.storages[index];
    const std::string name = prefix + std::string(kStorageFolder) + ref.key;
    const zip_detail::ZipEntry* entry = zip.find(name);
    if (entry == nullptr) throw Error(ErrorCode::kCorrupt, "storage record is missing", {.entry = name});
    const uint64_t nbytes = storage_nbytes(ref);
    if (entry->uncompressed_size < nbytes) {
      throw Error(ErrorCode::kCorrupt,
                  "record holds " + std::to_string(entry->uncompressed_size) + " bytes but its storage declares " +
                      std::to_string(nbytes),
                  {.entry = name});
    }
    Buffer bytes = zip.read(*entry, {});
    const bool stored = entry->method == zip_detail::kMethodStored;
    return StorageBytes{.bytes = bytes.slice(0, nbytes),
                        .file_offset = stored ? entry->data_offset : 0,
                        .checksum = detail::hex8(entry->crc32)};
  };
  TensorMaker maker(pickle, big_endian, load);
  Contents contents = contents_of(pickle, pickle_bytes.size(), maker, ChecksumKind::kCrc32);
  if (const zip_detail::ZipEntry* record = zip.find(prefix + std::string(kMetadataRecord))) {
    contents.metadata = read_metadata(zip, *record);
  }
  return contents;
}

// Legacy: magic, protocol, sys_info, the object, the storage keys, then each
// storage as its element count (8 bytes) and its raw bytes.
Contents read_legacy(std::shared_ptr<const detail::MappedFile> file, const LoadOptions& options) {
  const std::span<const std::byte> all = file->bytes();
  uint64_t position = 0;
  auto next_pickle = [&](bool legacy, const char* what) {
    try {
      Pickle pickle = unpickle(all.subspan(position), {.file_offset = position, .legacy = legacy});
      position += pickle.end;
      return pickle;
    } catch (Error& error) {
      throw error.with_entry(what);
    }
  };
  const Pickle magic = next_pickle(false, "magic number");
  if (magic.root->kind != Kind::kBigInt ||
      std::memcmp(magic.root->text.data(), kLegacyMagic + 4, std::min<size_t>(magic.root->text.size(), 10)) != 0 ||
      magic.root->text.size() != 10) {
    throw Error(ErrorCode::kCorrupt, "not a legacy torch file: wrong magic number", {.offset = 0});
  }
  const Pickle protocol = next_pickle(false, "protocol version");
  if (protocol.root->kind != Kind::kInt || protocol.root->integer != kLegacyProtocolVersion) {
    throw Error(ErrorCode::kUnsupported, "legacy torch protocol version is not 1001");
  }
  const Pickle sys_info = next_pickle(false, "sys_info");
  bool big_endian = false;
  if (sys_info.root->kind == Kind::kDict) {
    for (size_t i = 0; i + 1 < sys_info.root->items.size(); i += 2) {
      const PickleValue* key = sys_info.root->items[i];
      const PickleValue* value = sys_info.root->items[i + 1];
      if (key->kind == Kind::kStr && key->text == "little_endian" && value->kind == Kind::kBool) big_endian = !value->flag;
    }
  }
  const uint64_t object_start = position;
  Pickle pickle = next_pickle(true, "object");
  const uint64_t object_size = position - object_start;
  const Pickle keys = next_pickle(false, "storage keys");
  if (keys.root->kind != Kind::kList) throw Error(ErrorCode::kCorrupt, "storage key list is not a list");

  std::vector<StorageBytes> storages(pickle.storages.size());
  std::vector<bool> seen(pickle.storages.size(), false);
  for (const PickleValue* key : keys.root->items) {
    if (key->kind != Kind::kStr) throw Error(ErrorCode::kCorrupt, "storage key is not a string");
    const auto found = pickle.storage_index.find(key->text);
    if (found == pickle.storage_index.end()) {
      throw Error(ErrorCode::kCorrupt, "storage " + detail::quoted(key->text) + " is listed but never used", {.offset = position});
    }
    const StorageRef& ref = pickle.storages[found->second];
    if (all.size() - position < 8) {
      throw Error(ErrorCode::kCorrupt, "file ends before storage " + detail::quoted(ref.key), {.offset = position});
    }
    uint64_t count = 0;  // in the file's byte order
    for (size_t k = 0; k < 8; ++k) {
      count = count << 8 | static_cast<uint8_t>(all[position + (big_endian ? k : 7 - k)]);
    }
    const uint64_t element_size = ref.dtype ? dtype_size(*ref.dtype) : 1;
    uint64_t nbytes = 0;
    if (count != ref.numel || __builtin_mul_overflow(count, element_size, &nbytes) ||
        nbytes > all.size() - position - 8) {
      throw Error(ErrorCode::kCorrupt,
                  "storage " + detail::quoted(ref.key) + " holds " + std::to_string(count) + " elements where " +
                      std::to_string(ref.numel) + " are declared, or runs past the end of the file",
                  {.offset = position});
    }
    // A byte-swapped storage is not the file's bytes: no offset to report.
    storages[found->second] = {.bytes = file->slice(position + 8, nbytes), .file_offset = big_endian ? 0 : position + 8};
    seen[found->second] = true;
    position += 8 + nbytes;
  }
  if (options.verify && position != all.size()) {
    throw Error(ErrorCode::kCorrupt, std::to_string(all.size() - position) + " bytes after the last storage",
                {.offset = position});
  }
  auto load = [&](uint32_t index) {
    if (!seen[index]) throw Error(ErrorCode::kCorrupt, "storage " + detail::quoted(pickle.storages[index].key) + " has no data");
    return storages[index];
  };
  TensorMaker maker(pickle, big_endian, load);
  return contents_of(pickle, object_size, maker, ChecksumKind::kNone);
}

}  // namespace

bool detect_file(std::span<const std::byte> head, uint64_t file_size) {
  if (head.size() >= sizeof(kLegacyMagic) && std::memcmp(head.data(), kLegacyMagic, sizeof(kLegacyMagic)) == 0) {
    return true;
  }
  if (!zip_detail::detect_zip(head, file_size)) return false;
  const std::string_view first = zip_detail::first_entry_name(head);
  return first.find('/') != std::string_view::npos && !first.ends_with(".npy");
}

Tree pickle_to_tree(const Pickle& pickle, size_t pickle_size, const std::function<Tensor(uint32_t)>& tensor_of) {
  TreeBuilder builder(pickle_size, tensor_of);
  return builder.build(pickle.root);
}

Contents read_file(const std::filesystem::path& path, const LoadOptions& options) {
  std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(path);
  const std::span<const std::byte> head = file->bytes().subspan(0, std::min<size_t>(file->size(), 4096));
  try {
    if (head.size() >= sizeof(kLegacyMagic) && std::memcmp(head.data(), kLegacyMagic, sizeof(kLegacyMagic)) == 0) {
      return read_legacy(file, options);
    }
    return read_zip(file, options);
  } catch (Error& error) {
    throw error.with_path(path);
  }
}

Contents read_embedded(std::shared_ptr<const detail::MappedFile> file, uint64_t offset, uint64_t size,
                       const LoadOptions& options) {
  try {
    return read_zip(file, options, {.window_offset = offset, .window_size = size});
  } catch (Error& error) {
    throw error.with_path(file->path());
  }
}

}  // namespace ckpt::torch_detail
