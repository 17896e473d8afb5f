#pragma once
// ckpt's archive comment in .npz files: the keys of tied tensors without a
// member of their own. Byte layout: layout.h (kNpzComment*),
// docs/formats/numpy.md, "Tied tensors".

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ckpt::numpy_detail {

// Builds the comment, alias by alias, within zip's 65535 bytes.
class NpzCommentBuilder {
 public:
  NpzCommentBuilder();
  // Records `alias` (a leaf's key) as sharing the member of key `stored`.
  // Returns false, and records nothing from then on, if the comment would
  // outgrow 65535 bytes: that alias and every later one must be stored as
  // copies.
  bool add(std::string_view alias, std::string_view stored);
  // The comment; empty if no alias was recorded.
  std::string finish() const;

 private:
  std::string text_;
  size_t count_ = 0;
  bool full_ = false;
};

// One alias of a comment: a key without a member, whose tensor is the
// tensor of stored member `stored` (an index into the members).
struct NpzAlias {
  std::string name;
  size_t stored;
};

// The aliases of archive comment `comment` (which starts at byte `offset` of
// `path`), in the order written; `members` maps each stored key to its
// index. Returns std::nullopt for a comment that is not ckpt's.
// Throws Error{kCorrupt} (entry "zip comment") for a comment that is ckpt's
// but not valid JSON, not an object, with a field twice, a missing or
// non-positive-integer "version", no "aliases" object, an alias whose value
// is not a string, an alias named twice, an alias with a NUL byte or that is
// also a member's key, or one that names itself, another alias or a key
// without a member; {kUnsupported} for a version above kNpzCommentVersion.
std::optional<std::vector<NpzAlias>> read_npz_comment(std::string_view comment, const std::filesystem::path& path,
                                                      uint64_t offset,
                                                      const std::unordered_map<std::string_view, size_t>& members);

}  // namespace ckpt::numpy_detail
