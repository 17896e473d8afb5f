#pragma once
// zarr v2 arrays as Orbax (through tensorstore's zarr driver) writes them:
// a `.zarray` JSON document and chunks named by their grid index
// ("0.0", or "0" for a 0-d array), each zstd-compressed or raw, C order,
// little-endian. See docs/formats/orbax.md.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "ckpt/buffer.h"
#include "ckpt/error.h"
#include "ckpt/tensor.h"

namespace ckpt::orbax_detail {

struct ZarrArray {
  DType dtype = DType::kFloat32;
  Shape shape;
  Shape chunks;
  bool zstd = false;        // compressor {"id": "zstd"}; false: null
  std::optional<Tensor> fill;  // 0-d fill value of `dtype`; nullopt when fill_value is null (zeros)
  char separator = '.';     // dimension_separator
};

// Parses a `.zarray` document. Throws Error{kCorrupt} (with `context`) for
// JSON that is not a valid zarr v2 array, {kUnsupported} for what ckpt does
// not read (big-endian or structured dtypes, other compressors, filters,
// Fortran order).
ZarrArray parse_zarray(std::string_view json, const ErrorContext& context);

// The key of the chunk at grid position `index` ("0" for a 0-d array).
std::string chunk_key(const ZarrArray& array, std::span<const int64_t> index);

// A chunk's stored bytes by key (relative to the array), or nullopt if the
// chunk was never written.
using ChunkSource = std::function<std::optional<Buffer>(const std::string& key)>;

struct ZarrReadOptions {
  // Decode when the bytes are first used rather than now (see below).
  bool defer = false;
  // Check every stored chunk now, decoding compressed ones one at a time
  // into one chunk of scratch memory (a deferred tensor stays deferred).
  bool verify = false;
};

// Assembles the whole array. An array of which no chunk was written is the
// fill value (zeros when it is null) as one element viewed with every stride
// 0 (a deferred strided view, Tensor::strided_view: no memory for the shape
// until its bytes are asked for). An uncompressed array of one chunk covering
// it is a view of the stored bytes (no copy). Otherwise, with options.defer, the
// tensor's buffer is deferred (Buffer::deferred): its chunks are decoded
// straight into the memory that asks for them (Tensor::read_into) or into
// one heap block on first access; without, they are decoded now into one
// heap buffer. Chunks that cover a whole run of the array's bytes (chunks
// split only the first dimension, or one chunk) decode in place; others go
// through one chunk of scratch memory. Missing chunks read as the fill value
// (zeros when it is null), as tensorstore reads them.
//
// Every chunk is looked up, and its size checked, now: an uncompressed chunk
// must hold prod(chunks) × itemsize bytes, a zstd chunk must be complete
// frames whose headers state that size (a chunk whose frames do not state
// their size is decoded now even with `defer`, unless `verify` decoded it
// already). Throws Error{kCorrupt}
// naming the chunk when its bytes disagree with the metadata. What only
// decoding finds (damaged compressed data) throws Error{kCorrupt}, naming
// the chunk, from the first access of a deferred tensor's bytes.
Tensor read_zarr_array(const ZarrArray& array, const ChunkSource& source, const ErrorContext& context,
                       const ZarrReadOptions& options = {});

struct ZarrayJsonOptions {
  // The compressor: {"id": "zstd", "level": zstd_level}; nullopt: null
  // (chunks stored raw).
  std::optional<int> zstd_level;
};

// The `.zarray` document ckpt writes (keys sorted, as tensorstore writes
// them): fill_value null, order C, dimension_separator ".", the compressor
// that `options` names.
std::string zarray_json(DType dtype, const Shape& shape, const Shape& chunks, const ZarrayJsonOptions& options = {});

}  // namespace ckpt::orbax_detail
