#pragma once
// OcdbtStore: every key of an OCDBT database (the latest version), read from
// its manifest.ocdbt and b-tree nodes, with the place of each value: inline
// in a node, or a range of a data file. Byte layout: ocdbt_layout.h and
// docs/formats/orbax.md.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/buffer.h"
#include "io/mapped_file.h"

namespace ckpt::orbax_detail {

// Where one value lies.
struct OcdbtValue {
  Buffer inline_value;                       // values stored in the leaf node
  std::shared_ptr<const detail::MappedFile> file;  // out-of-line: the data file
  uint64_t offset = 0;                       // ...and the range in it
  uint64_t length = 0;
  bool out_of_line = false;
};

class OcdbtStore {
 public:
  // Reads `root`/manifest.ocdbt and every b-tree node of its latest version;
  // checks every CRC-32C, length and data file range. Throws
  // Error{kNotFound} if the manifest is missing, {kCorrupt} naming the file,
  // the structure and its offset for any defect, {kUnsupported} for a
  // numbered manifest.
  static OcdbtStore open(const std::filesystem::path& root);

  // The value of `key`, or nullptr.
  const OcdbtValue* find(std::string_view key) const;
  // The bytes of a value: the inline copy, or a view of the mapped data file.
  Buffer read(const OcdbtValue& value) const;
  // Every key, sorted.
  std::vector<std::string> keys() const;
  size_t size() const { return values_.size(); }
  // Adds the keys of `other` (a per-process store); throws Error{kCorrupt}
  // on a key both hold.
  void merge(OcdbtStore&& other);

 private:
  std::map<std::string, OcdbtValue, std::less<>> values_;
};

}  // namespace ckpt::orbax_detail
