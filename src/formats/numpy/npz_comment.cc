// ckpt's archive comment in .npz files: the keys of tied tensors that have no
// member of their own (aliases) and the stored key each shares. Byte layout:
// docs/formats/numpy.md, "Tied tensors"; constants in layout.h.

#include "formats/numpy/npz_comment.h"

#include <simdjson.h>

#include <unordered_set>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "core/text.h"
#include "formats/extras_json.h"
#include "formats/numpy/layout.h"
#include "formats/zip/layout.h"

namespace ckpt::numpy_detail {
namespace {

constexpr std::string_view kCommentEnd = "}}";  // closes "aliases" and the document

using simdjson::dom::element;
using simdjson::dom::object;

}  // namespace

NpzCommentBuilder::NpzCommentBuilder() : text_(kNpzCommentPrefix) {
  // {"version":1,"aliases":{
  text_ += '{';
  detail::append_json_string(text_, kNpzVersionField);
  text_ += ':' + std::to_string(kNpzCommentVersion) + ',';
  detail::append_json_string(text_, kNpzAliasesField);
  text_ += ":{";
}

bool NpzCommentBuilder::add(std::string_view alias, std::string_view stored) {
  if (full_) return false;
  std::string entry = count_ == 0 ? "" : ",";
  detail::append_json_string(entry, alias);
  entry += ':';
  detail::append_json_string(entry, stored);
  if (text_.size() + entry.size() + kCommentEnd.size() > zip_detail::kMaxCommentLength) {
    full_ = true;
    return false;
  }
  text_ += entry;
  ++count_;
  return true;
}

std::string NpzCommentBuilder::finish() const { return count_ == 0 ? std::string() : text_ + std::string(kCommentEnd); }

std::optional<std::vector<NpzAlias>> read_npz_comment(std::string_view comment, const std::filesystem::path& path,
                                                      uint64_t offset,
                                                      const std::unordered_map<std::string_view, size_t>& members) {
  if (!comment.starts_with(kNpzCommentPrefix) || comment.size() == kNpzCommentPrefix.size() ||
      comment[kNpzCommentPrefix.size()] != '{') {
    return std::nullopt;  // no comment, or another tool's
  }
  const ErrorContext context{.path = path, .entry = std::string(kNpzCommentEntry), .offset = offset};
  auto bad = [&](const std::string& message) {
    throw Error(ErrorCode::kCorrupt, "ckpt comment: " + message, context);
  };
  simdjson::dom::parser parser;  // at most 64 KiB of document
  const std::string_view json = comment.substr(kNpzCommentPrefix.size());
  element root;
  if (const auto error = parser.parse(json.data(), json.size()).get(root)) {
    bad(std::string("not valid JSON: ") + simdjson::error_message(error));
  }
  object fields;
  if (root.get_object().get(fields)) bad("not a JSON object");
  std::optional<element> version, aliases_value;
  detail::read_fields(fields, {{kNpzVersionField, &version}, {kNpzAliasesField, &aliases_value}}, bad);
  detail::read_version(version, kNpzCommentVersion, "comment", context, bad);
  if (!aliases_value) bad("\"aliases\" is missing");
  object entries;
  if (aliases_value->get_object().get(entries)) bad("\"aliases\" is not an object");

  // Each alias names a stored member, never another alias (no chains, no
  // cycles) nor itself, and is not a member's key.
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  std::unordered_set<std::string_view> names;
  for (const simdjson::dom::key_value_pair entry : entries) {
    const std::string quoted = "alias " + detail::quoted(entry.key);
    std::string_view stored;
    if (entry.value.get_string().get(stored)) bad(quoted + " is not a string naming a stored array");
    if (!names.insert(entry.key).second) bad("\"aliases\" names " + quoted + " twice");
    if (entry.key.find('\0') != std::string_view::npos) bad(quoted + " has a NUL byte");
    if (members.contains(entry.key)) bad(quoted + " is also the key of a member");
    if (stored == entry.key) bad(quoted + " names itself");
    pairs.emplace_back(entry.key, stored);
  }
  std::vector<NpzAlias> aliases;
  aliases.reserve(pairs.size());
  for (const auto& [name, stored] : pairs) {
    const auto found = members.find(stored);
    if (found == members.end()) {
      const std::string quoted = "alias " + detail::quoted(name) + " names ";
      if (names.contains(stored)) bad(quoted + "alias " + detail::quoted(stored) + "; aliases name members only");
      bad(quoted + detail::quoted(stored) + ", which has no member " + detail::quoted(std::string(stored) + ".npy"));
    }
    aliases.push_back({std::string(name), found->second});
  }
  return aliases;
}

}  // namespace ckpt::numpy_detail
