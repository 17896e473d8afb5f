// Writing .npy files byte for byte as np.save does, and .npz archives of
// stored members laid out like np.savez (byte-identical with extras off;
// with extras on, each member's data is 64-byte aligned by a padding extra
// field, and tied tensors are stored once, the others named in the archive
// comment).

#include "formats/numpy/writer.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ckpt/error.h"
#include "core/text.h"
#include "formats/numpy/layout.h"
#include "formats/numpy/npz_comment.h"
#include "formats/ties.h"
#include "formats/zip/layout.h"
#include "formats/zip/writer.h"
#include "io/atomic_file.h"

namespace ckpt::numpy_detail {
namespace {

using detail::find_ties;
using detail::kNotTied;

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

}  // namespace

std::string_view npy_descr(DType dtype) {
  const DTypeInfo& info = dtype_info(dtype);
  if (info.numpy_descr.empty()) {
    throw Error(ErrorCode::kUnsupported,
                "dtype " + std::string(info.name) + " has no numpy type: plain numpy lacks it, and np.save writes "
                "ml_dtypes arrays as raw void ('<V" + std::to_string(info.size) + "'), which loses the type; "
                "use safetensors for it");
  }
  return info.numpy_descr;
}

std::string format_npy_header(DType dtype, const Shape& shape) {
  std::string dict = "{'descr': '";
  dict += npy_descr(dtype);
  dict += "', 'fortran_order': False, 'shape': ";
  dict += shape_repr(shape);
  dict += ", }";
  if (!shape.empty()) {
    const size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  const size_t text_length = dict.size() + 1;  // with the final newline
  size_t prefix = kPrefixSizeV1;
  size_t padding = kArrayAlign - (prefix + text_length) % kArrayAlign;
  uint8_t major = 1;
  if (text_length + padding > 0xFFFF) {
    prefix = kPrefixSizeV2;
    padding = kArrayAlign - (prefix + text_length) % kArrayAlign;
    major = 2;
  }
  const uint64_t header_length = text_length + padding;
  std::string out(reinterpret_cast<const char*>(kMagic.data()), kMagicSize);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  if (major == 1) {
    zip_detail::append_u16(out, static_cast<uint16_t>(header_length));
  } else {
    zip_detail::append_u32(out, static_cast<uint32_t>(header_length));
  }
  out += dict;
  out.append(padding, ' ');
  out.push_back('\n');
  return out;
}

void write_npy(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) {
  const std::vector<Tree::Leaf> leaves = tree.leaves();
  if (leaves.size() != 1 || !leaves[0].value->is_tensor()) {
    size_t tensors = 0;
    for (const Tree::Leaf& leaf : leaves) tensors += leaf.value->is_tensor() ? 1 : 0;
    throw Error(ErrorCode::kUnsupported,
                "an .npy holds exactly one tensor, and this tree has " + std::to_string(leaves.size()) +
                    " leaves (" + std::to_string(tensors) + " tensors); use .npz or safetensors",
                {.path = path});
  }
  const Tensor& tensor = leaves[0].value->tensor();
  if (tensor.nbytes() != tensor.numel() * dtype_size(tensor.dtype())) {
    throw Error(ErrorCode::kInvalidArgument, "tensor's buffer does not match its dtype and shape",
                {.path = path, .entry = leaves[0].name});
  }
  std::string header;
  try {
    header = format_npy_header(tensor.dtype(), tensor.shape());
  } catch (Error& error) {
    throw error.with_path(path).with_entry(leaves[0].name);
  }
  detail::AtomicFile file(path, {.fsync = options.fsync});
  file.write_at(std::as_bytes(std::span(header)), 0);
  if (!tensor.bytes().empty()) {
    file.write_parallel({{.bytes = tensor.bytes(), .offset = header.size()}}, options.threads);
  }
  file.commit();
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
