#include "formats/safetensors/reader.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/text.h"
#include "formats/extras_json.h"
#include "formats/safetensors/layout.h"
#include "formats/tree_json.h"
#include "io/mapped_file.h"

namespace ckpt::safetensors_detail {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// One tensor as the header declares it, before validation.
struct HeaderEntry {
  std::string_view name;  // views the parser's document
  size_t rank = 0;        // index into kReferenceDTypes
  Shape shape;
  bool dimension_too_large = false;  // a dimension above INT64_MAX (ckpt's Shape)
  bool size_overflows = false;       // numel × bits overflows 64 bits
  uint64_t nbits = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// simdjson parsers keep their buffers from one document to the next; reusing
// one per thread (and purpose) spares allocating and faulting in megabytes
// per file. Buffers grown past kRetainedParserCapacity are released after use.
constexpr size_t kRetainedParserCapacity = size_t{16} << 20;

class ReusedParser {
 public:
  enum Slot { kHeader, kExtras };
  explicit ReusedParser(Slot slot) : parser_(parsers()[slot]) {}
  ReusedParser(const ReusedParser&) = delete;
  ReusedParser& operator=(const ReusedParser&) = delete;
  ~ReusedParser() {
    if (parser_.capacity() > kRetainedParserCapacity) parser_ = simdjson::dom::parser();
  }
  simdjson::dom::parser* operator->() { return &parser_; }

 private:
  static std::array<simdjson::dom::parser, 2>& parsers() {
    thread_local std::array<simdjson::dom::parser, 2> instances;
    return instances;
  }
  simdjson::dom::parser& parser_;
};

struct Header {
  uint64_t length = 0;  // N
  std::vector<HeaderEntry> entries;
  std::vector<std::pair<std::string_view, std::string_view>> metadata;
  std::optional<std::string_view> ckpt_value;  // __metadata__["ckpt"]
};

class Reader {
 public:
  // `whole` holds the entire file (a mapping, or memory a caller lends);
  // `path` names it in errors.
  Reader(const std::filesystem::path& path, Buffer whole, const LoadOptions& options)
      : path_(path), options_(options), whole_(std::move(whole)) {}

  Contents read() {
    Header header = parse_header();
    data_start_ = kHeaderLengthSize + header.length;
    std::vector<HeaderEntry*> order = validate_layout(header);
    refuse_unsupported(order);

    Contents contents;
    contents.format = "safetensors";
    // The ckpt dtype of each reference rank (refuse_unsupported() let only
    // known ones through), looked up once per open, not per tensor.
    std::array<std::optional<DType>, kReferenceDTypes.size()> dtypes;
    for (size_t rank = 0; rank < kReferenceDTypes.size(); ++rank) {
      dtypes[rank] = dtype_from_safetensors(kReferenceDTypes[rank].code);
    }
    std::vector<Tensor> tensors;
    tensors.reserve(order.size());
    contents.entries.reserve(order.size());
    for (HeaderEntry* entry : order) {
      const DType dtype = *dtypes[entry->rank];
      const uint64_t offset = data_start_ + entry->begin;
      const uint64_t size = entry->end - entry->begin;
      if (dtype == DType::kFloat4E2M1FNx2) entry->shape.back() /= kFloat4PerByte;  // values -> bytes
      contents.entries.push_back(EntryInfo{std::string(entry->name), dtype, entry->shape, offset, size});
      tensors.emplace_back(dtype, std::move(entry->shape), whole_.slice(offset, size));
    }
    for (const auto& [key, value] : header.metadata) {
      if (key != kCkptKey) contents.metadata.emplace(key, value);
    }
    if (header.ckpt_value) {
      read_extras(*header.ckpt_value, tensors, contents);
    } else {
      contents.tree = Tree::map();
      contents.tree.reserve(tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) contents.tree.set(contents.entries[i].name, std::move(tensors[i]));
      if (contents.tree.size() != tensors.size()) fail_on_duplicate_name(contents.entries);
    }
    return contents;
  }

 private:
  [[noreturn]] void fail(std::string message, std::string_view entry = {},
                         std::optional<uint64_t> offset = std::nullopt) const {
    throw Error(ErrorCode::kCorrupt, std::move(message),
                {.path = path_, .entry = std::string(entry), .offset = offset});
  }
  [[noreturn]] void fail_header(std::string message, std::string_view entry = {}) const {
    fail(std::move(message), entry, kHeaderLengthSize);
  }

  // Duplicate names are found where an index of names is built anyway (the
  // flat tree, the extras' name index); this names the first repeated one.
  [[noreturn]] void fail_on_duplicate_name(const std::vector<EntryInfo>& entries) const {
    std::unordered_set<std::string_view> seen;
    for (const EntryInfo& entry : entries) {
      if (!seen.insert(entry.name).second) fail_header("duplicate tensor name", entry.name);
    }
    fail_header("duplicate tensor name");
  }

  // ---- header: length, UTF-8, JSON, types (SafeTensors::read_metadata) ----

  Header parse_header() {
    const std::span<const std::byte> bytes = whole_.bytes();
    if (bytes.size() < kHeaderLengthSize) {
      fail("file of " + std::to_string(bytes.size()) + " bytes is shorter than the 8-byte header length", {}, 0);
    }
    Header header;
    for (size_t i = 0; i < kHeaderLengthSize; ++i) header.length |= uint64_t(bytes[i]) << (8 * i);
    if (header.length > kMaxHeaderSize) {
      fail("header length " + std::to_string(header.length) + " exceeds the limit of " +
               std::to_string(kMaxHeaderSize) + " bytes",
           {}, 0);
    }
    if (header.length > bytes.size() - kHeaderLengthSize) {
      fail("header length " + std::to_string(header.length) + " runs past the end of the file (" +
               std::to_string(bytes.size()) + " bytes)",
           {}, 0);
    }
    const auto* text = reinterpret_cast<const char*>(bytes.data() + kHeaderLengthSize);
    const size_t length = static_cast<size_t>(header.length);
    if (!detail::valid_utf8(std::string_view(text, length))) fail_header("header is not valid UTF-8");

    element root;
    if (const auto error = parser_->parse(text, length).get(root)) {
      fail_header(std::string("header is not valid JSON: ") + simdjson::error_message(error));
    }
    object fields;
    if (root.get_object().get(fields)) fail_header("header is not a JSON object");

    header.entries.reserve(fields.size());
    bool seen_metadata = false;
    for (const simdjson::dom::key_value_pair field : fields) {
      if (field.key == kMetadataKey) {
        if (seen_metadata) fail_header("duplicate key \"__metadata__\"");
        seen_metadata = true;
        parse_metadata(field.value, header);
        continue;
      }
      header.entries.push_back(parse_entry(field.key, field.value));
    }
    return header;
  }

  void parse_metadata(const element& value, Header& header) const {
    if (value.is_null()) return;  // serde reads null as Option::None
    object metadata;
    if (value.get_object().get(metadata)) fail_header("\"__metadata__\" is not a JSON object");
    std::unordered_set<std::string_view> keys;
    for (const simdjson::dom::key_value_pair field : metadata) {
      std::string_view text;
      if (field.value.get_string().get(text)) {
        fail_header("metadata value is not a string", "__metadata__." + std::string(field.key));
      }
      if (!keys.insert(field.key).second) {
        fail_header("duplicate metadata key", "__metadata__." + std::string(field.key));
      }
      if (field.key == kCkptKey) header.ckpt_value = text;
      header.metadata.emplace_back(field.key, text);
    }
  }

  // A JSON integer in 0..2^64-1, as serde reads `usize`.
  bool read_unsigned(const element& value, uint64_t& out) const {
    const element_type type = value.type();
    if (type != element_type::INT64 && type != element_type::UINT64) return false;
    return !value.get_uint64().get(out);
  }

  HeaderEntry parse_entry(std::string_view name, const element& value) {
    object info;
    if (value.get_object().get(info)) fail_header("tensor info is not a JSON object", name);
    HeaderEntry entry;
    entry.name = name;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    for (const simdjson::dom::key_value_pair field : info) {
      if (field.key == kDTypeField) {
        if (has_dtype) fail_header("duplicate field \"dtype\"", name);
        has_dtype = true;
        std::string_view code;
        if (field.value.get_string().get(code)) fail_header("\"dtype\" is not a string", name);
        // Most tensors of a file share a dtype: the last code found is
        // tried first.
        if (!last_code_ || code != *last_code_) {
          const std::optional<size_t> rank = reference_rank(code);
          if (!rank) fail_header("unknown dtype " + detail::quoted(code), name);
          last_code_ = code;
          last_rank_ = *rank;
        }
        entry.rank = last_rank_;
      } else if (field.key == kShapeField) {
        if (has_shape) fail_header("duplicate field \"shape\"", name);
        has_shape = true;
        parse_shape(field.value, entry);
      } else if (field.key == kOffsetsField) {
        if (has_offsets) fail_header("duplicate field \"data_offsets\"", name);
        has_offsets = true;
        simdjson::dom::array offsets;
        if (field.value.get_array().get(offsets) || offsets.size() != 2 ||
            !read_unsigned(offsets.at(0).value_unsafe(), entry.begin) ||
            !read_unsigned(offsets.at(1).value_unsafe(), entry.end)) {
          fail_header("\"data_offsets\" is not an array of two non-negative integers", name);
        }
      }
      // Other fields are ignored, as serde ignores unknown fields.
    }
    if (!has_dtype) fail_header("missing field \"dtype\"", name);
    if (!has_shape) fail_header("missing field \"shape\"", name);
    if (!has_offsets) fail_header("missing field \"data_offsets\"", name);
    // Checked arithmetic as Metadata::validate does it: numel, then bits.
    uint64_t numel = 1;
    for (int64_t dimension : entry.shape) {
      entry.size_overflows |= __builtin_mul_overflow(numel, static_cast<uint64_t>(dimension), &numel);
    }
    entry.size_overflows |= __builtin_mul_overflow(numel, uint64_t{kReferenceDTypes[entry.rank].bits}, &entry.nbits);
    return entry;
  }

  void parse_shape(const element& value, HeaderEntry& entry) const {
    simdjson::dom::array dimensions;
    if (value.get_array().get(dimensions)) fail_header("\"shape\" is not an array", entry.name);
    entry.shape.reserve(dimensions.size());
    for (const element dimension : dimensions) {
      uint64_t size;
      if (!read_unsigned(dimension, size)) {
        fail_header("\"shape\" holds something other than a non-negative integer", entry.name);
      }
      if (size > uint64_t(std::numeric_limits<int64_t>::max())) entry.dimension_too_large = true;
      entry.shape.push_back(static_cast<int64_t>(size));
    }
  }

  // ---- layout (Metadata::validate and the file size check) ----

  std::vector<HeaderEntry*> validate_layout(Header& header) const {
    std::vector<HeaderEntry*> order;
    order.reserve(header.entries.size());
    for (HeaderEntry& entry : header.entries) order.push_back(&entry);
    // By data_offsets as the reference sorts; header order breaks ties
    // (zero-size tensors share an offset).
    std::stable_sort(order.begin(), order.end(), [](const HeaderEntry* a, const HeaderEntry* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t start = 0;
    for (const HeaderEntry* entry : order) {
      // Built only for an error: an open of many tensors pays nothing for it.
      const auto offsets = [entry] {
        return "data_offsets [" + std::to_string(entry->begin) + ", " + std::to_string(entry->end) + "]";
      };
      if (entry->begin != start || entry->end < entry->begin) {
        std::string why;
        if (entry->end < entry->begin) {
          why = "end before begin";
        } else if (start == 0) {
          why = "the data must start at offset 0";
        } else if (entry->begin > start) {
          why = "hole of " + std::to_string(entry->begin - start) + " bytes after the previous tensor";
        } else {
          why = "overlaps the previous tensor, which ends at " + std::to_string(start);
        }
        fail("invalid " + offsets() + ": " + why, entry->name, checked_file_offset(entry->begin));
      }
      start = entry->end;
      if (entry->size_overflows) {
        fail("shape × dtype size overflows 64 bits", entry->name, checked_file_offset(entry->begin));
      }
      if (entry->nbits % 8 != 0) {
        fail(std::to_string(entry->nbits) + " bits of " + std::string(kReferenceDTypes[entry->rank].code) +
                 " do not end on a byte boundary",
             entry->name, checked_file_offset(entry->begin));
      }
      if (entry->end - entry->begin != entry->nbits / 8) {
        fail(offsets() + " hold " + std::to_string(entry->end - entry->begin) + " bytes, but " +
                 std::string(kReferenceDTypes[entry->rank].code) + " × shape needs " + std::to_string(entry->nbits / 8),
             entry->name, checked_file_offset(entry->begin));
      }
    }
    uint64_t expected_size;
    if (__builtin_add_overflow(start, data_start_, &expected_size)) {
      fail("data_offsets end at " + std::to_string(start) + ", beyond any file size");
    }
    if (expected_size != file_size()) {
      if (expected_size < file_size()) {
        fail(std::to_string(file_size() - expected_size) + " trailing bytes after the last tensor", {}, expected_size);
      }
      fail("data is shorter than declared: tensors need " + std::to_string(expected_size) +
               " bytes of file, it has " + std::to_string(file_size()),
           {}, file_size());
    }
    return order;
  }

  std::optional<uint64_t> checked_file_offset(uint64_t data_offset) const {
    uint64_t offset;
    if (__builtin_add_overflow(data_start_, data_offset, &offset)) return std::nullopt;
    return offset;
  }

  void refuse_unsupported(const std::vector<HeaderEntry*>& order) const {
    for (const HeaderEntry* entry : order) {
      const std::string_view code = kReferenceDTypes[entry->rank].code;
      if (!dtype_from_safetensors(code)) {
        throw Error(ErrorCode::kUnsupported, "dtype " + std::string(code) + " has no ckpt dtype",
                    {.path = path_, .entry = std::string(entry->name), .offset = data_start_ + entry->begin});
      }
      if (entry->dimension_too_large) {
        throw Error(ErrorCode::kUnsupported, "a dimension exceeds ckpt's limit of 2^63-1",
                    {.path = path_, .entry = std::string(entry->name), .offset = data_start_ + entry->begin});
      }
      // A 0-d F4 tensor (4 bits) failed validate_layout() already: the
      // reference refuses it too. An odd last dimension is valid safetensors
      // that ckpt (and torch) cannot hold as whole packed bytes.
      if (code == kFloat4Code && entry->shape.back() % kFloat4PerByte != 0) {
        throw Error(ErrorCode::kUnsupported,
                    "F4 tensor of shape " + shape_text(entry->shape) +
                        " has an odd last dimension; ckpt holds F4 as float4_e2m1fn_x2, two values per byte "
                        "along the last dimension (as torch does)",
                    {.path = path_, .entry = std::string(entry->name), .offset = data_start_ + entry->begin});
      }
    }
  }

  // ---- ckpt's extras ----

  void read_extras(std::string_view value, std::vector<Tensor>& tensors, Contents& contents) {
    const std::string entry = "__metadata__." + std::string(kCkptKey);
    auto bad = [&](const std::string& message) { fail_header("ckpt metadata: " + message, entry); };
    ReusedParser parser(ReusedParser::kExtras);
    element root;
    if (const auto error = parser->parse(value.data(), value.size()).get(root)) {
      bad(std::string("not valid JSON: ") + simdjson::error_message(error));
    }
    object fields;
    if (root.get_object().get(fields)) bad("not a JSON object");
    std::optional<element> version, tree, checksum, checksums, dtypes, aliases_value;
    detail::read_fields(fields,
                        {{kVersionField, &version},
                         {kTreeField, &tree},
                         {kChecksumField, &checksum},
                         {kChecksumsField, &checksums},
                         {kDTypesField, &dtypes},
                         {kAliasesField, &aliases_value}},
                        bad);
    const int64_t version_number =
        detail::read_version(version, kCkptVersion, "extras", {.path = path_, .entry = entry}, bad);
    if (!tree) bad("\"tree\" is missing");
    contents.format_version = static_cast<int>(version_number);

    std::unordered_map<std::string_view, size_t> index;
    index.reserve(contents.entries.size());
    for (size_t i = 0; i < contents.entries.size(); ++i) {
      if (!index.emplace(contents.entries[i].name, i).second) fail_on_duplicate_name(contents.entries);
    }
    std::vector<Alias> aliases;
    std::unordered_map<std::string_view, size_t> alias_index;  // name -> position in `aliases`
    if (aliases_value) {
      if (version_number < kCkptAliasesVersion) {
        bad("\"aliases\" needs version " + std::to_string(kCkptAliasesVersion) + " or later");
      }
      aliases = read_aliases(*aliases_value, index, bad);
      alias_index.reserve(aliases.size());
      for (size_t i = 0; i < aliases.size(); ++i) alias_index.emplace(aliases[i].name, i);
    }
    auto find = [&](std::string_view name, std::string_view what) {
      const auto found = index.find(name);
      if (found == index.end()) {
        if (alias_index.contains(name)) {
          bad(std::string(what) + " names alias " + detail::quoted(name) + "; only stored tensors belong there");
        }
        bad(std::string(what) + " names tensor " + detail::quoted(name) + ", which is not in the file");
      }
      return found->second;
    };

    if (dtypes) apply_dtype_overrides(*dtypes, tensors, contents, find, bad);
    if (checksum) read_checksums(*checksum, checksums, tensors, contents, find, bad);

    // An alias is a Tensor over its stored tensor's Buffer (same_memory), so
    // a stored tensor with aliases is copied out of `tensors`, not moved.
    std::vector<bool> used(tensors.size(), false);
    std::vector<bool> aliased(tensors.size(), false);
    for (const Alias& alias : aliases) aliased[alias.stored] = true;
    const detail::TensorResolver resolve = [&](std::string_view name) -> Tensor {
      if (const auto found = alias_index.find(name); found != alias_index.end()) {
        Alias& alias = aliases[found->second];
        if (alias.used) bad("the tree names alias " + detail::quoted(name) + " twice");
        alias.used = true;
        return tensors[alias.stored];
      }
      const size_t i = find(name, "the tree");
      if (used[i]) bad("the tree names tensor " + detail::quoted(name) + " twice");
      used[i] = true;
      return aliased[i] ? tensors[i] : std::move(tensors[i]);
    };
    try {
      contents.tree = detail::tree_from_json(*tree, resolve);
    } catch (Error& error) {
      if (!error.context().path.empty()) throw;
      fail_header("ckpt metadata: " + error.message(), error.context().entry);
    }
    for (size_t i = 0; i < used.size(); ++i) {
      if (!used[i]) bad("tensor \"" + contents.entries[i].name + "\" is missing from the tree");
    }
    for (const Alias& alias : aliases) {
      if (!alias.used) bad("alias " + detail::quoted(alias.name) + " is missing from the tree");
    }
  }

  // One entry of "aliases": a tensor leaf that shares a stored tensor's bytes.
  struct Alias {
    std::string_view name;  // views the extras document
    size_t stored;          // index of the stored tensor (file order)
    bool used = false;      // named by the tree
  };

  // "aliases": {ALIAS: STORED, ...}, in document order. Each alias must name
  // a stored tensor, never another alias (no chains, no cycles) nor itself,
  // and must not be a stored tensor's name.
  template <class Bad>
  std::vector<Alias> read_aliases(const element& value, const std::unordered_map<std::string_view, size_t>& index,
                                  Bad& bad) const {
    object fields;
    if (value.get_object().get(fields)) bad("\"aliases\" is not an object");
    std::vector<std::pair<std::string_view, std::string_view>> pairs;
    std::unordered_set<std::string_view> names;
    for (const simdjson::dom::key_value_pair field : fields) {
      const std::string quoted = "alias " + detail::quoted(field.key);
      std::string_view stored;
      if (field.value.get_string().get(stored)) bad(quoted + " is not a string naming a stored tensor");
      if (!names.insert(field.key).second) bad("\"aliases\" names " + quoted + " twice");
      if (index.contains(field.key)) bad(quoted + " is also the name of a stored tensor");
      if (stored == field.key) bad(quoted + " names itself");
      pairs.emplace_back(field.key, stored);
    }
    std::vector<Alias> aliases;
    aliases.reserve(pairs.size());
    for (const auto& [name, stored] : pairs) {
      const auto found = index.find(stored);
      if (found == index.end()) {
        const std::string quoted = "alias " + detail::quoted(name) + " names ";
        if (names.contains(stored)) bad(quoted + "alias " + detail::quoted(stored) + "; aliases name stored tensors only");
        bad(quoted + "tensor " + detail::quoted(stored) + ", which is not in the file");
      }
      aliases.push_back({name, found->second});
    }
    return aliases;
  }

  template <class Find, class Bad>
  void apply_dtype_overrides(const element& value, std::vector<Tensor>& tensors, Contents& contents, Find& find,
                             Bad& bad) const {
    object overrides;
    if (value.get_object().get(overrides)) bad("\"dtypes\" is not an object");
    std::unordered_set<std::string_view> seen;
    for (const simdjson::dom::key_value_pair field : overrides) {
      const size_t i = find(field.key, "\"dtypes\"");
      if (!seen.insert(field.key).second) bad("\"dtypes\" names a tensor twice");
      std::string_view name;
      if (field.value.get_string().get(name) || dtype_from_name(name) != DType::kComplex128) {
        bad("\"dtypes\" may only hold \"complex128\" (for " + detail::quoted(field.key) + ")");
      }
      EntryInfo& info = contents.entries[i];
      if (info.dtype != DType::kFloat64 || info.shape.empty() || info.shape.back() != 2) {
        bad("complex128 tensor \"" + info.name + "\" is not stored as F64 with a last dimension of 2");
      }
      info.dtype = DType::kComplex128;
      info.shape.pop_back();
      tensors[i] = Tensor(DType::kComplex128, info.shape, tensors[i].buffer());
    }
  }

  template <class Find, class Bad>
  void read_checksums(const element& kind_value, const std::optional<element>& sums_value,
                      const std::vector<Tensor>& tensors, Contents& contents, Find& find, Bad& bad) const {
    std::string_view kind_name;
    if (kind_value.get_string().get(kind_name)) bad("\"checksum\" is not a string");
    const ChecksumKind kind = checksum_from_name(kind_name);  // kUnsupported if unknown
    if (kind == ChecksumKind::kNone) return;
    object sums;
    if (!sums_value || sums_value->get_object().get(sums)) bad("\"checksums\" is missing or not an object");
    const size_t width = detail::checksum_hex_width(kind);
    size_t count = 0;
    for (const simdjson::dom::key_value_pair field : sums) {
      // The writer lists them in file order; look up only when that fails.
      const size_t i = count < contents.entries.size() && contents.entries[count].name == field.key
                           ? count
                           : find(field.key, "\"checksums\"");
      std::string_view hex;
      if (field.value.get_string().get(hex) || hex.size() != width ||
          hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
        bad("checksum of " + detail::quoted(field.key) + " is not " + std::to_string(width) + " lower-case hex digits");
      }
      if (!contents.entries[i].checksum.empty()) bad("\"checksums\" names a tensor twice");
      contents.entries[i].checksum = hex;
      ++count;
    }
    if (count != tensors.size()) bad("\"checksums\" does not cover every tensor");
    contents.checksum = kind;
    if (!options_.verify) return;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const EntryInfo& info = contents.entries[i];
      const std::string actual = detail::checksum_hex(kind, tensors[i].bytes());
      const std::string& stored = info.checksum;
      if (actual != stored) {
        fail("checksum mismatch: stored " + std::string(kind_name) + " " + stored + ", the data gives " + actual,
             info.name, info.offset);
      }
    }
  }

  const std::filesystem::path& path_;
  const LoadOptions& options_;
  uint64_t file_size() const { return whole_.size(); }

  Buffer whole_;
  ReusedParser parser_{ReusedParser::kHeader};
  std::optional<std::string_view> last_code_;  // the dtype code parse_entry() last looked up
  size_t last_rank_ = 0;
  uint64_t data_start_ = 0;
};

}  // namespace

bool detect_header(std::span<const std::byte> head, uint64_t file_size) {
  if (head.size() < kHeaderLengthSize || file_size < kHeaderLengthSize) return false;
  uint64_t length = 0;
  for (size_t i = 0; i < kHeaderLengthSize; ++i) length |= uint64_t(head[i]) << (8 * i);
  if (length > kMaxHeaderSize || length > file_size - kHeaderLengthSize) return false;
  const size_t end = static_cast<size_t>(std::min<uint64_t>(head.size(), kHeaderLengthSize + length));
  for (size_t i = kHeaderLengthSize; i < end; ++i) {
    const char c = static_cast<char>(head[i]);
    if (c == '{') return true;
    if (!is_json_whitespace(c)) return false;
  }
  return false;
}

Contents read_file(const std::filesystem::path& path, const LoadOptions& options) {
  const std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(path);
  // The header's pages read alone before the reader parses it through the
  // mapping, where a fault would read a readahead window of megabytes
  // around it (for every shard file a sharded load opens for its boxes). A
  // hint only: the reader checks the length.
  if (file->size() >= kHeaderLengthSize) {
    std::array<std::byte, kHeaderLengthSize> prefix;
    file->copy_out_alone(file->bytes().data(), prefix);
    uint64_t length = 0;
    for (size_t i = 0; i < kHeaderLengthSize; ++i) length |= uint64_t(prefix[i]) << (8 * i);
    file->prefetch_alone(0, kHeaderLengthSize + std::min<uint64_t>(length, kMaxHeaderSize));
  }
  Reader reader(path, file->slice(0, file->size()), options);
  return reader.read();
}

Contents read_bytes(const Buffer& bytes, const std::filesystem::path& label, const LoadOptions& options) {
  Reader reader(label, bytes, options);
  return reader.read();
}

}  // namespace ckpt::safetensors_detail
