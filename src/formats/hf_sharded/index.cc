#include "formats/hf_sharded/index.h"

#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_set>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "formats/extras_json.h"
#include "formats/hf_sharded/layout.h"

namespace ckpt::hf_sharded_detail {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

[[noreturn]] void corrupt(const std::filesystem::path& path, const std::string& entry, const std::string& message) {
  throw Error(ErrorCode::kCorrupt, message, {.path = path, .entry = entry});
}

// A list of non-negative integers that fit int64 (shapes, offsets, sizes).
std::vector<int64_t> read_dimensions(element value, const std::filesystem::path& path, const std::string& entry,
                                     std::string_view what) {
  array items;
  if (value.get_array().get(items)) corrupt(path, entry, std::string(what) + " is not a list of integers");
  std::vector<int64_t> result;
  for (element item : items) {
    uint64_t number = 0;
    if (item.get_uint64().get(number) || number > static_cast<uint64_t>(INT64_MAX)) {
      corrupt(path, entry, std::string(what) + " holds something other than a non-negative integer");
    }
    result.push_back(static_cast<int64_t>(number));
  }
  return result;
}

std::string read_string(element value, const std::filesystem::path& path, const std::string& entry,
                        std::string_view what) {
  std::string_view text;
  if (value.get_string().get(text)) corrupt(path, entry, std::string(what) + " is not a string");
  return std::string(text);
}

std::string read_file_name(element value, const std::filesystem::path& path, const std::string& entry) {
  std::string name = read_string(value, path, entry, "the shard file name");
  if (!is_shard_file_name(name)) {
    corrupt(path, entry, "the shard file name '" + name + "' is not a file of the checkpoint's directory");
  }
  return name;
}

PieceRecord read_piece(element value, size_t ndim, const std::filesystem::path& path, const std::string& entry) {
  object fields;
  if (value.get_object().get(fields)) corrupt(path, entry, "a piece is not a JSON object");
  std::optional<element> file, key, offsets, sizes;
  const detail::BadDocument bad = [&](const std::string& message) { corrupt(path, entry, "a piece: " + message); };
  detail::read_fields(
      fields, {{kFileField, &file}, {kKeyField, &key}, {kOffsetsField, &offsets}, {kSizesField, &sizes}}, bad);
  if (!file || !key || !offsets || !sizes) bad("needs \"file\", \"key\", \"offsets\" and \"sizes\"");
  PieceRecord piece;
  piece.file = read_file_name(*file, path, entry);
  piece.key = read_string(*key, path, entry, "a piece's key");
  piece.box.offsets = read_dimensions(*offsets, path, entry, "a piece's offsets");
  piece.box.sizes = read_dimensions(*sizes, path, entry, "a piece's sizes");
  if (piece.box.offsets.size() != ndim || piece.box.sizes.size() != ndim) {
    corrupt(path, entry,
            "the piece '" + piece.key + "' has " + std::to_string(piece.box.offsets.size()) + " offsets and " +
                std::to_string(piece.box.sizes.size()) + " sizes for a tensor of " + std::to_string(ndim) +
                " dimensions");
  }
  return piece;
}

SliceRecord read_slice(std::string_view name, element value, const std::filesystem::path& path) {
  const std::string entry = std::string(kCkptKey) + "." + std::string(kSlicesField) + "." + std::string(name);
  object fields;
  if (value.get_object().get(fields)) corrupt(path, entry, "a sliced tensor's record is not a JSON object");
  std::optional<element> dtype, shape, pieces;
  const detail::BadDocument bad = [&](const std::string& message) { corrupt(path, entry, message); };
  detail::read_fields(fields, {{kDTypeField, &dtype}, {kShapeField, &shape}, {kPiecesField, &pieces}}, bad);
  if (!dtype || !shape || !pieces) bad("a sliced tensor needs \"dtype\", \"shape\" and \"pieces\"");
  SliceRecord slice;
  slice.name = std::string(name);
  const std::string dtype_text = read_string(*dtype, path, entry, "the dtype");
  const std::optional<DType> known = dtype_from_name(dtype_text);
  if (!known) corrupt(path, entry, "unknown dtype '" + dtype_text + "'");
  slice.dtype = *known;
  slice.shape = read_dimensions(*shape, path, entry, "the shape");
  array items;
  if (pieces->get_array().get(items)) bad("\"pieces\" is not a list");
  for (element item : items) slice.pieces.push_back(read_piece(item, slice.shape.size(), path, entry));
  if (slice.pieces.empty()) bad("a sliced tensor has no pieces");
  return slice;
}

void read_record(element value, ShardIndex& index, const std::filesystem::path& path) {
  const std::string entry(kCkptKey);
  const detail::BadDocument bad = [&](const std::string& message) { corrupt(path, entry, message); };
  object fields;
  if (value.get_object().get(fields)) bad("ckpt's record is not a JSON object");
  std::optional<element> version, tree, slices, added;
  detail::read_fields(fields,
                      {{kVersionField, &version},
                       {kTreeField, &tree},
                       {kSlicesField, &slices},
                       {kAddedMetadataField, &added}},
                      bad);
  index.has_record = true;
  index.version = detail::read_version(version, kCkptVersion, "sharded index", {.path = path, .entry = entry}, bad);
  if (tree) index.tree = read_string(*tree, path, entry + "." + std::string(kTreeField), "the tree skeleton");
  if (added) {
    array keys;
    if (added->get_array().get(keys)) bad("\"added_metadata\" is not a list");
    for (element key : keys) index.added_metadata.push_back(read_string(key, path, entry, "an added metadata key"));
  }
  if (slices) {
    object records;
    if (slices->get_object().get(records)) bad("\"slices\" is not a JSON object");
    for (const simdjson::dom::key_value_pair field : records) {
      index.slices.push_back(read_slice(field.key, field.value, path));
    }
  }
}

// Every name is stored in one place: a tensor of weight_map, a sliced
// tensor, or a piece key of one file.
void check_names(const ShardIndex& index, const std::filesystem::path& path) {
  std::unordered_set<std::string_view> whole;
  for (const auto& [name, file] : index.weight_map) {
    if (!whole.insert(name).second) {
      corrupt(path, std::string(kWeightMapKey) + "." + name, "the tensor '" + name + "' is listed twice in weight_map");
    }
    if (name.starts_with(kPieceKeyPrefix)) {
      corrupt(path, std::string(kWeightMapKey) + "." + name,
              "a whole tensor is named with the prefix of the pieces of sharded tensors ('" +
                  std::string(kPieceKeyPrefix) + "')");
    }
  }
  std::unordered_set<std::string_view> sliced;
  std::set<std::pair<std::string_view, std::string_view>> keys;  // (file, key)
  for (const SliceRecord& slice : index.slices) {
    const std::string entry = std::string(kCkptKey) + "." + std::string(kSlicesField) + "." + slice.name;
    if (!sliced.insert(slice.name).second) corrupt(path, entry, "the sliced tensor is listed twice");
    if (whole.count(slice.name)) corrupt(path, entry, "the tensor is both in weight_map and sliced");
    for (const PieceRecord& piece : slice.pieces) {
      if (whole.count(piece.key)) {
        corrupt(path, entry, "the piece key '" + piece.key + "' is also a whole tensor of weight_map");
      }
      if (!keys.insert({piece.file, piece.key}).second) {
        corrupt(path, entry, "the piece key '" + piece.key + "' of '" + piece.file + "' is used twice");
      }
    }
  }
}

// Python's json.dumps(..., indent=2) of compact JSON text (as JsonWriter
// writes it): one member per line, ": " after keys, empty containers as {}
// and [], every character outside printable ASCII as \uXXXX (ensure_ascii).
std::string python_indented(std::string_view compact) {
  std::string out;
  out.reserve(compact.size() * 2);
  size_t depth = 0;
  auto newline = [&] {
    out += '\n';
    out.append(depth * 2, ' ');
  };
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    if (c == '"') {
      out += '"';
      for (++i; i < compact.size() && compact[i] != '"'; ++i) {
        const auto byte = static_cast<unsigned char>(compact[i]);
        if (compact[i] == '\\') {
          out += compact[i];
          out += compact[++i];
          continue;
        }
        if (byte >= 0x20 && byte < 0x7f) {
          out += compact[i];
          continue;
        }
        // A UTF-8 sequence (JsonWriter escaped control characters already;
        // DEL stands alone): its code point, as one or two \u escapes.
        uint32_t code = byte;
        size_t extra = byte >= 0xf0 ? 3 : byte >= 0xe0 ? 2 : byte >= 0xc0 ? 1 : 0;
        if (extra > 0) code = byte & (0x3f >> extra);
        for (; extra > 0 && i + 1 < compact.size(); --extra) code = (code << 6) | (compact[++i] & 0x3f);
        char text[16];
        if (code >= 0x10000) {
          code -= 0x10000;
          std::snprintf(text, sizeof text, "\\u%04x\\u%04x", 0xd800 + (code >> 10), 0xdc00 + (code & 0x3ff));
        } else {
          std::snprintf(text, sizeof text, "\\u%04x", code);
        }
        out += text;
      }
      out += '"';
    } else if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      if (i + 1 < compact.size() && compact[i + 1] == close) {
        out += c;
        out += close;
        ++i;
      } else {
        out += c;
        ++depth;
        newline();
      }
    } else if (c == '}' || c == ']') {
      --depth;
      newline();
      out += c;
    } else if (c == ',') {
      out += ',';
      newline();
    } else if (c == ':') {
      out += ": ";
    } else {
      out += c;
    }
  }
  return out;
}

void write_integers(detail::JsonWriter& out, const std::vector<int64_t>& values) {
  out.begin_array();
  for (int64_t value : values) out.integer(value);
  out.end_array();
}

}  // namespace

bool is_shard_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

std::string shard_file_name(size_t number, size_t count) {
  char text[64];
  std::snprintf(text, sizeof text, "-%0*zu-of-%0*zu", kShardNumberDigits, number, kShardNumberDigits, count);
  return std::string(kShardPrefix) + text + std::string(kShardExtension);
}

std::string piece_key(std::string_view name, const std::vector<int64_t>& offsets) {
  std::string key = std::string(kPieceKeyPrefix) + std::string(name) + "/";
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (i > 0) key += ',';
    key += std::to_string(offsets[i]);
  }
  return key;
}

ShardIndex parse_index(std::string_view text, const std::filesystem::path& path) {
  simdjson::dom::parser parser;
  element root;
  if (const auto error = parser.parse(text.data(), text.size()).get(root)) {
    corrupt(path, "", std::string("the index is not valid JSON: ") + simdjson::error_message(error));
  }
  object top;
  if (root.get_object().get(top)) corrupt(path, "", "the index is not a JSON object");
  std::optional<element> metadata, weight_map, record;
  detail::read_fields(top, {{kMetadataKey, &metadata}, {kWeightMapKey, &weight_map}, {kCkptKey, &record}},
                      [&](const std::string& message) { corrupt(path, "", "the index: " + message); });
  ShardIndex index;
  if (!weight_map) corrupt(path, std::string(kWeightMapKey), "the index has no weight_map");
  object map;
  if (weight_map->get_object().get(map)) corrupt(path, std::string(kWeightMapKey), "weight_map is not a JSON object");
  for (const simdjson::dom::key_value_pair field : map) {
    const std::string entry = std::string(kWeightMapKey) + "." + std::string(field.key);
    index.weight_map.emplace_back(std::string(field.key), read_file_name(field.value, path, entry));
  }
  if (metadata && !metadata->is_null()) {
    object fields;
    if (metadata->get_object().get(fields)) corrupt(path, std::string(kMetadataKey), "metadata is not a JSON object");
    for (const simdjson::dom::key_value_pair field : fields) {
      if (field.key == kTotalSizeKey) {
        uint64_t size = 0;
        if (field.value.get_uint64().get(size)) {
          corrupt(path, std::string(kMetadataKey) + "." + std::string(kTotalSizeKey),
                  "total_size is not a non-negative integer");
        }
        index.total_size = size;
      } else if (std::string_view value; !field.value.get_string().get(value)) {
        index.metadata.emplace_back(std::string(field.key), std::string(value));
      }
    }
  }
  if (record) read_record(*record, index, path);
  check_names(index, path);
  return index;
}

std::string index_json(const ShardIndex& index) {
  detail::JsonWriter out;
  out.begin_object();  // keys sorted: "ckpt" < "metadata" < "weight_map"
  if (index.has_record) {
    out.key(kCkptKey);
    out.begin_object();  // "added_metadata" < "slices" < "tree" < "version"
    if (!index.added_metadata.empty()) {
      out.key(kAddedMetadataField);
      out.begin_array();
      for (const std::string& key : index.added_metadata) out.string(key);
      out.end_array();
    }
    if (!index.slices.empty()) {
      std::vector<const SliceRecord*> slices;
      for (const SliceRecord& slice : index.slices) slices.push_back(&slice);
      std::sort(slices.begin(), slices.end(), [](auto* a, auto* b) { return a->name < b->name; });
      out.key(kSlicesField);
      out.begin_object();
      for (const SliceRecord* slice : slices) {
        out.key(slice->name);
        out.begin_object();  // "dtype" < "pieces" < "shape"
        out.key(kDTypeField);
        out.string(dtype_name(slice->dtype));
        out.key(kPiecesField);
        out.begin_array();
        for (const PieceRecord& piece : slice->pieces) {
          out.begin_object();  // "file" < "key" < "offsets" < "sizes"
          out.key(kFileField);
          out.string(piece.file);
          out.key(kKeyField);
          out.string(piece.key);
          out.key(kOffsetsField);
          write_integers(out, piece.box.offsets);
          out.key(kSizesField);
          write_integers(out, piece.box.sizes);
          out.end_object();
        }
        out.end_array();
        out.key(kShapeField);
        write_integers(out, slice->shape);
        out.end_object();
      }
      out.end_object();
    }
    if (index.tree) {
      out.key(kTreeField);
      out.string(*index.tree);
    }
    out.key(kVersionField);
    out.integer(index.version);
    out.end_object();
  }
  out.key(kMetadataKey);
  out.begin_object();
  std::map<std::string, std::string> metadata(index.metadata.begin(), index.metadata.end());
  bool total_written = !index.total_size.has_value();
  for (const auto& [key, value] : metadata) {
    if (!total_written && key > kTotalSizeKey) {
      out.key(kTotalSizeKey);
      out.unsigned_integer(*index.total_size);
      total_written = true;
    }
    out.key(key);
    out.string(value);
  }
  if (!total_written) {
    out.key(kTotalSizeKey);
    out.unsigned_integer(*index.total_size);
  }
  out.end_object();
  out.key(kWeightMapKey);
  out.begin_object();
  std::map<std::string, std::string> weight_map(index.weight_map.begin(), index.weight_map.end());
  for (const auto& [name, file] : weight_map) {
    out.key(name);
    out.string(file);
  }
  out.end_object();
  out.end_object();
  return python_indented(out.text()) + "\n";
}

}  // namespace ckpt::hf_sharded_detail
