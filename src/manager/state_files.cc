#include "manager/state_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <system_error>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/parallel.h"
#include "core/text.h"
#include "io/file_system.h"
#include "io/mapped_file.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;

// Whether the caller can still change the memory behind `tensor`.
bool caller_can_change(const Tensor& tensor) {
  if (!tensor.has_data() || tensor.nbytes() == 0) return false;
  StorageKind kind = tensor.buffer().kind();
  if (tensor.buffer().deferred()) {
    const std::optional<StridedView> view = tensor.strided_view();
    if (!view) return false;  // produced once from file data (Orbax's zstd chunks)
    kind = view->storage.kind();
  }
  return kind == StorageKind::kHeap || kind == StorageKind::kLent;
}

class Digest {
 public:
  // `tensor_sums`: the xxh3 of each tensor's bytes, in the order tree()
  // visits them (tensors_in_order).
  explicit Digest(std::vector<uint64_t> tensor_sums)
      : sum_(ChecksumKind::kXxh3), tensor_sums_(std::move(tensor_sums)) {}

  // The tensors of `node` in the order tree() visits them.
  static void tensors_in_order(const Tree& node, std::vector<const Tensor*>& out) {
    if (node.kind() == Tree::Kind::kTensor) {
      out.push_back(&node.tensor());
    } else if (node.is_map() || node.kind() == Tree::Kind::kList) {
      for (const TreeEntry& entry : node.entries()) tensors_in_order(entry.value, out);
    }
  }

  void bytes(const void* data, size_t size) { sum_.update({static_cast<const std::byte*>(data), size}); }
  template <class T>
  void value(T v) {
    bytes(&v, sizeof v);
  }
  void text(std::string_view s) {
    value<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void tree(const Tree& node) {
    value(static_cast<uint8_t>(node.kind()));
    switch (node.kind()) {
      case Tree::Kind::kNone: break;
      case Tree::Kind::kBool: value<uint8_t>(node.boolean() ? 1 : 0); break;
      case Tree::Kind::kInt: value<int64_t>(node.integer()); break;
      case Tree::Kind::kFloat: value<double>(node.real()); break;
      case Tree::Kind::kString: text(node.string()); break;
      case Tree::Kind::kBytes: text(node.bytes().data); break;
      case Tree::Kind::kTensor: {
        const Tensor& tensor = node.tensor();
        value(static_cast<int32_t>(tensor.dtype()));
        value<uint64_t>(tensor.ndim());
        for (int64_t dim : tensor.shape()) value<int64_t>(dim);
        value<uint64_t>(tensor.nbytes());
        value<uint64_t>(tensor_sums_.at(next_tensor_++));
        break;
      }
      case Tree::Kind::kMap:
      case Tree::Kind::kList:
        value<uint64_t>(node.size());
        for (const TreeEntry& entry : node.entries()) {
          if (node.is_map()) {
            value<uint8_t>(static_cast<uint8_t>(entry.key.index()));
            if (const auto* name = std::get_if<std::string>(&entry.key)) {
              text(*name);
            } else {
              value<int64_t>(std::get<int64_t>(entry.key));
            }
          }
          tree(entry.value);
        }
        break;
    }
  }
  std::string hex() const { return sum_.hex(); }

 private:
  Checksummer sum_;
  std::vector<uint64_t> tensor_sums_;
  size_t next_tensor_ = 0;
};

}  // namespace

std::string state_name(const Format& format) { return part_file_name(format, "state"); }

std::string part_file_name(const Format& format, std::string_view stem) {
  if (format.capabilities().state_file) return std::string(stem);
  const std::vector<std::string_view> extensions = format.extensions();
  return extensions.empty() ? std::string(stem) : std::string(stem) + std::string(extensions.front());
}

void validate_part_name(std::string_view stem) {
  const bool plain = std::all_of(stem.begin(), stem.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (stem.empty() || stem.size() > 100 || !plain) {
    throw Error(ErrorCode::kInvalidArgument,
                "a state part's name must be 1 to 100 letters, digits, '_' or '-': " + quoted(stem));
  }
}

bool file_of_part(std::string_view path, std::string_view file_name) {
  if (!path.starts_with(file_name)) return false;
  if (path.size() == file_name.size()) return true;
  const char next = path[file_name.size()];
  // "NAME/..." below an Orbax part; "NAME.index" of a TF prefix part (a
  // part's file name has a '.' only in a format's extension, which a TF
  // prefix has not).
  return next == '/' || (next == '.' && file_name.find('.') == std::string_view::npos);
}

namespace {

void merge_into(Tree& into, Tree&& from, std::string& name, size_t part,
                const std::vector<std::filesystem::path>& part_paths) {
  for (size_t i = 0; i < from.size(); ++i) {
    const Key key = from.key_at(i);
    const size_t mark = name.size();
    append_name(name, key_to_string(key));
    Tree& value = *from.find(key);
    Tree* existing = into.find(key);
    if (existing == nullptr) {
      into.set(key, std::move(value));
    } else if (existing->is_map() && value.is_map()) {
      merge_into(*existing, std::move(value), name, part, part_paths);
    } else {
      throw Error(ErrorCode::kCorrupt,
                  "two parts of the state hold this entry (" + part_paths[0].filename().string() + "... and " +
                      part_paths[part].filename().string() + ")",
                  {.path = part_paths[part], .entry = name});
    }
    name.resize(mark);
  }
}

}  // namespace

Tree merge_parts(std::vector<Tree> parts, const std::vector<std::filesystem::path>& part_paths) {
  if (parts.empty()) return Tree::map();
  Tree merged = std::move(parts[0]);
  for (size_t part = 1; part < parts.size(); ++part) {
    if (!merged.is_map() || !parts[part].is_map()) {
      throw Error(ErrorCode::kCorrupt, "a part of a state saved in parts is not a map", {.path = part_paths[part]});
    }
    std::string name;
    merge_into(merged, std::move(parts[part]), name, part, part_paths);
  }
  return merged;
}

Snapshot snapshot_state(const Tree& state, Buffer spare) {
  constexpr size_t kAlignment = 64;  // each copy as aligned as Buffer::allocate's blocks
  const auto aligned = [](size_t size) { return (size + kAlignment - 1) / kAlignment * kAlignment; };
  // What the copies need, ties counted once.
  using MemoryKey = std::pair<const std::byte*, size_t>;
  std::set<MemoryKey> counted;
  size_t total = 0;
  state.for_each_tensor_leaf([&](std::string_view, const Tree& leaf) {
    const Tensor& tensor = leaf.tensor();
    if (!caller_can_change(tensor)) return;
    const std::byte* address = tensor.buffer().address();
    if (address != nullptr && !counted.insert({address, tensor.nbytes()}).second) return;
    total += aligned(tensor.nbytes());
  });
  Snapshot snapshot{.state = state, .block = {}};  // containers copied, tensors still viewing the caller's memory
  if (total == 0) return snapshot;
  snapshot.block = spare.size() >= total && spare.writable() ? std::move(spare) : Buffer::allocate(total);
  std::map<MemoryKey, Tensor> copied;  // by the memory they viewed: ties stay tied
  struct Copy {
    Tensor source;
    Buffer target;
  };
  std::vector<Copy> copies;
  size_t offset = 0;
  snapshot.state.for_each_tensor([&](Tensor& tensor) {
    if (!caller_can_change(tensor)) return;
    const std::byte* address = tensor.buffer().address();
    const MemoryKey key{address, tensor.nbytes()};
    if (address != nullptr) {
      const auto found = copied.find(key);
      if (found != copied.end() && found->second.dtype() == tensor.dtype() && found->second.shape() == tensor.shape()) {
        tensor = found->second;
        return;
      }
    }
    Buffer target = snapshot.block.slice(offset, tensor.nbytes());
    offset += aligned(tensor.nbytes());
    copies.push_back({.source = tensor, .target = target});
    tensor = Tensor(tensor.dtype(), tensor.shape(), std::move(target));
    if (address != nullptr) copied.emplace(key, tensor);
  });
  // The copies themselves, in parallel (the caller waits for them): pieces of
  // at most kPiece bytes of contiguous memory; a view that must be gathered
  // (a strided view of lent or heap memory) is one piece.
  constexpr size_t kPiece = size_t{4} << 20;
  struct Piece {
    size_t copy, offset, size;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < copies.size(); ++i) {
    const size_t size = copies[i].source.nbytes();
    if (copies[i].source.buffer().deferred()) {
      pieces.push_back({i, 0, size});
      continue;
    }
    for (size_t at = 0; at < size; at += kPiece) pieces.push_back({i, at, std::min(kPiece, size - at)});
  }
  parallel_for(pieces.size(), 0, [&](size_t index, unsigned) {
    const Piece& piece = pieces[index];
    Copy& copy = copies[piece.copy];
    if (copy.source.buffer().deferred()) {
      copy.source.read_into(copy.target.mutable_bytes());  // gathered
    } else {
      std::memcpy(copy.target.mutable_bytes().data() + piece.offset, copy.source.bytes().data() + piece.offset,
                  piece.size);
    }
  });
  return snapshot;
}

StateDigest state_digest(const Tree& state, unsigned threads) {
  // The tensors' bytes are nearly all of the work: hashed in parallel, one
  // tensor per item (a frozen module's re-save costs this pass, not a write).
  std::vector<const Tensor*> tensors;
  Digest::tensors_in_order(state, tensors);
  std::vector<uint64_t> sums(tensors.size());
  parallel_for(tensors.size(), threads, [&](size_t i, unsigned) {
    sums[i] = tensors[i]->has_data() ? xxh3_64(tensors[i]->bytes()) : 0;
  });
  // tensor_leaves() visits the tensors in the order tensors_in_order() does;
  // a checksum is only named when its leaf is the very tensor hashed.
  auto checksums = std::make_shared<std::map<std::string, std::string>>();
  const std::vector<Tree::Leaf> leaves = state.tensor_leaves();
  for (size_t i = 0; i < leaves.size() && leaves.size() == tensors.size(); ++i) {
    if (&leaves[i].value->tensor() != tensors[i]) {
      checksums->clear();
      break;
    }
    if (tensors[i]->has_data()) checksums->emplace(leaves[i].name, hex_digits(sums[i], 16));
  }
  Digest digest(std::move(sums));
  digest.tree(state);
  return {.hex = digest.hex(), .checksums = std::move(checksums)};
}

std::vector<RecordedFile> record_state_files(const fs::path& step_dir, const std::set<std::string>& known,
                                             std::string_view part, const std::vector<HashedFile>& hashed) {
  std::vector<RecordedFile> files;
  std::vector<std::byte> chunk;
  std::map<std::string, const HashedFile*> hashed_by_path;
  for (const HashedFile& file : hashed) hashed_by_path[file.path.lexically_relative(step_dir).generic_string()] = &file;
  const auto record = [&](const fs::path& path) {
    const std::string relative = path.lexically_relative(step_dir).generic_string();
    if (relative == kStepRecordName || known.contains(relative)) return;
    if (const auto found = hashed_by_path.find(relative); found != hashed_by_path.end()) {
      std::error_code size_error;
      if (fs::file_size(path, size_error) == found->second->size && !size_error) {
        files.push_back({.path = relative, .size = found->second->size, .xxh3 = found->second->xxh3});
        return;
      }
    }
    // Read back with positioned reads, chunk by chunk (the file was just
    // written: from the page cache, faster than faulting in a mapping).
    const std::shared_ptr<const MappedFile> file = MappedFile::open(path);
    Checksummer sum(ChecksumKind::kXxh3);
    chunk.resize(static_cast<size_t>(std::min<uint64_t>(file->size(), uint64_t{4} << 20)));
    for (uint64_t at = 0; at < file->size(); at += chunk.size()) {
      const std::span<std::byte> piece(chunk.data(),
                                       static_cast<size_t>(std::min<uint64_t>(chunk.size(), file->size() - at)));
      file->copy_out(file->bytes().data() + at, piece);
      sum.update(piece);
    }
    files.push_back({.path = relative, .size = file->size(), .xxh3 = sum.hex()});
  };
  // The top-level entries of the part (other parts may still be writing
  // theirs beside them: never listed below their names), then the files
  // below a directory of it.
  std::error_code error;
  for (fs::directory_iterator it(step_dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!part.empty() && !file_of_part(name, part)) continue;
    std::error_code status_error;
    if (it->is_symlink(status_error)) continue;
    if (it->is_regular_file(status_error)) {
      record(it->path());
    } else if (it->is_directory(status_error)) {
      std::error_code inner;
      for (fs::recursive_directory_iterator below(it->path(), inner), stop; !inner && below != stop;
           below.increment(inner)) {
        if (below->is_regular_file(status_error) && !below->is_symlink(status_error)) record(below->path());
      }
      if (inner) throw_io(it->path(), "cannot list the new step directory", inner.value());
    }
  }
  if (error) throw_io(step_dir, "cannot list the new step directory", error.value());
  std::sort(files.begin(), files.end(), [](const RecordedFile& a, const RecordedFile& b) { return a.path < b.path; });
  return files;
}

bool link_state_files(const fs::path& from_dir, const fs::path& to_dir, const std::vector<RecordedFile>& files,
                      bool fsync) {
  const auto undo = [&] {
    std::error_code ignored;
    for (const RecordedFile& file : files) {
      const fs::path relative(file.path);
      fs::remove_all(to_dir / *relative.begin(), ignored);
    }
    return false;
  };
  for (const RecordedFile& file : files) {
    const fs::path from = from_dir / file.path;
    const fs::path to = to_dir / file.path;
    std::error_code error;
    if (fs::file_size(from, error) != file.size || error) return undo();
    fs::create_directories(to.parent_path(), error);
    if (error) throw_io(to, "cannot create a directory of the new step", error.value());
    if (::link(from.c_str(), to.c_str()) == 0) continue;
    const int link_error = errno;
    if (link_error == ENOENT) return undo();
    // EXDEV, EPERM, EMLINK, ENOTSUP...: the file system will not link; copy.
    if (!fs::copy_file(from, to, error) || error) {
      if (error.value() == ENOENT) return undo();
      throw_io(to, "cannot copy the unchanged state file from the previous step", error.value());
    }
    if (fsync) sync_file(to);
  }
  return true;
}

}  // namespace ckpt::detail
