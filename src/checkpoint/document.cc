// Documents (include/ckpt/document.h): the reports of inspect, verify, diff
// and the format list as trees, and their JSON text.

#include "ckpt/document.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/registry.h"
#include "core/json_writer.h"
#include "core/text.h"
#include "formats/tree_json.h"

namespace ckpt {
namespace {

Tree names_list(const std::vector<std::string>& names) {
  Tree list = Tree::list();
  list.reserve(names.size());
  for (const std::string& name : names) list.push_back(name);
  return list;
}

Tree shape_list(const Shape& shape) {
  Tree list = Tree::list();
  list.reserve(shape.size());
  for (int64_t dim : shape) list.push_back(dim);
  return list;
}

Tree text_or_none(std::string_view text) { return text.empty() ? Tree() : Tree(std::string(text)); }

// [{"name": ..., "a": text(a), "b": text(b)}...]
template <class Mismatch, class Text>
Tree mismatches(const std::vector<Mismatch>& list, Text text) {
  Tree out = Tree::list();
  for (const Mismatch& mismatch : list) {
    Tree& item = out.push_back(Tree::map());
    item.set("name", mismatch.name);
    item.set("a", text(mismatch.a));
    item.set("b", text(mismatch.b));
  }
  return out;
}

void write_json(detail::JsonWriter& json, const Tree& node) {
  switch (node.kind()) {
    case Tree::Kind::kNone: return json.null();
    case Tree::Kind::kBool: return json.boolean(node.boolean());
    case Tree::Kind::kInt: return json.integer(node.integer());
    case Tree::Kind::kFloat: return json.real(node.real());
    case Tree::Kind::kString: return json.string(node.string());
    case Tree::Kind::kBytes:
      json.begin_object();
      json.key("bytes_base64");
      json.string(detail::base64_encode(node.bytes().data));
      return json.end_object();
    case Tree::Kind::kTensor:
      json.begin_object();
      json.key("tensor");
      json.begin_object();
      json.key("dtype");
      json.string(dtype_name(node.tensor().dtype()));
      json.key("shape");
      write_json(json, shape_list(node.tensor().shape()));
      json.end_object();
      return json.end_object();
    case Tree::Kind::kMap:
      json.begin_object();
      for (const TreeEntry& entry : node.entries()) {
        json.key(key_to_string(entry.key));
        write_json(json, entry.value);
      }
      return json.end_object();
    case Tree::Kind::kList:
      json.begin_array();
      for (const TreeEntry& entry : node.entries()) write_json(json, entry.value);
      return json.end_array();
  }
}

// The contents document with "values" left empty (filled by the callers).
Tree contents_skeleton(const std::filesystem::path& path, const Contents& contents) {
  Tree document = Tree::map();
  document.set("path", path.string());
  document.set("format", contents.format);
  document.set("format_version", contents.format_version);
  document.set("checksum", contents.checksum == ChecksumKind::kNone
                               ? Tree()
                               : Tree(std::string(checksum_name(contents.checksum))));
  Tree& tensors = document.set("tensors", Tree::list());
  tensors.reserve(contents.entries.size());
  uint64_t total = 0;
  for (const EntryInfo& entry : contents.entries) {
    Tree& item = tensors.push_back(Tree::map());
    item.set("name", entry.name);
    item.set("dtype", std::string(dtype_name(entry.dtype)));
    item.set("shape", shape_list(entry.shape));
    item.set("nbytes", static_cast<int64_t>(entry.nbytes));
    item.set("offset", static_cast<int64_t>(entry.offset));
    item.set("checksum", text_or_none(entry.checksum));
    total += entry.nbytes;
  }
  document.set("values", Tree::map());
  Tree& metadata = document.set("metadata", Tree::map());
  for (const auto& [key, value] : contents.metadata) metadata.set(key, value);
  document.set("total_nbytes", static_cast<int64_t>(total));
  return document;
}

}  // namespace

Tree contents_document(const std::filesystem::path& path, const Contents& contents) {
  Tree document = contents_skeleton(path, contents);
  Tree& values = *document.find(Key("values"));
  contents.tree.for_each_leaf([&](std::string_view name, const Tree& leaf) {
    if (!leaf.is_tensor()) values.set(std::string(name), leaf);
  });
  return document;
}

void write_contents_json(std::ostream& out, const std::filesystem::path& path, const Contents& contents) {
  // Written out whenever this much text is waiting.
  constexpr size_t kPiece = size_t{1} << 20;
  const Tree document = contents_skeleton(path, contents);
  detail::JsonWriter json;
  json.begin_object();
  for (const TreeEntry& entry : document.entries()) {
    const std::string& key = std::get<std::string>(entry.key);
    json.key(key);
    if (key != "values") {
      write_json(json, entry.value);
      continue;
    }
    json.begin_object();
    contents.tree.for_each_leaf([&](std::string_view name, const Tree& leaf) {
      if (leaf.is_tensor()) return;
      json.key(name);
      write_json(json, leaf);
      if (json.text().size() >= kPiece) out << json.drain();
    });
    json.end_object();
  }
  json.end_object();
  out << json.drain();
}

Tree diff_document(const DiffReport& report, const std::filesystem::path& a, const std::filesystem::path& b,
                   double atol) {
  auto kind_text = [](Tree::Kind kind) { return Tree(std::string(tree_kind_name(kind))); };
  auto dtype_text = [](DType dtype) { return Tree(std::string(dtype_name(dtype))); };
  Tree document = Tree::map();
  document.set("identical", report.identical());
  document.set("a", a.string());
  document.set("b", b.string());
  document.set("atol", atol);
  document.set("compared", static_cast<int64_t>(report.compared));
  document.set("only_in_a", names_list(report.only_in_a));
  document.set("only_in_b", names_list(report.only_in_b));
  document.set("kind_mismatched", mismatches(report.kind_mismatched, kind_text));
  document.set("dtype_mismatched", mismatches(report.dtype_mismatched, dtype_text));
  document.set("shape_mismatched", mismatches(report.shape_mismatched, shape_list));
  Tree& values = document.set("value_differences", Tree::list());
  for (const TensorDifference& difference : report.value_differences) {
    Tree& item = values.push_back(Tree::map());
    item.set("name", difference.name);
    item.set("dtype", std::string(dtype_name(difference.dtype)));
    item.set("max_abs_diff", difference.max_abs_diff);
    item.set("differing_elements", static_cast<int64_t>(difference.differing_elements));
    item.set("numel", static_cast<int64_t>(difference.numel));
  }
  document.set("leaf_differences", mismatches(report.leaf_differences, [](const Tree& leaf) { return leaf; }));
  document.set("within_tolerance", names_list(report.within_tolerance));
  return document;
}

Tree formats_document() {
  Tree list = Tree::list();
  for (const Format* format : formats()) {
    const FormatCapabilities capabilities = format->capabilities();
    Tree& item = list.push_back(Tree::map());
    item.set("id", std::string(format->id()));
    item.set("description", std::string(format->description()));
    Tree& extensions = item.set("extensions", Tree::list());
    for (std::string_view extension : format->extensions()) extensions.push_back(std::string(extension));
    item.set("read", capabilities.read);
    item.set("write", capabilities.write);
    item.set("nested_tree", capabilities.nested_tree);
    item.set("lists_and_int_keys", capabilities.lists_and_int_keys);
    item.set("checksums", capabilities.checksums);
    item.set("single_tensor", capabilities.single_tensor);
    item.set("metadata", capabilities.metadata);
    item.set("shards", capabilities.shards);
    item.set("colliding_names", capabilities.colliding_names);
    item.set("ties", capabilities.ties);
    item.set("file_per_tensor", capabilities.file_per_tensor);
    item.set("state_file", capabilities.state_file);
    Tree& dtypes = item.set("dtypes", Tree::list());
    for (DType dtype : format->dtypes()) dtypes.push_back(std::string(dtype_name(dtype)));
  }
  Tree document = Tree::map();
  document.set("formats", std::move(list));
  return document;
}

std::string leaf_text(const Tree& leaf) {
  if (leaf.kind() == Tree::Kind::kTensor) {
    return std::string(dtype_name(leaf.tensor().dtype())) + " " + shape_text(leaf.tensor().shape());
  }
  if (leaf.kind() != Tree::Kind::kBytes) return to_json(leaf);
  constexpr size_t kShown = 16;
  const std::string& data = leaf.bytes().data;
  std::string text = "bytes[" + std::to_string(data.size()) + "]";
  if (!data.empty()) text += " ";
  for (size_t i = 0; i < std::min(data.size(), kShown); ++i) {
    text += detail::hex_digits(static_cast<unsigned char>(data[i]), 2);
  }
  if (data.size() > kShown) text += "…";
  return text;
}

std::string to_json(const Tree& document) {
  detail::JsonWriter json;
  write_json(json, document);
  return json.take();
}

Tree cache_document(const std::filesystem::path& cache_dir, const std::vector<CacheEntry>& entries) {
  const auto text_or_null = [](const std::string& text) { return text.empty() ? Tree() : Tree(text); };
  Tree items = Tree::list();
  items.reserve(entries.size());
  for (const CacheEntry& entry : entries) {
    Tree item = Tree::map();
    item.set(std::string("url"), Tree(entry.url));
    item.set(std::string("path"), Tree(entry.path.string()));
    item.set(std::string("size"), Tree(static_cast<int64_t>(entry.size)));
    item.set(std::string("sha256"), text_or_null(entry.sha256));
    item.set(std::string("etag"), text_or_null(entry.etag));
    item.set(std::string("last_modified"), text_or_null(entry.last_modified));
    item.set(std::string("time"), Tree(entry.time));
    item.set(std::string("complete"), Tree(entry.complete));
    item.set(std::string("present"), Tree(static_cast<int64_t>(entry.present)));
    items.push_back(std::move(item));
  }
  Tree document = Tree::map();
  document.set(std::string("cache_dir"), Tree(cache_dir.string()));
  document.set(std::string("entries"), std::move(items));
  return document;
}

}  // namespace ckpt
