// .npz: a zip archive whose members are "<key>.npy" files. Read: stored
// members are views of the mapping, deflated ones are inflated. Write: stored
// members, laid out like np.savez (byte-identical with extras off; with
// extras on, each member's data is 64-byte aligned by a padding extra field,
// and tied tensors are stored once, the others named in the archive comment).


#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>

#include "ckpt/error.h"
#include "core/text.h"
#include "formats/numpy/npy_layout.h"
#include "formats/ties.h"
#include "formats/zip/zip_reader.h"
#include "formats/zip/zip_writer.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace ckpt::numpy_detail {
namespace {

using detail::find_ties;
using detail::kNotTied;

constexpr std::string_view kMemberSuffix = ".npy";
// Python's zipfile uses zip64 for sizes and offsets above 2^31 - 1 (its
// ZIP64_LIMIT); np.savez forces a zip64 extra field into every local header.
constexpr uint64_t kPythonZip64Limit = (uint64_t{1} << 31) - 1;
// ckpt's own npz files align every member's data (and so, with the .npy
// header a multiple of 64, every array) to this.
constexpr uint32_t kMemberAlignment = 64;
// Every leaf must be a tensor with a name that can be a member's.
void check_leaf(const std::filesystem::path& path, const Tree::Leaf& leaf) {
  if (!leaf.value->is_tensor()) {
    throw Error(ErrorCode::kUnsupported,
                "npz holds only tensors, and this leaf is a " + std::string(tree_kind_name(leaf.value->kind())) +
                    " (save to safetensors to keep non-tensor leaves)",
                {.path = path, .entry = leaf.name});
  }
  if (leaf.name.find('\0') != std::string::npos) {
    throw Error(ErrorCode::kUnsupported, "a tensor name with a NUL byte cannot be an npz key",
                {.path = path, .entry = leaf.name});
  }
  // Non-ASCII names get zip's UTF-8 flag, which readers hold to; and an
  // alias's name goes into the comment's JSON.
  if (!detail::valid_utf8(leaf.name)) {
    throw Error(ErrorCode::kUnsupported, "a tensor name that is not valid UTF-8 cannot be an npz key",
                {.path = path, .entry = leaf.name});
  }
  const Tensor& tensor = leaf.value->tensor();
  if (tensor.nbytes() != tensor.numel() * dtype_size(tensor.dtype())) {
    throw Error(ErrorCode::kInvalidArgument, "tensor's buffer does not match its dtype and shape",
                {.path = path, .entry = leaf.name});
  }
}

// Adds the comment's aliases to `contents.tree`, after the members: each a
// Tensor over its stored member's Buffer.
void add_aliases(const zip_detail::ZipReader& zip, Contents& contents) {
  std::unordered_map<std::string_view, size_t> members;
  members.reserve(contents.entries.size());
  for (size_t i = 0; i < contents.entries.size(); ++i) members.emplace(contents.entries[i].name, i);
  const std::optional<std::vector<NpzAlias>> aliases =
      read_npz_comment(zip.comment(), zip.path(), zip.comment_offset(), members);
  if (!aliases) return;
  contents.format_version = static_cast<int>(kNpzCommentVersion);
  for (const NpzAlias& alias : *aliases) {
    const Tensor stored = contents.tree.find(contents.entries[alias.stored].name)->tensor();
    contents.tree.set(alias.name, Tree(stored));
  }
}

}  // namespace

Contents read_npz(const std::filesystem::path& path, const LoadOptions& options) {
  std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(path);
  const zip_detail::ZipReader zip(file);
  Contents contents;
  contents.format = "npz";
  contents.tree = Tree::map();
  contents.entries.reserve(zip.entries().size());
  for (const zip_detail::ZipEntry& member : zip.entries()) {
    const std::string_view name = member.name;
    if (name.size() < kMemberSuffix.size() || !name.ends_with(kMemberSuffix)) {
      throw Error(ErrorCode::kUnsupported,
                  "member is not an .npy file (an .npz holds only \"<key>.npy\" members)",
                  {.path = path, .entry = member.name, .offset = member.local_header_offset});
    }
    std::string key(name.substr(0, name.size() - kMemberSuffix.size()));
    const bool stored = member.method == zip_detail::kMethodStored;
    const NpyLocation where{
        .path = path,
        .entry = member.name,
        .file_offset = stored ? std::optional<uint64_t>(member.data_offset) : std::nullopt,
    };
    const Buffer npy = zip.read(member, {.verify_crc = options.verify});
    const NpyHeader header = parse_npy_header(npy.bytes(), where);
    Tensor tensor = npy_tensor(header, npy, where);
    contents.entries.push_back({
        .name = key,
        .dtype = tensor.dtype(),
        .shape = tensor.shape(),
        .offset = stored ? member.data_offset + header.data_offset : 0,
        .nbytes = tensor.nbytes(),
    });
    contents.tree.set(std::move(key), Tree(std::move(tensor)));
  }
  add_aliases(zip, contents);
  return contents;
}

void write_npz(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) {
  const std::vector<Tree::Leaf> leaves = tree.leaves();
  for (const Tree::Leaf& leaf : leaves) check_leaf(path, leaf);
  // With extras, a tie is an alias in the comment while the comment has room.
  std::vector<size_t> tied_to = options.extras ? find_ties(leaves) : std::vector<size_t>(leaves.size(), kNotTied);
  NpzCommentBuilder comment;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (tied_to[i] != kNotTied && !comment.add(leaves[i].name, leaves[tied_to[i]].name)) tied_to[i] = kNotTied;
  }
  zip_detail::ZipWriter zip({
      .alignment = options.extras ? kMemberAlignment : 1,
      .zip64_limit = kPythonZip64Limit,
      .force_zip64_local = true,
      .threads = options.threads,
      .comment = comment.finish(),
  });
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (tied_to[i] != kNotTied) continue;
    const Tree::Leaf& leaf = leaves[i];
    const Tensor& tensor = leaf.value->tensor();
    std::string header;
    try {
      header = format_npy_header(tensor.dtype(), tensor.shape());
    } catch (Error& error) {
      throw error.with_path(path).with_entry(leaf.name);
    }
    zip.add(leaf.name + std::string(kMemberSuffix), std::move(header), tensor.buffer());
  }
  detail::AtomicFile file(path, {.fsync = options.fsync});
  zip.write(file);
  file.commit();
}

}  // namespace ckpt::numpy_detail
