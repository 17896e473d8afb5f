#pragma once
// Flax msgpack checkpoints: the byte layout's constants. The layout is
// described in docs/formats/flax.md; change both together.
//
// Sources: google/flax flax/serialization.py (flax 0.12.8: _MsgpackExtType,
// _ndarray_to_bytes, MAX_CHUNK_SIZE, _chunk), and the MessagePack spec
// (github.com/msgpack/msgpack/blob/master/spec.md) for the type bytes.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ckpt::flax_detail {

// MessagePack type bytes (spec.md, "Formats").
constexpr uint8_t kPositiveFixintMax = 0x7f;
constexpr uint8_t kFixmap = 0x80;    // 0x80..0x8f: map of up to 15 pairs
constexpr uint8_t kFixarray = 0x90;  // 0x90..0x9f: array of up to 15 items
constexpr uint8_t kFixstr = 0xa0;    // 0xa0..0xbf: string of up to 31 bytes
constexpr uint8_t kNil = 0xc0;
constexpr uint8_t kNeverUsed = 0xc1;
constexpr uint8_t kFalse = 0xc2;
constexpr uint8_t kTrue = 0xc3;
constexpr uint8_t kBin8 = 0xc4, kBin16 = 0xc5, kBin32 = 0xc6;
constexpr uint8_t kExt8 = 0xc7, kExt16 = 0xc8, kExt32 = 0xc9;
constexpr uint8_t kFloat32 = 0xca, kFloat64 = 0xcb;
constexpr uint8_t kUInt8 = 0xcc, kUInt16 = 0xcd, kUInt32 = 0xce, kUInt64 = 0xcf;
constexpr uint8_t kInt8 = 0xd0, kInt16 = 0xd1, kInt32 = 0xd2, kInt64 = 0xd3;
constexpr uint8_t kFixext1 = 0xd4, kFixext2 = 0xd5, kFixext4 = 0xd6, kFixext8 = 0xd7, kFixext16 = 0xd8;
constexpr uint8_t kStr8 = 0xd9, kStr16 = 0xda, kStr32 = 0xdb;
constexpr uint8_t kArray16 = 0xdc, kArray32 = 0xdd;
constexpr uint8_t kMap16 = 0xde, kMap32 = 0xdf;
constexpr uint8_t kNegativeFixintMin = 0xe0;  // 0xe0..0xff: -32..-1

// flax.serialization._MsgpackExtType.
constexpr int8_t kExtNdarray = 1;        // payload: msgpack (shape, dtype name, C-order bytes)
constexpr int8_t kExtNativeComplex = 2;  // payload: msgpack (real, imag)
constexpr int8_t kExtNpScalar = 3;       // payload as kExtNdarray
// ckpt's own (not flax's; written only with SaveOptions::extras): a tensor
// tied to an earlier leaf (Tensor::same_memory), stored once. Payload: a
// msgpack str, the earlier leaf's dotted name. flax's msgpack_restore gives
// such a leaf back as msgpack.ExtType(99, ...).
constexpr int8_t kExtCkptAlias = 99;

// flax.serialization.MAX_CHUNK_SIZE: arrays of more bytes are written as a
// chunked-array map; each chunk holds MAX_CHUNK_SIZE / itemsize elements.
constexpr uint64_t kMaxChunkSize = uint64_t{1} << 30;
// The keys of a chunked-array map (_chunk), in flax's insertion order.
constexpr std::string_view kChunkedMarkerKey = "__msgpack_chunked_array__";
constexpr std::string_view kChunkedShapeKey = "shape";
constexpr std::string_view kChunkedChunksKey = "chunks";

// ckpt's limits (not flax's): containers nested deeper than this are
// refused (Python's msgpack stops at its own stack limit of 1024), and
// shapes of more dimensions than numpy's NPY_MAXDIMS.
constexpr size_t kMaxDepth = 512;
constexpr size_t kMaxDimensions = 64;

}  // namespace ckpt::flax_detail
