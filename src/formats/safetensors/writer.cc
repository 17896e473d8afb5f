#include "formats/safetensors/writer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/json_writer.h"
#include "core/parallel.h"
#include "core/text.h"
#include "formats/safetensors/layout.h"
#include "formats/ties.h"
#include "formats/tree_json.h"
#include "io/atomic_file.h"

namespace ckpt::safetensors_detail {
namespace {

using detail::find_ties;
using detail::kNotTied;

// One tensor as it will be laid out in the file.
struct PlannedTensor {
  const std::string* name;  // the leaf's unique dotted name
  const Tensor* tensor;
  size_t rank;              // index into kReferenceDTypes
  bool complex_pairs;       // complex128 stored as F64 with a trailing 2
  bool float4_pairs = false;  // float4_e2m1fn_x2 stored as F4: last dimension doubled
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A tensor leaf tied to an earlier one: not stored, named in "aliases".
struct AliasedTensor {
  const std::string* name;    // the alias: the leaf's unique dotted name
  const std::string* stored;  // the first leaf in tree order with its bytes
};

struct Layout {
  std::vector<PlannedTensor> stored;   // file order
  std::vector<AliasedTensor> aliases;  // tree order
};

[[noreturn]] void unsupported(std::string message, std::string_view entry = {}) {
  throw Error(ErrorCode::kUnsupported, std::move(message), {.entry = std::string(entry)});
}


// JSON string escaping without the quotes; escaping works per character, so
// escaping pieces one by one gives the escape of their concatenation.
std::string escaped(std::string_view text) {
  std::string out;
  detail::append_json_string(out, text);
  return out.substr(1, out.size() - 2);
}

// Without extras the file holds only what safetensors holds: a map of names
// to tensors. Nested maps with string keys become dotted names (read back as
// one flat map); everything else is refused. Fills `names` with the plain
// dotted names, to detect collisions.
void check_plain(const Tree& node, const std::string& name, std::unordered_set<std::string>& names) {
  const std::string where = name.empty() ? std::string("the root") : "'" + name + "'";
  switch (node.kind()) {
    case Tree::Kind::kTensor:
      if (!names.insert(name).second) {
        unsupported("two leaves are named '" + name + "'; only ckpt's extras can keep them apart", name);
      }
      return;
    case Tree::Kind::kMap:
      if (node.size() == 0 && !name.empty()) {
        unsupported("empty map at " + where + " cannot be stored without ckpt's extras", name);
      }
      for (const TreeEntry& entry : node.entries()) {
        const auto* key = std::get_if<std::string>(&entry.key);
        if (key == nullptr) {
          unsupported("integer key " + key_to_string(entry.key) + " in " + where +
                          " cannot be stored without ckpt's extras (SaveOptions.extras)",
                      name);
        }
        check_plain(entry.value, join_name(name, *key), names);
      }
      return;
    case Tree::Kind::kList:
      unsupported("list at " + where + " cannot be stored without ckpt's extras (SaveOptions.extras)", name);
    default:
      unsupported("non-tensor leaf at " + where + " cannot be stored without ckpt's extras (SaveOptions.extras)",
                  name);
  }
}

// With extras, tied leaves become aliases of the first; without, every leaf
// is stored (plain readers, and huggingface's own, know no aliases).
Layout plan_layout(const std::vector<Tree::Leaf>& leaves, bool extras) {
  for (const Tree::Leaf& leaf : leaves) {
    if (!detail::valid_utf8(leaf.name)) unsupported("tensor name is not valid UTF-8", leaf.name);
    if (leaf.name == kMetadataKey) unsupported("a tensor cannot be named \"__metadata__\" in safetensors", leaf.name);
  }
  const std::vector<size_t> tied_to = extras ? find_ties(leaves) : std::vector<size_t>(leaves.size(), kNotTied);
  Layout layout;
  std::vector<PlannedTensor>& plan = layout.stored;
  plan.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Tree::Leaf& leaf = leaves[i];
    if (tied_to[i] != kNotTied) {
      layout.aliases.push_back({&leaf.name, &leaves[tied_to[i]].name});
      continue;
    }
    const Tensor& tensor = leaf.value->tensor();
    PlannedTensor planned{&leaf.name, &tensor, 0, false};
    std::string_view code = dtype_info(tensor.dtype()).safetensors;
    if (tensor.dtype() == DType::kComplex128) {
      if (!extras) unsupported("safetensors has no complex128; save with ckpt's extras to keep it", leaf.name);
      code = kComplex128StorageCode;
      planned.complex_pairs = true;
    }
    if (tensor.dtype() == DType::kFloat4E2M1FNx2) {
      // The header's shape counts 4-bit values; torch's shape counts bytes.
      if (tensor.ndim() == 0) {
        unsupported("a 0-d float4_e2m1fn_x2 tensor has no last dimension to hold its two F4 values", leaf.name);
      }
      if (tensor.shape().back() > std::numeric_limits<int64_t>::max() / kFloat4PerByte) {
        unsupported("float4_e2m1fn_x2 last dimension too large to double for F4", leaf.name);
      }
      planned.float4_pairs = true;
    }
    const std::optional<size_t> rank = reference_rank(code);
    if (!rank) unsupported("safetensors has no code for dtype " + std::string(dtype_name(tensor.dtype())), leaf.name);
    planned.rank = *rank;
    plan.push_back(planned);
  }
  // tensor.rs prepare(): dtype descending (enum order), then name ascending
  // (Rust's str Ord is bytewise, as std::string's compare is).
  std::sort(plan.begin(), plan.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    return a.rank != b.rank ? a.rank > b.rank : *a.name < *b.name;
  });
  uint64_t offset = 0;
  for (PlannedTensor& planned : plan) {
    planned.begin = offset;
    if (__builtin_add_overflow(offset, uint64_t{planned.tensor->nbytes()}, &offset)) {
      unsupported("tensors total more than 2^64 bytes");
    }
    planned.end = offset;
  }
  return layout;
}

// {"name": "hex", ...} in file order.
std::string checksums_json(const std::vector<PlannedTensor>& plan, const std::vector<std::string>& digests) {
  detail::JsonWriter out;
  out.begin_object();
  for (size_t i = 0; i < plan.size(); ++i) {
    out.key(*plan[i].name);
    out.string(digests[i]);
  }
  out.end_object();
  return out.take();
}

// The header text, and where in it the escaped checksums object lies.
struct HeaderText {
  std::string text;
  size_t checksums_at = 0;
  size_t checksums_size = 0;
};

class HeaderBuilder {
 public:
  HeaderBuilder(const Tree& tree, const std::vector<Tree::Leaf>& leaves, const Layout& layout,
                const SaveOptions& options)
      : tree_(tree), leaves_(leaves), plan_(layout.stored), aliases_(layout.aliases), options_(options) {}

  // The whole header, padded; `digests` fill the checksums object (file order).
  HeaderText build(const std::vector<std::string>& digests) const {
    HeaderText header;
    detail::JsonWriter out;
    out.begin_object();
    if (!options_.metadata.empty() || options_.extras) {
      out.key(kMetadataKey);
      out.begin_object();
      for (const auto& [key, value] : options_.metadata) {
        out.key(key);
        out.string(value);
      }
      if (options_.extras) {
        out.key(kCkptKey);
        const std::string prefix = escaped(extras_prefix());
        const std::string sums = checksummed() ? escaped(checksums_json(plan_, digests)) : std::string();
        header.checksums_at = out.text().size() + 1 + prefix.size();
        header.checksums_size = sums.size();
        out.raw("\"" + prefix + sums + escaped(extras_suffix()) + "\"");
      }
      out.end_object();
    }
    for (const PlannedTensor& planned : plan_) {
      out.key(*planned.name);
      out.begin_object();
      out.key(kDTypeField);
      out.string(kReferenceDTypes[planned.rank].code);
      out.key(kShapeField);
      out.begin_array();
      const Shape& shape = planned.tensor->shape();
      for (size_t i = 0; i < shape.size(); ++i) {
        // F4 counts values: a float4_e2m1fn_x2 byte holds two.
        const bool bytes_to_values = planned.float4_pairs && i + 1 == shape.size();
        out.integer(bytes_to_values ? shape[i] * kFloat4PerByte : shape[i]);
      }
      if (planned.complex_pairs) out.integer(2);
      out.end_array();
      out.key(kOffsetsField);
      out.begin_array();
      out.unsigned_integer(planned.begin);
      out.unsigned_integer(planned.end);
      out.end_array();
      out.end_object();
    }
    out.end_object();
    header.text = out.take();
    // The data buffer (after the length prefix and the header) starts at a
    // multiple of the alignment.
    const size_t alignment = options_.extras ? kDataAlignment : kHeaderAlignment;
    const size_t data_at = (kHeaderLengthSize + header.text.size() + alignment - 1) / alignment * alignment;
    header.text.resize(data_at - kHeaderLengthSize, kHeaderPadding);
    return header;
  }

  bool checksummed() const { return options_.extras && options_.checksum != ChecksumKind::kNone; }

 private:
  // The ckpt document up to its checksums object.
  std::string extras_prefix() const {
    detail::JsonWriter out;
    out.begin_object();
    out.key(kVersionField);
    out.integer(aliases_.empty() ? kCkptVersionWithoutAliases : kCkptAliasesVersion);
    out.key(kTreeField);
    detail::write_tree_json(out, tree_, leaves_);
    if (checksummed()) {
      out.key(kChecksumField);
      out.string(checksum_name(options_.checksum));
      out.key(kChecksumsField);
    }
    return out.take();
  }

  // What follows the checksums object: the dtype overrides, the aliases, the
  // closing brace.
  std::string extras_suffix() const {
    std::string suffix;
    bool first = true;
    for (const PlannedTensor& planned : plan_) {
      if (!planned.complex_pairs) continue;
      if (first) {
        suffix += ',';
        detail::append_json_string(suffix, kDTypesField);
        suffix += ":{";
      } else {
        suffix += ',';
      }
      first = false;
      detail::append_json_string(suffix, *planned.name);
      suffix += ':';
      detail::append_json_string(suffix, dtype_name(DType::kComplex128));
    }
    if (!first) suffix += '}';
    if (!aliases_.empty()) {
      suffix += ',';
      detail::append_json_string(suffix, kAliasesField);
      suffix += ":{";
      for (size_t i = 0; i < aliases_.size(); ++i) {
        if (i > 0) suffix += ',';
        detail::append_json_string(suffix, *aliases_[i].name);
        suffix += ':';
        detail::append_json_string(suffix, *aliases_[i].stored);
      }
      suffix += '}';
    }
    return suffix + "}";
  }

  const Tree& tree_;
  const std::vector<Tree::Leaf>& leaves_;
  const std::vector<PlannedTensor>& plan_;
  const std::vector<AliasedTensor>& aliases_;
  const SaveOptions& options_;
};

void check_metadata(const Metadata& metadata) {
  for (const auto& [key, value] : metadata) {
    if (key == kCkptKey) {
      throw Error(ErrorCode::kInvalidArgument,
                  "metadata key \"" + std::string(kCkptKey) + "\" is reserved for ckpt's extras",
                  {.entry = "__metadata__." + key});
    }
    if (!detail::valid_utf8(key) || !detail::valid_utf8(value)) {
      unsupported("metadata is not valid UTF-8", "__metadata__." + key);
    }
  }
}

std::string length_prefix(uint64_t length) {
  std::string prefix(kHeaderLengthSize, '\0');
  for (size_t i = 0; i < kHeaderLengthSize; ++i) prefix[i] = static_cast<char>(length >> (8 * i));
  return prefix;
}

}  // namespace

struct PlannedFile::Plan {
  Plan(const Tree& tree, const SaveOptions& options)
      : tree(tree),
        options(options),
        leaves(tree.tensor_leaves()),
        layout(plan_layout(leaves, options.extras)),
        builder(tree, leaves, layout, this->options) {}

  const Tree& tree;
  const SaveOptions options;
  const std::vector<Tree::Leaf> leaves;
  const Layout layout;
  const HeaderBuilder builder;
  HeaderText header;  // with placeholder digests until the data is summed
  uint64_t data_start = 0;
  uint64_t data_size = 0;
};

PlannedFile::PlannedFile(const Tree& tree, const SaveOptions& options) {
  check_metadata(options.metadata);
  if (!options.extras) {
    if (!tree.is_map()) {
      unsupported("without ckpt's extras safetensors holds a map of names to tensors, not a " +
                  std::string(tree.is_list() ? "list" : "leaf"));
    }
    std::unordered_set<std::string> names;
    check_plain(tree, "", names);
  }
  plan_ = std::make_unique<Plan>(tree, options);
  const std::vector<PlannedTensor>& stored = plan_->layout.stored;
  const size_t digest_width = detail::checksum_hex_width(options.checksum);
  plan_->header = plan_->builder.build(std::vector<std::string>(stored.size(), std::string(digest_width, '0')));
  if (plan_->header.text.size() > kMaxHeaderSize) {
    unsupported("header of " + std::to_string(plan_->header.text.size()) + " bytes exceeds safetensors' limit of " +
                std::to_string(kMaxHeaderSize));
  }
  plan_->data_start = kHeaderLengthSize + plan_->header.text.size();
  plan_->data_size = stored.empty() ? 0 : stored.back().end;
}

PlannedFile::~PlannedFile() = default;

uint64_t PlannedFile::size() const { return plan_->data_start + plan_->data_size; }

void PlannedFile::write_file(const std::filesystem::path& path) const {
  const Plan& plan = *plan_;
  const std::vector<PlannedTensor>& stored = plan.layout.stored;
  const bool summed = plan.builder.checksummed();
  detail::AtomicFile file(path, {.fsync = plan.options.fsync});
  file.resize(size());
  std::vector<detail::Checksummer> sums;
  if (summed) {
    sums.reserve(stored.size());
    for (size_t i = 0; i < stored.size(); ++i) sums.emplace_back(plan.options.checksum);
  }
  // Checksums the caller knows already are not computed again.
  std::vector<const std::string*> known(stored.size(), nullptr);
  if (summed && plan.options.known_checksums) {
    const size_t width = detail::checksum_hex_width(plan.options.checksum);
    for (size_t i = 0; i < stored.size(); ++i) {
      const auto found = plan.options.known_checksums->find(*stored[i].name);
      if (found != plan.options.known_checksums->end() && found->second.size() == width) known[i] = &found->second;
    }
  }
  std::vector<detail::WriteSpan> spans;
  spans.reserve(stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    if (stored[i].tensor->nbytes() == 0) continue;
    detail::WriteSpan span{stored[i].tensor->bytes(), plan.data_start + stored[i].begin, nullptr};
    if (summed && known[i] == nullptr) {
      span.on_chunk = [summer = &sums[i]](std::span<const std::byte> piece) { summer->update(piece); };
    }
    spans.push_back(std::move(span));
  }
  const auto write_header = [&] {
    std::string header = plan.header.text;
    if (summed) {
      std::vector<std::string> digests;
      digests.reserve(stored.size());
      for (size_t i = 0; i < stored.size(); ++i) digests.push_back(known[i] != nullptr ? *known[i] : sums[i].hex());
      fill_digests(header, digests);
    }
    const std::string prefix = length_prefix(header.size());
    file.write_at(std::as_bytes(std::span(prefix)), 0);
    file.write_at(std::as_bytes(std::span(header)), kHeaderLengthSize);
  };
  // With every checksum known before the data is written (or none stored),
  // the header goes first and the file is written in file order, so that
  // io/file_hashes.h can hash it as it goes; else it follows the data whose
  // checksums it holds.
  bool header_first = true;
  for (size_t i = 0; summed && i < stored.size(); ++i) {
    if (known[i] == nullptr && stored[i].tensor->nbytes() != 0) header_first = false;
  }
  if (header_first) write_header();
  file.write_parallel(spans, plan.options.threads);
  if (!header_first) write_header();
  file.commit();
}

void PlannedFile::write_to(std::span<std::byte> out) const {
  const Plan& plan = *plan_;
  if (out.size() != size()) {
    throw Error(ErrorCode::kInvalidArgument, "safetensors bytes need a buffer of " + std::to_string(size()) +
                                                 " bytes, not " + std::to_string(out.size()));
  }
  const std::vector<PlannedTensor>& stored = plan.layout.stored;
  std::vector<std::string> digests(stored.size());
  detail::parallel_for(stored.size(), plan.options.threads, [&](size_t i, unsigned) {
    const Tensor& tensor = *stored[i].tensor;
    std::span<std::byte> target = out.subspan(plan.data_start + stored[i].begin, tensor.nbytes());
    if (!target.empty()) tensor.read_into(target);
    if (plan.builder.checksummed()) digests[i] = detail::checksum_hex(plan.options.checksum, target);
  });
  std::string header = plan.header.text;
  if (plan.builder.checksummed()) fill_digests(header, digests);
  const std::string prefix = length_prefix(header.size());
  std::memcpy(out.data(), prefix.data(), prefix.size());
  std::memcpy(out.data() + kHeaderLengthSize, header.data(), header.size());
}

void PlannedFile::fill_digests(std::string& header, const std::vector<std::string>& digests) const {
  const std::string sums_text = escaped(checksums_json(plan_->layout.stored, digests));
  if (sums_text.size() != plan_->header.checksums_size) {
    throw Error(ErrorCode::kInvalidArgument, "internal: checksum digests changed the header length");
  }
  std::memcpy(header.data() + plan_->header.checksums_at, sums_text.data(), sums_text.size());
}

void write_file(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) {
  PlannedFile(tree, options).write_file(path);
}

}  // namespace ckpt::safetensors_detail
