#include "ckpt/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "checkpoint/remote_open.h"
#include "core/parallel.h"
#include "io/mapped_file.h"

namespace ckpt {
namespace {

void require_writable(const Format& format, const std::filesystem::path& path) {
  if (!format.capabilities().write) {
    throw Error(ErrorCode::kUnsupported, "format '" + std::string(format.id()) + "' cannot be written", {.path = path});
  }
}

// Every tensor's dtype must be one the format declares (Format::dtypes()),
// so that no writer meets a dtype it has no code for (TensorFlow has none for
// float8_e8m0fnu, numpy none for bfloat16).
void require_dtypes(const Format& format, const Tree& tree) {
  const std::vector<DType> held = format.dtypes();
  std::vector<bool> holds(all_dtypes().size(), false);
  for (DType dtype : held) holds[static_cast<size_t>(dtype)] = true;
  if (std::all_of(holds.begin(), holds.end(), [](bool h) { return h; })) return;
  for (const Tree::Leaf& leaf : tree.tensor_leaves()) {
    const DType dtype = leaf.value->tensor().dtype();
    if (!holds[static_cast<size_t>(dtype)]) {
      throw Error(ErrorCode::kUnsupported,
                  "format '" + std::string(format.id()) + "' cannot hold dtype " + std::string(dtype_name(dtype)),
                  {.entry = leaf.name});
    }
  }
}

// LoadOptions::boxes: the leaf `name` of `tree` replaced by its `box`.
void cut_box(Tree& tree, const std::string& name, const Box& box) {
  // The loaded tree is this function's caller's own: find_path's node may
  // be changed in place.
  Tree* leaf = const_cast<Tree*>(tree.find_path(name));
  if (leaf == nullptr || leaf->kind() != Tree::Kind::kTensor) {
    throw Error(ErrorCode::kNotFound, leaf == nullptr ? "a box was asked for an entry the checkpoint does not hold"
                                                      : "a box was asked for an entry that is not a tensor",
                {.entry = name});
  }
  const Tensor& tensor = leaf->tensor();
  check_box(box, tensor.shape(), {.entry = name});
  *leaf = Tree(read_box(tensor, box));
}

// Read in pieces of this size, spread over the threads.
constexpr size_t kReadChunk = size_t{8} << 20;

}  // namespace

void prefetch(const Tree& tree) {
  std::vector<const Tensor*> tensors;
  for (const Tree::Leaf& leaf : tree.tensor_leaves()) tensors.push_back(&leaf.value->tensor());
  detail::prefetch_remote(tensors);
}

void materialize(Tree& tree, unsigned threads) {
  std::vector<Tensor*> tensors;
  tree.for_each_tensor([&](Tensor& tensor) { tensors.push_back(&tensor); });
  detail::prefetch_remote({tensors.begin(), tensors.end()});  // a lazy remote open's tensors: one pass
  // The span of each mapped storage that its tensors cover.
  struct Block {
    std::shared_ptr<const Storage> storage;
    const std::byte* start = nullptr;
    const std::byte* end = nullptr;
    Buffer heap;
  };
  std::map<const Storage*, Block> blocks;
  for (Tensor* tensor : tensors) {
    const Buffer& buffer = tensor->buffer();
    if (buffer.kind() != StorageKind::kMapped || buffer.empty()) continue;
    Block& block = blocks[buffer.storage().get()];
    const std::byte* start = buffer.address();
    const std::byte* end = start + buffer.size();
    if (block.storage == nullptr) {
      block = {buffer.storage(), start, end, Buffer()};
    } else {
      block.start = std::min(block.start, start);
      block.end = std::max(block.end, end);
    }
  }
  struct Piece {
    Block* block;
    size_t offset;
    size_t size;
  };
  std::vector<Piece> pieces;
  for (auto& [storage, block] : blocks) {
    const auto size = static_cast<size_t>(block.end - block.start);
    block.heap = Buffer::allocate(size);
    for (size_t offset = 0; offset < size; offset += kReadChunk) {
      pieces.push_back({&block, offset, std::min(kReadChunk, size - offset)});
    }
  }
  detail::parallel_for(pieces.size(), threads, [&](size_t i, unsigned) {
    const Piece& piece = pieces[i];
    const Buffer source = Buffer::view(piece.block->storage, {piece.block->start + piece.offset, piece.size});
    source.copy_to(piece.block->heap.mutable_bytes().subspan(piece.offset, piece.size));
  });
  for (Tensor* tensor : tensors) {
    const Buffer& buffer = tensor->buffer();
    if (buffer.kind() == StorageKind::kMapped && !buffer.empty()) {
      const Block& block = blocks.at(buffer.storage().get());
      Buffer heap = block.heap.slice(static_cast<size_t>(buffer.address() - block.start), buffer.size());
      *tensor = Tensor(tensor->dtype(), tensor->shape(), std::move(heap));
    } else if (buffer.deferred()) {
      *tensor = tensor->copy();
    }
  }
}

const Format& save_format(const std::filesystem::path& path, const SaveOptions& options) {
  if (!options.format.empty()) return format_by_id(options.format);
  if (const Format* format = format_for_extension(path)) return *format;
  return format_by_id("safetensors");
}

const Format& detect(const std::filesystem::path& path) {
  if (is_url(path.native())) return detect(fetch(path.native()));
  return naming_file(path, [&]() -> const Format& {
    // Checkpoints that are a prefix or a directory rather than one file.
    for (const Format* format : formats()) {
      if (format->capabilities().read && format->detect_path(path)) return *format;
    }
    const detail::FileHead head = detail::read_head(path);
    // The extension's format first, so that it breaks ties between formats
    // that both accept the bytes.
    const Format* hinted = format_for_extension(path);
    if (hinted && hinted->capabilities().read && hinted->detect(head.head, head.size)) return *hinted;
    for (const Format* format : formats()) {
      if (format->capabilities().read && format->detect(head.head, head.size)) return *format;
    }
    // No format accepts the bytes, but the name says what the file should be:
    // let that format's reader name the defect (a truncated .safetensors is
    // corrupt, not "some unknown format").
    if (hinted && hinted->capabilities().read) return *hinted;
    throw Error(ErrorCode::kUnsupported, "not a checkpoint in any known format (" +
                                             std::to_string(head.size) + " bytes)");
  });
}

Contents open(const std::filesystem::path& path, const LoadOptions& options) {
  if (is_url(path.native())) {
    if (options.remote_lazy && options.lazy) return detail::open_remote(path.native(), options);
    return open(fetch(path.native(), options.fetch), options);
  }
  return naming_file(path, [&] {
    const Format& format = options.format.empty() ? detect(path) : format_by_id(options.format);
    Contents contents = format.read(path, options);
    for (const auto& [name, box] : options.boxes) cut_box(contents.tree, name, box);
    if (!options.lazy) materialize(contents.tree, options.threads);
    return contents;
  });
}

Tree load(const std::filesystem::path& path, const LoadOptions& options) {
  return open(path, options).tree;
}

Contents verify(const std::filesystem::path& path) {
  return open(path, {.verify = true});
}

void save(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) {
  naming_file(path, [&] {
    const Format& format = save_format(path, options);
    require_writable(format, path);
    if (!options.metadata.empty() && !format.capabilities().metadata) {
      throw Error(ErrorCode::kUnsupported,
                  "format '" + std::string(format.id()) + "' has no place for metadata (" +
                      std::to_string(options.metadata.size()) + " entries given)");
    }
    require_dtypes(format, tree);
    format.write(path, tree, options);
  });
}

}  // namespace ckpt
