// Reads an OCDBT database: manifest, data file tables, b-tree nodes. The
// encodings follow tensorstore's kvstore/ocdbt/format (manifest.cc,
// config_codec.cc, data_file_id_codec.cc, version_tree_codec.h, btree.cc,
// btree_codec.h); docs/formats/orbax.md describes the bytes.

#include "formats/orbax/ocdbt_reader.h"

#include <cstring>
#include <limits>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/text.h"
#include "formats/orbax/compression.h"
#include "formats/orbax/layout.h"
#include "formats/orbax/ocdbt_layout.h"

namespace ckpt::orbax_detail {
namespace {

// Which structure is being decoded, for error messages.
struct Where {
  std::filesystem::path file;
  uint64_t offset = 0;
  std::string what;  // "manifest", "b-tree node under 'params.'"
};

[[noreturn]] void corrupt(const Where& where, const std::string& message) {
  throw Error(ErrorCode::kCorrupt, where.what + ": " + message,
              {.path = where.file, .entry = where.what, .offset = where.offset});
}

uint32_t load_u32_be(const std::byte* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

uint64_t load_le(const std::byte* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | uint64_t(p[i]);
  return value;
}

// Reads the columns of a decoded body, each read checked against its end.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const Where& where) : bytes_(bytes), where_(where) {}

  uint8_t byte(const char* field) {
    need(1, field);
    return static_cast<uint8_t>(bytes_[position_++]);
  }
  // LEB128 as riegeli writes it: at most 10 bytes, the last at most 1.
  uint64_t varint64(const char* field) { return varint(field, 10, 1); }
  // At most 5 bytes, the last at most 0x0f.
  uint32_t varint32(const char* field) { return static_cast<uint32_t>(varint(field, 5, 0x0f)); }
  uint64_t u64le(const char* field) {
    need(8, field);
    const uint64_t value = load_le(bytes_.data() + position_, 8);
    position_ += 8;
    return value;
  }
  int32_t i32le(const char* field) {
    need(4, field);
    const auto value = static_cast<uint32_t>(load_le(bytes_.data() + position_, 4));
    position_ += 4;
    return static_cast<int32_t>(value);
  }
  std::span<const std::byte> take(uint64_t size, const char* field) {
    need(size, field);
    const auto out = bytes_.subspan(position_, static_cast<size_t>(size));
    position_ += static_cast<size_t>(size);
    return out;
  }
  size_t remaining() const { return bytes_.size() - position_; }
  void expect_end() {
    if (remaining() != 0) fail(std::to_string(remaining()) + " unexpected bytes after the last field");
  }
  [[noreturn]] void fail(const std::string& message) const {
    corrupt(where_, message + " (byte " + std::to_string(position_) + " of the decoded body)");
  }

 private:
  void need(uint64_t size, const char* field) {
    if (size > remaining()) fail(std::string("truncated: ") + field + " needs " + std::to_string(size) + " bytes");
  }
  uint64_t varint(const char* field, int max_bytes, unsigned last_max) {
    uint64_t value = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (remaining() == 0) fail(std::string("truncated inside the varint ") + field);
      const auto b = static_cast<uint8_t>(bytes_[position_++]);
      if (i == max_bytes - 1 && b > last_max) fail(std::string("invalid varint ") + field + " (too long)");
      value |= uint64_t(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) return value;
    }
    fail(std::string("invalid varint ") + field + " (too long)");
  }

  std::span<const std::byte> bytes_;
  const Where& where_;
  size_t position_ = 0;
};

// Checks magic, length, CRC-32C and version of one encoded structure and
// returns its body, decompressed.
std::vector<std::byte> open_envelope(std::span<const std::byte> encoded, uint32_t magic, const Where& where) {
  if (encoded.size() < kEnvelopeMinSize) {
    corrupt(where, "truncated: " + std::to_string(encoded.size()) + " bytes, fewer than the " +
                       std::to_string(kEnvelopeMinSize) + " of magic, length and checksum");
  }
  const uint32_t stored_magic = load_u32_be(encoded.data());
  if (stored_magic != magic) {
    corrupt(where, "bad magic 0x" + detail::hex8(stored_magic) + " (expected 0x" + detail::hex8(magic) + ")");
  }
  const uint64_t length = load_le(encoded.data() + 4, 8);
  if (length != encoded.size()) {
    corrupt(where, "length field says " + std::to_string(length) + " bytes, but it has " +
                       std::to_string(encoded.size()));
  }
  const size_t checked = encoded.size() - 4;
  const auto stored_crc = static_cast<uint32_t>(load_le(encoded.data() + checked, 4));
  const uint32_t actual_crc = detail::crc32c(encoded.first(checked));
  if (stored_crc != actual_crc) {
    corrupt(where,
            "CRC-32C mismatch: stored 0x" + detail::hex8(stored_crc) + ", computed 0x" + detail::hex8(actual_crc));
  }
  Cursor header(encoded.subspan(kEnvelopeHeaderSize, checked - kEnvelopeHeaderSize), where);
  const uint32_t version = header.varint32("version");
  if (version != kFormatVersion) corrupt(where, "unsupported version " + std::to_string(version) + " (expected 0)");
  const uint32_t compression = header.varint32("compression_format");
  const auto rest = header.take(header.remaining(), "body");
  if (compression == kCompressionNone) return {rest.begin(), rest.end()};
  if (compression != kCompressionZstd) {
    corrupt(where, "unknown compression_format " + std::to_string(compression) + " (0 none, 1 zstd)");
  }
  const ErrorContext context{.path = where.file, .entry = where.what, .offset = where.offset};
  try {
    return zstd_decode(rest, kMaxDecodedNodeBytes, context);
  } catch (Error& error) {
    throw Error(ErrorCode::kCorrupt, where.what + ": " + error.message(), context);
  }
}

// One row of a data file table: the path relative to the database root, and
// the transitive path that the nodes read from it pass on to their children.
struct DataFile {
  std::string path;
  std::string transitive;
};

std::vector<DataFile> read_data_file_table(Cursor& cursor, const std::string& transitive) {
  const uint64_t count = cursor.varint64("num_files");
  if (count > cursor.remaining()) cursor.fail("data file table claims " + std::to_string(count) + " files");
  const auto n = static_cast<size_t>(count);
  std::vector<uint64_t> prefix(n, 0), suffix(n), base(n);
  for (size_t i = 1; i < n; ++i) prefix[i] = cursor.varint32("path_prefix_length");
  for (size_t i = 0; i < n; ++i) suffix[i] = cursor.varint32("path_suffix_length");
  for (size_t i = 0; i < n; ++i) base[i] = cursor.varint32("base_path_length");
  std::vector<DataFile> files(n);
  std::string previous;
  for (size_t i = 0; i < n; ++i) {
    if (prefix[i] > previous.size()) {
      cursor.fail("path_prefix_length[" + std::to_string(i) + "] = " + std::to_string(prefix[i]) +
                  " exceeds the previous path's length " + std::to_string(previous.size()));
    }
    const auto bytes = cursor.take(suffix[i], "path_suffix");
    std::string path = previous.substr(0, static_cast<size_t>(prefix[i]));
    path.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (path.size() + transitive.size() > kMaxPathLength) cursor.fail("data file path longer than 65535 bytes");
    if (base[i] > path.size()) {
      cursor.fail("base_path_length[" + std::to_string(i) + "] = " + std::to_string(base[i]) +
                  " exceeds the path's length " + std::to_string(path.size()));
    }
    files[i] = {transitive + path, transitive + path.substr(0, static_cast<size_t>(base[i]))};
    previous = std::move(path);
  }
  return files;
}

const DataFile& data_file(Cursor& cursor, const std::vector<DataFile>& table) {
  const uint64_t id = cursor.varint64("data_file_id");
  if (id >= table.size()) {
    cursor.fail("data file id " + std::to_string(id) + " outside the table of " + std::to_string(table.size()) +
                " files");
  }
  return table[static_cast<size_t>(id)];
}

// A reference from one structure to a range of a data file.
struct NodeReference {
  const DataFile* file = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
};

class Loader {
 public:
  explicit Loader(std::filesystem::path root) : root_(std::move(root)) {}

  std::map<std::string, OcdbtValue, std::less<>> load() {
    const std::filesystem::path manifest_path = root_ / kOcdbtManifestFile;
    const auto manifest = detail::MappedFile::open(manifest_path);
    read_manifest(manifest->bytes(), {manifest_path, 0, "manifest"});
    return std::move(values_);
  }

 private:
  void read_manifest(std::span<const std::byte> encoded, const Where& where) {
    const std::vector<std::byte> body = open_envelope(encoded, kManifestMagic, where);
    Cursor cursor(body, where);
    cursor.take(16, "uuid");
    const uint8_t kind = cursor.byte("manifest_kind");
    if (kind == kManifestKindNumbered) {
      throw Error(ErrorCode::kUnsupported, "a numbered OCDBT manifest (versions in manifest.<generation>) is not supported",
                  {.path = where.file, .entry = "manifest"});
    }
    if (kind != kManifestKindSingle) cursor.fail("unknown manifest_kind " + std::to_string(kind));
    cursor.varint32("max_inline_value_bytes");
    cursor.varint32("max_decoded_node_bytes");
    const uint8_t arity_log2 = cursor.byte("version_tree_arity_log2");
    if (arity_log2 == 0 || arity_log2 > kMaxVersionTreeArityLog2) {
      cursor.fail("version_tree_arity_log2 " + std::to_string(arity_log2) + " outside [1, 16]");
    }
    const uint32_t method = cursor.varint32("compression_method");
    if (method == kCompressionZstd) {
      cursor.i32le("zstd level");
    } else if (method != kCompressionNone) {
      cursor.fail("unknown compression_method " + std::to_string(method));
    }
    const std::vector<DataFile> table = read_data_file_table(cursor, "");
    // Inline versions (a version tree leaf's entries); the last is the latest.
    const uint64_t count = cursor.varint64("num_versions");
    if (count == 0 || count > (uint64_t{1} << arity_log2)) {
      cursor.fail("num_versions " + std::to_string(count) + " outside [1, " +
                  std::to_string(uint64_t{1} << arity_log2) + "]");
    }
    const auto n = static_cast<size_t>(count);
    uint64_t generation = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t next = cursor.varint64("generation_number");
      if (next <= generation) cursor.fail("generation numbers are not increasing");
      generation = next;
    }
    std::vector<uint8_t> heights(n);
    for (auto& height : heights) height = cursor.byte("root_height");
    std::vector<NodeReference> roots(n);
    for (auto& root : roots) root.file = &data_file(cursor, table);
    for (auto& root : roots) root.offset = cursor.varint64("data_file_offset");
    for (auto& root : roots) root.length = cursor.varint64("data_file_length");
    for (int column = 0; column < 3; ++column) {
      for (size_t i = 0; i < n; ++i) cursor.varint64("statistics");
    }
    for (size_t i = 0; i < n; ++i) cursor.u64le("commit_time");
    // References to older versions' version tree nodes (not followed).
    const uint64_t nodes = cursor.varint64("num_version_nodes");
    if (nodes > 64) cursor.fail("num_version_nodes " + std::to_string(nodes) + " above 64");
    for (uint64_t i = 0; i < nodes; ++i) cursor.varint64("generation_number");
    for (uint64_t i = 0; i < nodes; ++i) data_file(cursor, table);
    for (uint64_t i = 0; i < 3 * nodes; ++i) cursor.varint64("version node reference");
    for (uint64_t i = 0; i < nodes; ++i) cursor.u64le("commit_time");
    for (uint64_t i = 0; i < nodes; ++i) cursor.byte("entry_height");
    cursor.expect_end();

    const NodeReference& latest = roots.back();
    if (latest.file->path.empty()) {  // an empty database: no root node
      if (heights.back() != 0) cursor.fail("an empty version with root_height " + std::to_string(heights.back()));
      return;
    }
    read_btree_node(latest, heights.back(), "");
  }

  // The bytes `reference` names, checked against the data file's size.
  std::span<const std::byte> resolve(const NodeReference& reference, const std::string& referrer,
                                     const std::filesystem::path& referrer_file,
                                     std::shared_ptr<const detail::MappedFile>* keep = nullptr) {
    const auto& file = open_data_file(reference.file->path, referrer, referrer_file);
    uint64_t end = 0;
    if (__builtin_add_overflow(reference.offset, reference.length, &end) || end > file->size()) {
      throw Error(ErrorCode::kCorrupt,
                  referrer + ": reference [" + std::to_string(reference.offset) + ", " +
                      std::to_string(reference.offset) + "+" + std::to_string(reference.length) +
                      ") lies past the end of data file " + detail::quoted(reference.file->path) + " (" +
                      std::to_string(file->size()) + " bytes)",
                  {.path = file->path(), .entry = referrer, .offset = reference.offset});
    }
    if (keep != nullptr) *keep = file;
    return file->bytes().subspan(static_cast<size_t>(reference.offset), static_cast<size_t>(reference.length));
  }

  const std::shared_ptr<const detail::MappedFile>& open_data_file(const std::string& relative,
                                                                  const std::string& referrer,
                                                                  const std::filesystem::path& referrer_file) {
    auto found = files_.find(relative);
    if (found != files_.end()) return found->second;
    const std::filesystem::path path(relative);
    bool escapes = path.is_absolute() || relative.empty();
    for (const auto& part : path) escapes = escapes || part == "..";
    if (escapes) {
      throw Error(ErrorCode::kCorrupt, referrer + ": data file path " + detail::quoted(relative) + " leaves the checkpoint",
                  {.path = referrer_file, .entry = referrer});
    }
    try {
      return files_.emplace(relative, detail::MappedFile::open(root_ / path)).first->second;
    } catch (const Error& error) {
      throw Error(error.code() == ErrorCode::kNotFound ? ErrorCode::kCorrupt : error.code(),
                  referrer + ": data file " + detail::quoted(relative) + " cannot be read: " + error.message(),
                  {.path = root_ / path, .entry = referrer});
    }
  }

  void read_btree_node(const NodeReference& reference, uint8_t expected_height, const std::string& prefix) {
    if (++nodes_ > kMaxBtreeNodes) {
      throw Error(ErrorCode::kCorrupt, "more than " + std::to_string(kMaxBtreeNodes) + " b-tree nodes",
                  {.path = root_ / kOcdbtManifestFile});
    }
    const std::string what = prefix.empty() ? "b-tree node" : "b-tree node under " + detail::quoted(prefix);
    const auto encoded = resolve(reference, what, root_ / kOcdbtManifestFile);
    const Where where{root_ / reference.file->path, reference.offset, what};
    const std::vector<std::byte> body = open_envelope(encoded, kBtreeNodeMagic, where);
    Cursor cursor(body, where);
    const uint8_t height = cursor.byte("height");
    if (height != expected_height) {
      cursor.fail("height " + std::to_string(height) + ", but its parent says " + std::to_string(expected_height));
    }
    const std::vector<DataFile> table = read_data_file_table(cursor, reference.file->transitive);
    const uint32_t count = cursor.varint32("num_entries");
    if (count == 0) cursor.fail("empty b-tree node");
    if (count > kMaxNodeArity || count > cursor.remaining()) {
      cursor.fail("num_entries " + std::to_string(count) + " exceeds the node");
    }
    const size_t n = count;
    const std::vector<std::string> keys = read_keys(cursor, n, height > 0);
    const std::vector<uint64_t> subtree_prefix = subtree_prefix_;  // the recursion below reuses the member
    if (height == 0) {
      read_leaf_entries(cursor, table, keys, prefix, where);
    } else {
      std::vector<NodeReference> children(n);
      for (auto& child : children) child.file = &data_file(cursor, table);
      for (auto& child : children) child.offset = cursor.varint64("data_file_offset");
      for (auto& child : children) child.length = cursor.varint64("data_file_length");
      for (size_t i = 0; i < 3 * n; ++i) cursor.varint64("statistics");
      cursor.expect_end();
      for (size_t i = 0; i < n; ++i) {
        read_btree_node(children[i], height - 1, prefix + keys[i].substr(0, subtree_prefix[i]));
      }
    }
  }

  // The key columns; for interior nodes also fills subtree_prefix_.
  std::vector<std::string> read_keys(Cursor& cursor, size_t n, bool interior) {
    std::vector<uint64_t> prefix(n, 0), suffix(n);
    for (size_t i = 1; i < n; ++i) prefix[i] = cursor.varint32("key_prefix_length");
    for (size_t i = 0; i < n; ++i) suffix[i] = cursor.varint32("key_suffix_length");
    subtree_prefix_.assign(n, 0);
    if (interior) {
      for (size_t i = 0; i < n; ++i) subtree_prefix_[i] = cursor.varint32("subtree_common_prefix_length");
    }
    std::vector<std::string> keys(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t previous = i == 0 ? 0 : keys[i - 1].size();
      if (prefix[i] > previous) {
        cursor.fail("key_prefix_length[" + std::to_string(i) + "] = " + std::to_string(prefix[i]) +
                    " exceeds the previous key's length " + std::to_string(previous));
      }
      if (prefix[i] + suffix[i] > kMaxKeyLength) cursor.fail("key longer than 65535 bytes");
      const auto bytes = cursor.take(suffix[i], "key_suffix");
      keys[i] = i == 0 ? std::string() : keys[i - 1].substr(0, static_cast<size_t>(prefix[i]));
      keys[i].append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      if (i > 0 && keys[i] <= keys[i - 1]) cursor.fail("keys out of order at entry " + std::to_string(i));
      if (subtree_prefix_[i] > keys[i].size()) cursor.fail("subtree_common_prefix_length exceeds the key");
    }
    return keys;
  }

  void read_leaf_entries(Cursor& cursor, const std::vector<DataFile>& table, const std::vector<std::string>& keys,
                         const std::string& prefix, const Where& where) {
    const size_t n = keys.size();
    std::vector<uint64_t> lengths(n);
    for (auto& length : lengths) length = cursor.varint64("value_length");
    std::vector<uint8_t> kinds(n);
    for (auto& kind : kinds) {
      kind = cursor.byte("value_kind");
      if (kind > kOutOfLineValue) cursor.fail("value_kind " + std::to_string(kind) + " is neither 0 nor 1");
    }
    std::vector<NodeReference> references(n);
    for (size_t i = 0; i < n; ++i) {
      if (kinds[i] == kOutOfLineValue) references[i].file = &data_file(cursor, table);
    }
    for (size_t i = 0; i < n; ++i) {
      if (kinds[i] == kOutOfLineValue) {
        references[i].offset = cursor.varint64("data_file_offset");
        references[i].length = lengths[i];
      }
    }
    std::vector<std::span<const std::byte>> inline_values(n);
    for (size_t i = 0; i < n; ++i) {
      if (kinds[i] == kInlineValue) inline_values[i] = cursor.take(lengths[i], "inline value");
    }
    cursor.expect_end();
    for (size_t i = 0; i < n; ++i) {
      std::string key = prefix + keys[i];
      OcdbtValue value;
      if (kinds[i] == kInlineValue) {
        value.inline_value = Buffer::copy_of(inline_values[i]);
      } else {
        resolve(references[i], "value of key " + detail::quoted(key), where.file, &value.file);
        value.offset = references[i].offset;
        value.length = references[i].length;
        value.out_of_line = true;
      }
      if (!values_.emplace(key, std::move(value)).second) corrupt(where, "key " + detail::quoted(key) + " appears twice");
    }
  }

  std::filesystem::path root_;
  std::map<std::string, std::shared_ptr<const detail::MappedFile>> files_;
  std::map<std::string, OcdbtValue, std::less<>> values_;
  std::vector<uint64_t> subtree_prefix_;
  uint64_t nodes_ = 0;
};

}  // namespace

OcdbtStore OcdbtStore::open(const std::filesystem::path& root) {
  OcdbtStore store;
  store.values_ = Loader(root).load();
  return store;
}

const OcdbtValue* OcdbtStore::find(std::string_view key) const {
  const auto found = values_.find(key);
  return found == values_.end() ? nullptr : &found->second;
}

Buffer OcdbtStore::read(const OcdbtValue& value) const {
  if (!value.out_of_line) return value.inline_value;
  return value.file->slice(value.offset, value.length);
}

std::vector<std::string> OcdbtStore::keys() const {
  std::vector<std::string> out;
  out.reserve(values_.size());
  for (const auto& [key, value] : values_) out.push_back(key);
  return out;
}

void OcdbtStore::merge(OcdbtStore&& other) {
  for (auto& [key, value] : other.values_) {
    if (!values_.emplace(key, std::move(value)).second) {
      throw Error(ErrorCode::kCorrupt, "key " + detail::quoted(key) + " is stored by two OCDBT databases", {.entry = key});
    }
  }
}

}  // namespace ckpt::orbax_detail
