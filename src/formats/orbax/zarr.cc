#include "formats/orbax/zarr.h"

#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "ckpt/cast.h"
#include "core/box_copy.h"
#include "core/json_writer.h"
#include "core/text.h"
#include "core/strided.h"
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
      if (text[0] == '>') fail(ErrorCode::kUnsupported, "big-endian dtype " + detail::quoted(text), context);
    }
  }
  fail(ErrorCode::kUnsupported, "unknown dtype " + detail::quoted(text), context);
}

// Which dimensions parse_dimensions accepts: a shape's may be 0, chunks' not.
enum class Dimensions { kNonNegative, kPositive };

Shape parse_dimensions(element value, const char* field, Dimensions allowed, const ErrorContext& context) {
  simdjson::dom::array items;
  if (value.get_array().get(items)) fail(ErrorCode::kCorrupt, std::string(field) + " is not a list", context);
  Shape out;
  for (element item : items) {
    int64_t dimension = 0;
    if (item.get_int64().get(dimension)) fail(ErrorCode::kCorrupt, std::string(field) + " holds a non-integer", context);
    if (dimension < 0 || (allowed == Dimensions::kPositive && dimension == 0)) {
      fail(ErrorCode::kCorrupt, std::string(field) + " holds " + std::to_string(dimension), context);
    }
    out.push_back(dimension);
  }
  return out;
}

// The fill value as a 0-d tensor of `dtype`; nullopt for null.
std::optional<Tensor> parse_fill(element value, DType dtype, const ErrorContext& context) {
  Tensor source;
  switch (value.type()) {
    case element_type::NULL_VALUE:
      return std::nullopt;
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
          fail(ErrorCode::kUnsupported, "fill_value " + detail::quoted(text), context);
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
  std::vector<int64_t> origin(rank), extent(rank);
  for (size_t d = 0; d < rank; ++d) {
    origin[d] = index[d] * array.chunks[d];
    extent[d] = std::min(array.chunks[d], array.shape[d] - origin[d]);
  }
  detail::copy_box({.element_size = dtype_size(array.dtype), .extent = extent, .to = out, .to_shape = array.shape,
                    .to_origin = origin, .from = chunk, .from_shape = array.chunks});
}

// Writes the fill value (zeros when it is null) over `out`, a whole number
// of elements (a missing chunk).
void fill_bytes(const ZarrArray& array, std::span<std::byte> out) {
  if (!array.fill) {
    std::memset(out.data(), 0, out.size());
    return;
  }
  const auto value = array.fill->bytes();
  for (size_t at = 0; at + value.size() <= out.size(); at += value.size()) {
    std::memcpy(out.data() + at, value.data(), value.size());
  }
}

// ckpt's cap on the chunks of one array: every chunk is looked up when the
// array is opened.
constexpr uint64_t kMaxChunks = uint64_t{1} << 22;

// The stored chunks of one array, looked up and size-checked, and how to
// decode them into the array's C-order bytes.
class StoredArray {
 public:
  StoredArray(const ZarrArray& array, const ChunkSource& source, const ErrorContext& context, uint64_t nbytes,
              uint64_t chunk_bytes)
      : array_(array), context_(context), nbytes_(nbytes), chunk_bytes_(chunk_bytes) {
    const size_t rank = array_.shape.size();
    grid_.resize(rank);
    uint64_t count = 1;
    contiguous_ = true;
    for (size_t d = 0; d < rank; ++d) {
      grid_[d] = (array_.shape[d] + array_.chunks[d] - 1) / array_.chunks[d];
      count *= static_cast<uint64_t>(grid_[d]);  // each factor <= numel, and count <= numel (no chunk is empty)
      if (d > 0 && array_.chunks[d] != array_.shape[d]) contiguous_ = false;
    }
    if (count > kMaxChunks) {
      throw Error(ErrorCode::kUnsupported, ".zarray: " + std::to_string(count) + " chunks, more than ckpt's cap of " +
                                               std::to_string(kMaxChunks), context_);
    }
    chunks_.reserve(static_cast<size_t>(count));
    std::vector<int64_t> index(rank, 0);
    for (uint64_t i = 0; i < count; ++i) {
      const std::string key = chunk_key(array_, index);
      std::optional<Buffer> stored = source(key);
      if (stored) check_size(*stored, key);
      chunks_.push_back(std::move(stored));
      next(index);
    }
  }

  // False when a zstd chunk's frames do not state their size: only decoding
  // can check it (check_by_decoding does).
  bool sizes_known() const { return sizes_known_; }
  // True if at least one chunk was written (else the array is all fill).
  bool any_stored() const {
    return std::any_of(chunks_.begin(), chunks_.end(), [](const std::optional<Buffer>& c) { return c.has_value(); });
  }

  // Decodes every stored zstd chunk into one chunk of scratch memory, to
  // check it (a raw chunk's size was checked when it was looked up; a
  // missing chunk is the fill value and needs nothing). Then every size is
  // known.
  void check_by_decoding() {
    if (array_.zstd) {
      std::vector<std::byte> scratch;
      std::vector<int64_t> index(grid_.size(), 0);
      for (size_t i = 0; i < chunks_.size(); ++i) {
        if (chunks_[i]) {
          scratch.resize(static_cast<size_t>(chunk_bytes_));
          zstd_decode_exact(chunks_[i]->bytes(), scratch, chunk_context(chunk_key(array_, index)));
        }
        next(index);
      }
    }
    sizes_known_ = true;
  }
  // The stored bytes of chunk `i` (grid order), nullopt if never written.
  const std::optional<Buffer>& chunk(size_t i) const { return chunks_[i]; }

  // True if the fill value's bytes are all zero (null reads as zeros).
  bool fill_is_zero() const {
    if (!array_.fill) return true;
    const auto value = array_.fill->bytes();
    return std::all_of(value.begin(), value.end(), [](std::byte b) { return b == std::byte{0}; });
  }

  // Decodes every chunk into `out` (the whole array). `zeroed`: `out` reads
  // as zeros already and the fill value is zero, so missing chunks are
  // skipped (memory from Buffer::allocate_zeroed stays untouched there).
  void decode_into(std::span<std::byte> out, bool zeroed = false) const {
    if (out.size() != nbytes_) {
      throw Error(ErrorCode::kInvalidArgument, "decode_into: " + std::to_string(out.size()) + " bytes for an array of " +
                                                   std::to_string(nbytes_), context_);
    }
    std::vector<std::byte> scratch;
    std::vector<int64_t> index = grid_;  // the grid position of chunk i
    std::fill(index.begin(), index.end(), 0);
    for (size_t i = 0; i < chunks_.size(); ++i) {
      if (zeroed && !chunks_[i]) {
        next(index);
        continue;
      }
      if (contiguous_) {
        // Chunk i holds the bytes [i × chunk_bytes, ...) of the array; the
        // last one may be cut by the shape (padding follows).
        const uint64_t begin = i * chunk_bytes_;
        const uint64_t length = std::min(chunk_bytes_, nbytes_ - begin);
        const std::span<std::byte> target = out.subspan(static_cast<size_t>(begin), static_cast<size_t>(length));
        if (length == chunk_bytes_) {
          decode_chunk(i, index, target);
        } else {
          scratch.resize(static_cast<size_t>(chunk_bytes_));
          decode_chunk(i, index, scratch);
          std::memcpy(target.data(), scratch.data(), target.size());
        }
      } else {
        scratch.resize(static_cast<size_t>(chunk_bytes_));
        decode_chunk(i, index, scratch);
        copy_chunk(array_, index, scratch, out);
      }
      next(index);
    }
  }

 private:
  ErrorContext chunk_context(const std::string& key) const {
    ErrorContext out = context_;
    out.entry += "/" + key;
    return out;
  }

  void check_size(const Buffer& stored, const std::string& key) {
    if (!array_.zstd) {
      if (stored.size() != chunk_bytes_) {
        throw Error(ErrorCode::kCorrupt, "chunk holds " + std::to_string(stored.size()) + " bytes, expected " +
                                             std::to_string(chunk_bytes_), chunk_context(key));
      }
      return;
    }
    const std::optional<uint64_t> size = zstd_frames_size(stored.bytes(), chunk_context(key));
    if (!size) {
      sizes_known_ = false;
    } else if (*size != chunk_bytes_) {
      throw Error(ErrorCode::kCorrupt, "zstd chunk decodes to " + std::to_string(*size) + " bytes, expected " +
                                           std::to_string(chunk_bytes_), chunk_context(key));
    }
  }

  // Chunk `i` (grid position `index`), decoded into `out` (chunk_bytes_).
  void decode_chunk(size_t i, std::span<const int64_t> index, std::span<std::byte> out) const {
    const std::optional<Buffer>& stored = chunks_[i];
    if (!stored) {
      fill_bytes(array_, out);
    } else if (array_.zstd) {
      zstd_decode_exact(stored->bytes(), out, chunk_context(chunk_key(array_, index)));
    } else {
      stored->copy_to(out);
    }
  }

  // The next grid position in C order.
  void next(std::span<int64_t> index) const {
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < grid_[d]) return;
      index[d] = 0;
    }
  }

  ZarrArray array_;
  ErrorContext context_;
  uint64_t nbytes_ = 0;
  uint64_t chunk_bytes_ = 0;
  std::vector<int64_t> grid_;
  std::vector<std::optional<Buffer>> chunks_;  // grid order; nullopt: never written
  bool contiguous_ = true;
  bool sizes_known_ = true;
};

// A deferred array: decoded into the caller's memory by copy_to(), or into
// one heap block, once, when its address is first asked for.
class DeferredArrayStorage final : public Storage {
 public:
  DeferredArrayStorage(std::shared_ptr<const StoredArray> array, size_t nbytes)
      : array_(std::move(array)), nbytes_(nbytes) {}
  StorageKind kind() const override { return StorageKind::kDeferred; }
  void copy_out(const std::byte* src, std::span<std::byte> dst) const override {
    if (src != nullptr) {  // a slice of the decoded block
      std::memcpy(dst.data(), src, dst.size());
    } else if (decoded_ready_.load(std::memory_order_acquire)) {
      std::memcpy(dst.data(), decoded_.data(), dst.size());
    } else {
      array_->decode_into(dst);
    }
  }
  const std::byte* materialize() const override {
    std::call_once(once_, [this] {
      // A zero fill value: the missing chunks are the zero pages of a fresh
      // mapping, and cost no memory.
      const bool zeroed = array_->fill_is_zero();
      Buffer buffer = zeroed ? Buffer::allocate_zeroed(nbytes_) : Buffer::allocate(nbytes_);
      array_->decode_into(buffer.mutable_bytes(), zeroed);
      decoded_ = std::move(buffer);
      decoded_ready_.store(true, std::memory_order_release);
    });
    return decoded_.data();
  }

 private:
  std::shared_ptr<const StoredArray> array_;
  size_t nbytes_ = 0;
  mutable std::once_flag once_;
  mutable Buffer decoded_;
  mutable std::atomic<bool> decoded_ready_{false};
};

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
  array.shape = parse_dimensions(field("shape"), "shape", Dimensions::kNonNegative, context);
  array.chunks = parse_dimensions(field("chunks"), "chunks", Dimensions::kPositive, context);
  if (array.chunks.size() != array.shape.size()) {
    fail(ErrorCode::kCorrupt, "chunks has " + std::to_string(array.chunks.size()) + " dimensions, shape " +
                                  std::to_string(array.shape.size()), context);
  }
  const element compressor = field("compressor");
  if (!compressor.is_null()) {
    std::string_view id;
    if (compressor["id"].get_string().get(id)) fail(ErrorCode::kCorrupt, "compressor lacks an id", context);
    if (id != "zstd") fail(ErrorCode::kUnsupported, "compressor " + detail::quoted(id) + " (ckpt reads zstd or none)", context);
    array.zstd = true;
  }
  element filters;
  if (!object["filters"].get(filters) && !filters.is_null()) {
    simdjson::dom::array list;
    if (filters.get_array().get(list) || list.size() != 0) fail(ErrorCode::kUnsupported, "filters are not read", context);
  }
  std::string_view order = "C";
  if (field("order").get_string().get(order) || order != "C") {
    fail(ErrorCode::kUnsupported, "order " + detail::quoted(order) + " (ckpt reads C order)", context);
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

Tensor read_zarr_array(const ZarrArray& array, const ChunkSource& source, const ErrorContext& context,
                       const ZarrReadOptions& options) {
  const size_t item = dtype_size(array.dtype);
  uint64_t nbytes = 0, chunk_bytes = 0;
  try {
    nbytes = checked_numel(array.shape, item) * item;  // checked_numel counts elements
    chunk_bytes = checked_numel(array.chunks, item) * item;
  } catch (const Error&) {
    fail(ErrorCode::kCorrupt, "shape or chunks overflow 64 bits", context);
  }
  if (nbytes == 0) return Tensor::empty(array.dtype, array.shape);
  if (nbytes > std::numeric_limits<size_t>::max() || chunk_bytes > std::numeric_limits<size_t>::max()) {
    fail(ErrorCode::kUnsupported, "the array does not fit this machine's address space", context);
  }
  auto stored = std::make_shared<StoredArray>(array, source, context, nbytes, chunk_bytes);
  // No chunk written: the fill value, one element viewed with every stride
  // 0 (as numpy's broadcast_to), whatever the shape.
  if (!stored->any_stored()) {
    Buffer element = Buffer::allocate(item);
    fill_bytes(array, element.mutable_bytes());
    return Tensor(array.dtype, array.shape,
                  detail::view_buffer({.base = std::move(element),
                                       .element_size = item,
                                       .shape = array.shape,
                                       .strides = std::vector<int64_t>(array.shape.size(), 0)}));
  }
  if (options.verify) stored->check_by_decoding();
  // One uncompressed chunk covering the array: a view, no copy.
  if (array.chunks == array.shape && !array.zstd) {
    if (const std::optional<Buffer>& only = stored->chunk(0)) {
      return Tensor(array.dtype, array.shape, *only);  // its size was checked above
    }
  }
  if (options.defer && stored->sizes_known()) {
    const auto size = static_cast<size_t>(nbytes);
    return Tensor(array.dtype, array.shape,
                  Buffer::deferred(std::make_shared<DeferredArrayStorage>(std::move(stored), size), size));
  }
  const bool zeroed = stored->fill_is_zero();
  Tensor tensor = zeroed ? Tensor::zeros(array.dtype, array.shape) : Tensor::empty(array.dtype, array.shape);
  stored->decode_into(tensor.mutable_bytes(), zeroed);
  return tensor;
}

std::string zarray_json(DType dtype, const Shape& shape, const Shape& chunks, const ZarrayJsonOptions& options) {
  const DTypeInfo& info = dtype_info(dtype);
  detail::JsonWriter out;
  out.begin_object();
  out.key("chunks");
  out.begin_array();
  for (int64_t dimension : chunks) out.integer(dimension);
  out.end_array();
  out.key("compressor");
  if (options.zstd_level) {
    out.begin_object();
    out.key("id");
    out.string("zstd");
    out.key("level");
    out.integer(*options.zstd_level);
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
