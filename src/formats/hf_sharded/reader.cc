#include "formats/hf_sharded/reader.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/error.h"
#include "formats/hf_sharded/index.h"
#include "formats/hf_sharded/layout.h"
#include "ckpt/box.h"
#include "formats/safetensors/reader.h"
#include "formats/tree_json.h"
#include "io/file_system.h"
#include "io/mapped_file.h"
#include "io/stable_directory.h"

namespace ckpt::hf_sharded_detail {
namespace fs = std::filesystem;
namespace {

// One shard file as the safetensors reader gave it, its tensors by name.
struct Shard {
  Contents contents;
  std::unordered_map<std::string, Tensor> tensors;
};

std::string read_index_text(const fs::path& path) {
  const auto file = detail::MappedFile::open(path);
  const auto bytes = file->bytes();
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

class DirectoryReader {
 public:
  DirectoryReader(const fs::path& directory, const fs::path& index_path, const LoadOptions& options)
      : directory_(directory), index_path_(index_path), options_(options) {}

  Contents read() {
    const ShardIndex index = parse_index(read_index_text(index_path_), index_path_);
    open_shards(index);
    Contents contents;
    contents.format = "hf_sharded";
    contents.format_version = index.has_record ? static_cast<int>(index.version) : 0;

    // Whole tensors, then sliced ones, by name.
    std::unordered_map<std::string, Tensor> tensors;
    std::vector<std::string> order;
    for (const auto& [name, file] : index.weight_map) {
      const Shard& shard = shards_.at(file);
      const auto found = shard.tensors.find(name);
      if (found == shard.tensors.end()) {
        throw Error(ErrorCode::kCorrupt, "weight_map puts the tensor in '" + file + "', which does not hold it",
                    {.path = index_path_, .entry = name});
      }
      tensors.emplace(name, found->second);
      order.push_back(name);
    }
    for (const SliceRecord& slice : index.slices) {
      tensors.emplace(slice.name, assemble_slice(slice));
      order.push_back(slice.name);
    }

    // The tree: ckpt's skeleton, or the names in order.
    if (index.tree) {
      std::set<std::string> used;
      contents.tree = naming_file(index_path_, [&] {
        return detail::tree_from_json(*index.tree, [&](std::string_view name) {
          const auto found = tensors.find(std::string(name));
          if (found == tensors.end() || !used.insert(std::string(name)).second) {
            throw Error(ErrorCode::kCorrupt,
                        found == tensors.end() ? "the tree names a tensor that the index does not list"
                                               : "the tree names a tensor twice",
                        {.entry = std::string(name)});
          }
          return found->second;
        });
      });
      if (used.size() != tensors.size()) {
        for (const std::string& name : order) {
          if (!used.count(name)) {
            throw Error(ErrorCode::kCorrupt, "the index lists a tensor that the tree leaves out",
                        {.path = index_path_, .entry = name});
          }
        }
      }
    } else {
      contents.tree = Tree::map();
      contents.tree.reserve(order.size());
      for (const std::string& name : order) contents.tree.set(name, tensors.at(name));
    }

    fill_entries(index, contents);
    if (options_.verify && index.total_size && *index.total_size != stored_bytes_) {
      throw Error(ErrorCode::kCorrupt,
                  "total_size says " + std::to_string(*index.total_size) + " bytes, the shards store " +
                      std::to_string(stored_bytes_),
                  {.path = index_path_, .entry = std::string(kMetadataKey) + "." + std::string(kTotalSizeKey)});
    }
    if (!shards_.empty()) contents.metadata = shards_.begin()->second.contents.metadata;
    for (const std::string& key : index.added_metadata) contents.metadata.erase(key);
    for (const auto& [key, value] : index.metadata) contents.metadata[key] = value;
    return contents;
  }

 private:
  // Reads every shard that the index names (each once), in name order.
  void open_shards(const ShardIndex& index) {
    std::map<std::string, std::string> first_entry;  // file -> an entry naming it, for errors
    for (const auto& [name, file] : index.weight_map) {
      first_entry.emplace(file, std::string(kWeightMapKey) + "." + name);
    }
    for (const SliceRecord& slice : index.slices) {
      for (const PieceRecord& piece : slice.pieces) {
        first_entry.emplace(piece.file, std::string(kCkptKey) + "." + std::string(kSlicesField) + "." + slice.name);
      }
    }
    for (const auto& [file, entry] : first_entry) {
      const fs::path shard_path = directory_ / file;
      if (!detail::regular_file_exists(shard_path)) {
        throw Error(ErrorCode::kCorrupt, "the index names the shard '" + file + "', which is missing",
                    {.path = index_path_, .entry = entry});
      }
      Shard shard;
      shard.contents = naming_file(shard_path, [&] { return safetensors_detail::read_file(shard_path, options_); });
      for (const Tree::Leaf& leaf : shard.contents.tree.tensor_leaves()) {
        shard.tensors.emplace(leaf.name, leaf.value->tensor());
      }
      for (const EntryInfo& stored : shard.contents.entries) stored_bytes_ += stored.nbytes;
      shards_.emplace(file, std::move(shard));
    }
  }

  // The sliced tensor, deferred: its pieces map their shards, nothing is read.
  Tensor assemble_slice(const SliceRecord& slice) const {
    const std::string entry = std::string(kCkptKey) + "." + std::string(kSlicesField) + "." + slice.name;
    std::vector<Piece> pieces;
    pieces.reserve(slice.pieces.size());
    for (const PieceRecord& piece : slice.pieces) {
      const Shard& shard = shards_.at(piece.file);
      const auto found = shard.tensors.find(piece.key);
      if (found == shard.tensors.end()) {
        throw Error(ErrorCode::kCorrupt, "the piece '" + piece.key + "' is not in '" + piece.file + "'",
                    {.path = index_path_, .entry = entry});
      }
      pieces.push_back(Piece{.box = piece.box, .data = found->second});
    }
    return pieced_tensor(slice.dtype, slice.shape, std::move(pieces), {.path = index_path_, .entry = entry});
  }

  void fill_entries(const ShardIndex& index, Contents& contents) const {
    std::map<std::string, std::set<std::string>> listed;  // file -> its whole tensors
    for (const auto& [name, file] : index.weight_map) listed[file].insert(name);
    std::optional<ChecksumKind> kind;
    for (const auto& [file, shard] : shards_) {
      const auto names = listed.find(file);
      for (const EntryInfo& stored : shard.contents.entries) {
        if (names == listed.end() || !names->second.count(stored.name)) continue;
        contents.entries.push_back(stored);
      }
      if (!kind) kind = shard.contents.checksum;
      if (*kind != shard.contents.checksum) kind = ChecksumKind::kNone;
    }
    for (const SliceRecord& slice : index.slices) {
      uint64_t numel = 1;
      for (int64_t dimension : slice.shape) numel *= static_cast<uint64_t>(dimension);
      contents.entries.push_back(EntryInfo{slice.name, slice.dtype, slice.shape, 0, numel * dtype_size(slice.dtype)});
    }
    contents.checksum = kind.value_or(ChecksumKind::kNone);
  }

  fs::path directory_;
  fs::path index_path_;
  const LoadOptions& options_;
  std::map<std::string, Shard> shards_;  // by file name
  uint64_t stored_bytes_ = 0;
};

// The index files of `path`: those named "*.safetensors.index.json".
std::vector<fs::path> index_candidates(const fs::path& path) {
  std::vector<fs::path> found;
  std::error_code error;
  for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() > kIndexSuffix.size() && name.ends_with(kIndexSuffix) && detail::regular_file_exists(it->path())) {
      found.push_back(it->path());
    }
  }
  return found;
}

}  // namespace

std::optional<fs::path> find_index(const fs::path& path) noexcept {
  try {
    std::error_code error;
    const std::string name = path.filename().string();
    if (name.size() > kIndexSuffix.size() && name.ends_with(kIndexSuffix) && detail::regular_file_exists(path)) {
      return path;  // the index itself
    }
    if (!fs::is_directory(path, error)) return std::nullopt;
    if (detail::regular_file_exists(path / kIndexFile)) return path / kIndexFile;
    const std::vector<fs::path> candidates = index_candidates(path);
    if (candidates.size() == 1) return candidates.front();
  } catch (...) {
  }
  return std::nullopt;
}

bool detect_directory(const fs::path& path) noexcept { return find_index(path).has_value(); }

Contents read_directory(const fs::path& path, const LoadOptions& options) {
  const std::optional<fs::path> index = find_index(path);
  if (!index) {
    std::error_code error;
    if (fs::is_directory(path, error) && index_candidates(path).size() > 1) {
      throw Error(ErrorCode::kInvalidArgument,
                  "the directory holds several *.safetensors.index.json and no " + std::string(kIndexFile),
                  {.path = path});
    }
    throw Error(ErrorCode::kUnsupported,
                "not a Hugging Face sharded checkpoint (no " + std::string(kIndexFile) + ")", {.path = path});
  }
  // A save may replace the directory while its files are opened one by one.
  const fs::path directory = *index == path ? index->parent_path() : path;
  Contents contents;
  detail::read_stable_directory(directory.empty() ? fs::path(".") : directory,
                                [&] { contents = DirectoryReader(directory, *index, options).read(); });
  return contents;
}

}  // namespace ckpt::hf_sharded_detail
