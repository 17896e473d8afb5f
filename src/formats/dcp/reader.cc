// Reading DCP directories: `.metadata` parsed (metadata.cc), each item's
// torch.save archive read in place by the torch reader, chunks made the
// pieces of one tensor, the nested tree rebuilt from planner_data.

#include "formats/dcp/reader.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include "ckpt/box.h"
#include "ckpt/error.h"
#include "core/text.h"
#include "formats/dcp/layout.h"
#include "formats/dcp/metadata.h"
#include "formats/torch/reader.h"
#include "io/mapped_file.h"
#include "io/stable_directory.h"

namespace fs = std::filesystem;

namespace ckpt::dcp_detail {
namespace {

[[noreturn]] void corrupt_item(const std::string& message, const std::string& fqn, const fs::path& path = {},
                          std::optional<uint64_t> offset = std::nullopt) {
  throw Error(ErrorCode::kCorrupt, message, {.path = path, .entry = fqn, .offset = offset});
}

// The data files of one checkpoint, each mapped once when first needed.
class DataFiles {
 public:
  explicit DataFiles(fs::path directory) : directory_(std::move(directory)) {}

  // The mapped file of `location`, after checking that the item lies inside it.
  std::shared_ptr<const detail::MappedFile> file_of(const StorageLocation& location, const std::string& fqn) {
    std::shared_ptr<const detail::MappedFile>& file = files_[location.relative_path];
    const fs::path path = directory_ / location.relative_path;
    if (!file) {
      std::error_code error;
      if (!fs::is_regular_file(path, error)) corrupt_item("data file is missing", fqn, path);
      file = detail::MappedFile::open(path);
    }
    if (location.offset > file->size() || location.length > file->size() - location.offset) {
      corrupt_item("item (" + std::to_string(location.length) + " bytes at offset " + std::to_string(location.offset) +
                  ") extends past the end of the file (" + std::to_string(file->size()) + " bytes)",
              fqn, path, location.offset);
    }
    return file;
  }

 private:
  fs::path directory_;
  std::map<std::string, std::shared_ptr<const detail::MappedFile>> files_;
};

// The value torch.save'd at `location`.
Contents read_item(DataFiles& files, const StorageLocation& location, const std::string& fqn,
                   const LoadOptions& options) {
  std::shared_ptr<const detail::MappedFile> file = files.file_of(location, fqn);
  try {
    return torch_detail::read_embedded(file, location.offset, location.length, {.verify = options.verify});
  } catch (Error& error) {
    // Inside the archive, offsets count from its start: say where it is, and
    // give the byte's offset in the file.
    const std::optional<uint64_t> inner = error.context().offset;
    const std::string record = error.context().entry.empty() ? "" : ", record " + detail::quoted(error.context().entry);
    throw Error(error.code(),
                error.message() + " (in the torch.save archive at offset " + std::to_string(location.offset) + record +
                    ")",
                {.path = file->path(), .entry = fqn,
                 .offset = inner ? std::optional<uint64_t>(location.offset + *inner) : std::nullopt});
  }
}

// The chunks read so far by where they lie: two items at one location (tied
// weights, as ckpt's writer stores them) share one tensor.
using ChunkCache = std::map<std::tuple<std::string, uint64_t, uint64_t>, Tensor>;
// The zip CRC-32 of the record a chunk's tensor views, by the tensor's first
// byte in the mapped file (EntryInfo::checksum of a tensor of one chunk).
using RecordCrcs = std::map<const std::byte*, std::string>;

Tensor chunk_tensor(DataFiles& files, const Item& item, const Chunk& chunk, const LoadOptions& options,
                    ChunkCache& cache, RecordCrcs& crcs) {
  const auto key = std::make_tuple(chunk.location.relative_path, chunk.location.offset, chunk.location.length);
  if (auto found = cache.find(key); found != cache.end() && found->second.dtype() == item.dtype &&
                                    found->second.shape() == chunk.sizes) {
    return found->second;
  }
  Contents contents = read_item(files, chunk.location, item.fqn, options);
  const fs::path path = files.file_of(chunk.location, item.fqn)->path();
  if (!contents.tree.is_tensor()) {
    corrupt_item("chunk's archive holds a " + std::string(contents.tree.is_container() ? "container" : "value") +
                ", not a tensor",
            item.fqn, path, chunk.location.offset);
  }
  const Tensor& tensor = contents.tree.tensor();
  if (tensor.dtype() != item.dtype) {
    corrupt_item("chunk's tensor is " + std::string(dtype_name(tensor.dtype())) + " where the metadata declares " +
                std::string(dtype_name(item.dtype)),
            item.fqn, path, chunk.location.offset);
  }
  if (tensor.shape() != chunk.sizes) {
    corrupt_item("chunk's tensor has shape " + shape_text(tensor.shape()) + " where the metadata declares " +
                shape_text(chunk.sizes),
            item.fqn, path, chunk.location.offset);
  }
  cache.emplace(key, tensor);
  if (tensor.buffer().address() != nullptr && contents.entries.size() == 1) {
    crcs.emplace(tensor.buffer().address(), contents.entries.front().checksum);
  }
  return tensor;
}

// The global tensor of `item`: its chunks as the pieces of one deferred
// tensor (ckpt/box.h), so that nothing is read before it is used and a box
// of it reads only the chunks it overlaps.
Tensor assemble(DataFiles& files, const Item& item, const LoadOptions& options, ChunkCache& cache,
                RecordCrcs& crcs) {
  std::vector<Piece> pieces;
  pieces.reserve(item.chunks.size());
  for (const Chunk& chunk : item.chunks) {
    pieces.push_back({.box = {.offsets = chunk.offsets, .sizes = chunk.sizes},
                      .data = chunk_tensor(files, item, chunk, options, cache, crcs)});
  }
  return pieced_tensor(item.dtype, item.size, std::move(pieces), {.entry = item.fqn});
}

// Puts `value` at `path` below `root`, making the maps (string keys) and
// lists (integer keys, padded with None) on the way, as DCP's set_element
// (_traverse.py) rebuilds a nested state dict.
void insert(Tree& root, const KeyPath& path, Tree value, const std::string& fqn) {
  Tree* node = &root;
  for (size_t at = 0; at < path.size(); ++at) {
    const Key& key = path[at];
    const bool last = at + 1 == path.size();
    Tree container = !last && std::holds_alternative<int64_t>(path[at + 1]) ? Tree::list() : Tree::map();
    Tree* child = nullptr;
    if (std::holds_alternative<std::string>(key)) {
      if (!node->is_map()) corrupt_item("item's path goes through a list with a string key", fqn);
      child = node->find(key);
      if (child == nullptr) child = &node->set(key, Tree());
    } else {
      if (!node->is_list()) corrupt_item("item's path goes through a map with an integer key", fqn);
      const auto index = static_cast<size_t>(std::get<int64_t>(key));
      if (index > (1u << 24)) corrupt_item("item's path holds a list position over 2^24", fqn);
      while (node->size() <= index) node->push_back(Tree());
      child = node->find_key_path(KeyPath{key});
    }
    if (last) {
      if (!child->is_none()) corrupt_item("two items have the same path", fqn);
      *child = std::move(value);
      return;
    }
    if (child->is_none()) {
      *child = std::move(container);
    } else if (child->is_map() != container.is_map() || !child->is_container()) {
      corrupt_item("item's path conflicts with another item's", fqn);
    }
    node = child;
  }
}

// Gives the maps that ckpt recorded (metadata.int_keys) their integer keys
// back, deepest first so that the paths of the others still hold strings.
void restore_int_keys(Tree& root, std::vector<IntKeys> maps) {
  std::stable_sort(maps.begin(), maps.end(),
                   [](const IntKeys& a, const IntKeys& b) { return a.map.size() > b.map.size(); });
  for (const IntKeys& map : maps) {
    Tree* node = root.find_key_path(map.map);
    if (node == nullptr || !node->is_map()) continue;  // an item the reader was not asked for
    std::set<std::string> keys;
    for (int64_t key : map.keys) keys.insert(std::to_string(key));
    Tree out = Tree::map();
    out.reserve(node->size());
    for (const TreeEntry& entry : node->entries()) {
      const std::string* text = std::get_if<std::string>(&entry.key);
      if (text != nullptr && keys.contains(*text)) {
        out.set(Key(std::stoll(*text)), entry.value);
      } else {
        out.set(entry.key, entry.value);
      }
    }
    *node = std::move(out);
  }
}

Contents read_once(const fs::path& path, const LoadOptions& options) {
  const fs::path metadata_path = path / kMetadataFile;
  DcpMetadata metadata;
  {
    std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(metadata_path);
    try {
      metadata = parse_metadata(file->bytes());
    } catch (Error& error) {
      throw error.with_path(metadata_path);
    }
  }
  DataFiles files(path);
  ChunkCache cache;
  RecordCrcs crcs;
  Contents contents;
  contents.format = "dcp";
  // Every item is a torch.save archive: its records' zip CRC-32s are what
  // `verify` checks (torch_detail::read_embedded).
  contents.checksum = ChecksumKind::kCrc32;
  contents.tree = Tree::map();
  for (const Item& item : metadata.items) {
    Tree value;
    if (item.tensor) {
      value = Tree(assemble(files, item, options, cache, crcs));
    } else {
      value = std::move(read_item(files, item.location, item.fqn, options).tree);
    }
    insert(contents.tree, item.path, std::move(value), item.fqn);
  }
  restore_int_keys(contents.tree, metadata.int_keys);
  for (Tree::Leaf& leaf : contents.tree.tensor_leaves()) {
    const Tensor& tensor = leaf.value->tensor();
    const auto crc = crcs.find(tensor.buffer().address());  // a tensor of one chunk: its record's
    contents.entries.push_back({.name = std::move(leaf.name),
                                .dtype = tensor.dtype(),
                                .shape = tensor.shape(),
                                .nbytes = tensor.nbytes(),
                                .checksum = tensor.buffer().address() != nullptr && crc != crcs.end() ? crc->second
                                                                                                      : std::string()});
  }
  if (!metadata.version.empty()) contents.metadata["dcp_version"] = metadata.version;
  return contents;
}

}  // namespace

bool detect_checkpoint(const fs::path& path) noexcept {
  try {
    std::error_code error;
    return fs::is_directory(path, error) && fs::is_regular_file(path / kMetadataFile, error);
  } catch (...) {
    return false;
  }
}

Contents read_checkpoint(const fs::path& path, const LoadOptions& options) {
  if (!detect_checkpoint(path)) {
    throw Error(ErrorCode::kUnsupported, "not a PyTorch DCP checkpoint directory (no .metadata)", {.path = path});
  }
  Contents contents;
  detail::read_stable_directory(path, [&] { contents = read_once(path, options); });
  return contents;
}

}  // namespace ckpt::dcp_detail
