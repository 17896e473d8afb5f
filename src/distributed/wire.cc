#include "distributed/wire.h"

#include <limits>

#include "ckpt/dtype.h"

namespace ckpt::distributed_detail {
namespace {

// Above any count a real message holds; a larger one is a broken message.
constexpr uint64_t kMaxCount = uint64_t{1} << 32;

}  // namespace

void Encoder::u64(uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void Encoder::i64s(const std::vector<int64_t>& values) {
  u64(values.size());
  for (int64_t value : values) u64(static_cast<uint64_t>(value));
}

void Encoder::string(std::string_view value) {
  u64(value.size());
  bytes_.append(value);
}

void Decoder::truncated() const {
  throw Error(ErrorCode::kCorrupt, "a malformed message from rank " + std::to_string(from_) +
                                       " (ranks running different versions of ckpt?)");
}

uint64_t Decoder::u64() {
  if (bytes_.size() < 8) truncated();
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= uint64_t{static_cast<unsigned char>(bytes_[i])} << (8 * i);
  bytes_.remove_prefix(8);
  return value;
}

std::vector<int64_t> Decoder::i64s() {
  const uint64_t count = u64();
  if (count > kMaxCount || count > bytes_.size() / 8) truncated();
  std::vector<int64_t> values(count);
  for (int64_t& value : values) value = static_cast<int64_t>(u64());
  return values;
}

std::string Decoder::string() {
  const uint64_t size = u64();
  if (size > bytes_.size()) truncated();
  std::string value(bytes_.substr(0, size));
  bytes_.remove_prefix(size);
  return value;
}

void Decoder::finish() const {
  if (!done()) truncated();
}

std::string encode_outcome(const std::optional<Error>& error, std::string_view payload) {
  Encoder out;
  out.u64(error ? 1 : 0);
  if (error) {
    out.u64(static_cast<uint64_t>(error->code()));
    out.string(error->message());
    out.string(error->context().path.string());
    out.string(error->context().entry);
  } else {
    out.string(payload);
  }
  return out.take();
}

std::optional<std::string> decode_outcome(std::string_view bytes, size_t from, std::optional<Error>& error) {
  Decoder in(bytes, from);
  const uint64_t failed = in.u64();
  if (failed == 0) {
    std::string payload = in.string();
    in.finish();
    return payload;
  }
  const uint64_t code = in.u64();
  std::string message = in.string();
  std::string path = in.string();
  std::string entry = in.string();
  in.finish();
  if (failed != 1 || code > static_cast<uint64_t>(ErrorCode::kRemote)) {
    throw Error(ErrorCode::kCorrupt, "a malformed outcome from rank " + std::to_string(from));
  }
  error.emplace(static_cast<ErrorCode>(code), "rank " + std::to_string(from) + ": " + message,
                ErrorContext{.path = path, .entry = entry});
  return std::nullopt;
}

std::string encode_rank_shard(const hf_sharded_detail::RankShard& shard) {
  Encoder out;
  out.string(shard.file);
  out.u64(shard.nbytes);
  out.u64(shard.tensors.size());
  for (const std::string& name : shard.tensors) out.string(name);
  out.u64(shard.pieces.size());
  for (const hf_sharded_detail::SliceRecord& slice : shard.pieces) {
    out.string(slice.name);
    out.string(dtype_name(slice.dtype));
    out.i64s(slice.shape);
    out.u64(slice.pieces.size());
    for (const hf_sharded_detail::PieceRecord& piece : slice.pieces) {
      out.string(piece.file);
      out.string(piece.key);
      out.i64s(piece.box.offsets);
      out.i64s(piece.box.sizes);
    }
  }
  return out.take();
}

hf_sharded_detail::RankShard decode_rank_shard(std::string_view bytes, size_t from) {
  Decoder in(bytes, from);
  hf_sharded_detail::RankShard shard;
  shard.file = in.string();
  shard.nbytes = in.u64();
  const uint64_t tensors = in.u64();
  if (tensors > bytes.size()) in.finish();
  for (uint64_t i = 0; i < tensors; ++i) shard.tensors.push_back(in.string());
  const uint64_t slices = in.u64();
  if (slices > bytes.size()) in.finish();
  for (uint64_t i = 0; i < slices; ++i) {
    hf_sharded_detail::SliceRecord slice;
    slice.name = in.string();
    const std::string dtype = in.string();
    const std::optional<DType> parsed = dtype_from_name(dtype);
    if (!parsed) throw Error(ErrorCode::kCorrupt, "rank " + std::to_string(from) + " names an unknown dtype '" + dtype + "'");
    slice.dtype = *parsed;
    slice.shape = in.i64s();
    const uint64_t pieces = in.u64();
    if (pieces > bytes.size()) in.finish();
    for (uint64_t p = 0; p < pieces; ++p) {
      hf_sharded_detail::PieceRecord piece;
      piece.file = in.string();
      piece.key = in.string();
      piece.box.offsets = in.i64s();
      piece.box.sizes = in.i64s();
      slice.pieces.push_back(std::move(piece));
    }
    shard.pieces.push_back(std::move(slice));
  }
  in.finish();
  return shard;
}

}  // namespace ckpt::distributed_detail
