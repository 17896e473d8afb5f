#include "formats/orbax/zarr.h"

#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ckpt/cast.h"
#include "core/json_writer.h"
#include "formats/orbax/compression.h"

namespace ckpt::orbax_detail {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

[[noreturn]] void fail(ErrorCode code, const std::string& message, const ErrorContext& context) {
  throw Error(code, ".zarray: " + message, context);
}

// "<f4", "|b1", "bfloat16", "float8_e4m3fn" -> DType.
DType parse_dtype(std::string_view text, const ErrorContext& context) {
  for (const DTypeInfo& info : all_dtypes()) {
    if (info.numpy_descr.empty()) {
      if (text == info.name) return info.dtype;
      continue;
    }
    const std::string_view body = info.numpy_descr.substr(1);
    if (text.size() == info.numpy_descr.size() && text.substr(1) == body) {
      if (text[0] == '<' || text[0] == '|') return info.dtype;
      if (text[0] == '>' && info.size == 1) return info.dtype;
      if (text[0] == '>') fail(ErrorCode::kUnsupported, "big-endian dtype \"" + std::string(text) + "\"", context);
    }
  }
  fail(ErrorCode::kUnsupported, "unknown dtype \"" + std::string(text) + "\"", context);
}

Shape parse_dimensions(element value, const char* field, bool positive, const ErrorContext& context) {
  simdjson::dom::array items;
  if (value.get_array().get(items)) fail(ErrorCode::kCorrupt, std::string(field) + " is not a list", context);
  Shape out;
  for (element item : items) {
    int64_t dimension = 0;
    if (item.get_int64().get(dimension)) fail(ErrorCode::kCorrupt, std::string(field) + " holds a non-integer", context);
    if (dimension < 0 || (positive && dimension == 0)) {
      fail(ErrorCode::kCorrupt, std::string(field) + " holds " + std::to_string(dimension), context);
    }
    out.push_back(dimension);
  }
  return out;
}

// The fill value as a 0-d tensor of `dtype`.
Tensor parse_fill(element value, DType dtype, const ErrorContext& context) {
  Tensor source;
  switch (value.type()) {
    case element_type::NULL_VALUE:
      return {};
    case element_type::BOOL: {
      const bool flag = value.get_bool().value_unsafe();
      source = Tensor::from_bytes(DType::kBool, {}, std::as_bytes(std::span(&flag, 1)));
      break;
    }
    case element_type::INT64: {
      const int64_t number = value.get_int64().value_unsafe();
      source = Tensor::from_bytes(DType::kInt64, {}, std::as_bytes(std::span(&number, 1)));
      break;
    }
    case element_type::UINT64: {
      const uint64_t number = value.get_uint64().value_unsafe();
      source = Tensor::from_bytes(DType::kUInt64, {}, std::as_bytes(std::span(&number, 1)));
      break;
    }
    case element_type::DOUBLE:
    case element_type::STRING: {
      double number = 0;
      if (value.is_double()) {
        number = value.get_double().value_unsafe();
      } else {
        const std::string_view text = value.get_string().value_unsafe();
        if (text == "NaN") {
          number = std::numeric_limits<double>::quiet_NaN();
        } else if (text == "Infinity") {
          number = std::numeric_limits<double>::infinity();
        } else if (text == "-Infinity") {
          number = -std::numeric_limits<double>::infinity();
        } else {
          fail(ErrorCode::kUnsupported, "fill_value \"" + std::string(text) + "\"", context);
        }
      }
      source = Tensor::from_bytes(DType::kFloat64, {}, std::as_bytes(std::span(&number, 1)));
      break;
    }
    default:
      fail(ErrorCode::kUnsupported, "fill_value of this kind (a list or object)", context);
  }
  return cast(source, dtype);
}

// Copies the part of a decoded chunk at grid position `index` that lies
// inside the array into `out` (the whole array, C order).
void copy_chunk(const ZarrArray& array, std::span<const int64_t> index, std::span<const std::byte> chunk,
                std::span<std::byte> out) {
  const size_t rank = array.shape.size();
  const size_t item = dtype_size(array.dtype);
  std::vector<uint64_t> out_stride(rank, item), chunk_stride(rank, item), extent(rank);
  for (size_t d = rank; d-- > 1;) {
    out_stride[d - 1] = out_stride[d] * static_cast<uint64_t>(array.shape[d]);
    chunk_stride[d - 1] = chunk_stride[d] * static_cast<uint64_t>(array.chunks[d]);
  }
  uint64_t out_base = 0;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t origin = index[d] * array.chunks[d];
    extent[d] = static_cast<uint64_t>(std::min(array.chunks[d], array.shape[d] - origin));
    out_base += static_cast<uint64_t>(origin) * out_stride[d];
  }
  const uint64_t run = extent[rank - 1] * item;
  std::vector<uint64_t> position(rank, 0);
  while (true) {
    uint64_t out_offset = out_base, chunk_offset = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      out_offset += position[d] * out_stride[d];
      chunk_offset += position[d] * chunk_stride[d];
    }
    std::memcpy(out.data() + out_offset, chunk.data() + chunk_offset, run);
    size_t d = rank - 1;
    while (d-- > 0) {
      if (++position[d] < extent[d]) break;
      position[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
}

// Writes the fill value over the chunk's region (a missing chunk).
std::vector<std::byte> fill_chunk(const ZarrArray& array, uint64_t chunk_bytes) {
  std::vector<std::byte> chunk(chunk_bytes, std::byte{0});
  if (array.fill.has_data()) {
    const auto value = array.fill.bytes();
    for (uint64_t at = 0; at < chunk_bytes; at += value.size()) std::memcpy(chunk.data() + at, value.data(), value.size());
  }
  return chunk;
}

}  // namespace

ZarrArray parse_zarray(std::string_view json, const ErrorContext& context) {
  simdjson::dom::parser parser;
  element root;
  if (parser.parse(json.data(), json.size()).get(root)) fail(ErrorCode::kCorrupt, "not valid JSON", context);
  simdjson::dom::object object;
  if (root.get_object().get(object)) fail(ErrorCode::kCorrupt, "not a JSON object", context);
  const auto field = [&](const char* name) -> element {
    element value;
    if (object[name].get(value)) fail(ErrorCode::kCorrupt, std::string("lacks \"") + name + "\"", context);
    return value;
  };
  int64_t format = 0;
  if (field("zarr_format").get_int64().get(format) || format != 2) {
    fail(ErrorCode::kUnsupported, "zarr_format is not 2", context);
  }
  ZarrArray array;
  std::string_view dtype;
  if (field("dtype").get_string().get(dtype)) {
    fail(ErrorCode::kUnsupported, "dtype is not a string (structured dtypes are not read)", context);
  }
  array.dtype = parse_dtype(dtype, context);
  array.shape = parse_dimensions(field("shape"), "shape", false, context);
  array.chunks = parse_dimensions(field("chunks"), "chunks", true, context);
  if (array.chunks.size() != array.shape.size()) {
    fail(ErrorCode::kCorrupt, "chunks has " + std::to_string(array.chunks.size()) + " dimensions, shape " +
                                  std::to_string(array.shape.size()), context);
  }
  const element compressor = field("compressor");
  if (!compressor.is_null()) {
    std::string_view id;
    if (compressor["id"].get_string().get(id)) fail(ErrorCode::kCorrupt, "compressor lacks an id", context);
    if (id != "zstd") fail(ErrorCode::kUnsupported, "compressor \"" + std::string(id) + "\" (ckpt reads zstd or none)", context);
    array.zstd = true;
  }
  element filters;
  if (!object["filters"].get(filters) && !filters.is_null()) {
    simdjson::dom::array list;
    if (filters.get_array().get(list) || list.size() != 0) fail(ErrorCode::kUnsupported, "filters are not read", context);
  }
  std::string_view order = "C";
  if (field("order").get_string().get(order) || order != "C") {
    fail(ErrorCode::kUnsupported, "order \"" + std::string(order) + "\" (ckpt reads C order)", context);
  }
  element separator;
  if (!object["dimension_separator"].get(separator)) {
    std::string_view text;
    if (separator.get_string().get(text) || (text != "." && text != "/")) {
      fail(ErrorCode::kCorrupt, "dimension_separator is neither \".\" nor \"/\"", context);
    }
    array.separator = text[0];
  }
  array.fill = parse_fill(field("fill_value"), array.dtype, context);
  return array;
}

std::string chunk_key(const ZarrArray& array, std::span<const int64_t> index) {
  if (index.empty()) return "0";
  std::string key;
  for (size_t d = 0; d < index.size(); ++d) {
    if (d > 0) key += array.separator;
    key += std::to_string(index[d]);
  }
  return key;
}

Tensor read_zarr_array(const ZarrArray& array, const ChunkSource& source, const ErrorContext& context) {
  const size_t item = dtype_size(array.dtype);
  uint64_t nbytes = 0, chunk_bytes = 0;
  try {
    nbytes = checked_numel(array.shape, item) * item;  // checked_numel counts elements
    chunk_bytes = checked_numel(array.chunks, item) * item;
  } catch (const Error&) {
    fail(ErrorCode::kCorrupt, "shape or chunks overflow 64 bits", context);
  }
  if (nbytes == 0) return Tensor::empty(array.dtype, array.shape);
  const auto chunk_context = [&](const std::string& key) {
    ErrorContext out = context;
    out.entry += "/" + key;
    return out;
  };
  // One chunk covering the array: no reassembly.
  if (array.chunks == array.shape) {
    const std::string key = chunk_key(array, std::vector<int64_t>(array.shape.size(), 0));
    std::optional<Buffer> stored = source(key);
    if (!stored) return Tensor::from_bytes(array.dtype, array.shape, fill_chunk(array, nbytes));
    if (!array.zstd) {
      if (stored->size() != nbytes) {
        throw Error(ErrorCode::kCorrupt, "chunk holds " + std::to_string(stored->size()) + " bytes, expected " +
                                             std::to_string(nbytes), chunk_context(key));
      }
      return Tensor(array.dtype, array.shape, std::move(*stored));
    }
    Tensor tensor = Tensor::empty(array.dtype, array.shape);
    zstd_decode_exact(stored->bytes(), tensor.mutable_bytes(), chunk_context(key));
    return tensor;
  }
  Tensor tensor = Tensor::empty(array.dtype, array.shape);
  const size_t rank = array.shape.size();
  std::vector<int64_t> grid(rank), index(rank, 0);
  for (size_t d = 0; d < rank; ++d) grid[d] = (array.shape[d] + array.chunks[d] - 1) / array.chunks[d];
  while (true) {
    const std::string key = chunk_key(array, index);
    std::optional<Buffer> stored = source(key);
    std::vector<std::byte> decoded;
    std::span<const std::byte> chunk;
    if (!stored) {
      decoded = fill_chunk(array, chunk_bytes);
      chunk = decoded;
    } else if (array.zstd) {
      decoded = zstd_decode(stored->bytes(), chunk_bytes, chunk_context(key));
      chunk = decoded;
    } else {
      chunk = stored->bytes();
    }
    if (chunk.size() != chunk_bytes) {
      throw Error(ErrorCode::kCorrupt, "chunk holds " + std::to_string(chunk.size()) + " bytes, expected " +
                                           std::to_string(chunk_bytes), chunk_context(key));
    }
    copy_chunk(array, index, chunk, tensor.mutable_bytes());
    size_t d = rank;
    while (d-- > 0) {
      if (++index[d] < grid[d]) break;
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
  return tensor;
}

std::string zarray_json(DType dtype, const Shape& shape, const Shape& chunks, bool zstd, int zstd_level) {
  const DTypeInfo& info = dtype_info(dtype);
  detail::JsonWriter out;
  out.begin_object();
  out.key("chunks");
  out.begin_array();
  for (int64_t dimension : chunks) out.integer(dimension);
  out.end_array();
  out.key("compressor");
  if (zstd) {
    out.begin_object();
    out.key("id");
    out.string("zstd");
    out.key("level");
    out.integer(zstd_level);
    out.end_object();
  } else {
    out.null();
  }
  out.key("dimension_separator");
  out.string(".");
  out.key("dtype");
  out.string(info.numpy_descr.empty() ? info.name : info.numpy_descr);
  out.key("fill_value");
  out.null();
  out.key("filters");
  out.null();
  out.key("order");
  out.string("C");
  out.key("shape");
  out.begin_array();
  for (int64_t dimension : shape) out.integer(dimension);
  out.end_array();
  out.key("zarr_format");
  out.integer(2);
  out.end_object();
  return out.take();
}

}  // namespace ckpt::orbax_detail
