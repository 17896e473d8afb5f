#pragma once
// The messages that the ranks of a sharded save exchange through a
// Communicator: little-endian fixed-width integers and length-prefixed
// strings, decoded with every length checked against what is left (a
// message is the output of this code on another rank, but a broken engine
// or a version skew must give an Error, never a crash).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/error.h"
#include "formats/hf_sharded/writer.h"

namespace ckpt::distributed_detail {

class Encoder {
 public:
  void u64(uint64_t value);
  void i64s(const std::vector<int64_t>& values);
  void string(std::string_view value);
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

// Reads what an Encoder wrote. Throws Error{kCorrupt} naming `from` (the
// rank that sent it) for a message that ends early.
class Decoder {
 public:
  Decoder(std::string_view bytes, size_t from) : bytes_(bytes), from_(from) {}
  uint64_t u64();
  std::vector<int64_t> i64s();
  std::string string();
  bool done() const { return bytes_.empty(); }
  // Throws Error{kCorrupt} unless the message is used up.
  void finish() const;

 private:
  [[noreturn]] void truncated() const;
  std::string_view bytes_;
  size_t from_;
};

// One rank's outcome of a step of the protocol: its payload, or the Error
// it hit (code, message, path, entry).
std::string encode_outcome(const std::optional<Error>& error, std::string_view payload);
// Returns the payload of `bytes` (from rank `from`), or nullopt and sets
// `error` to the rank's Error, its message prefixed with "rank N: ".
std::optional<std::string> decode_outcome(std::string_view bytes, size_t from, std::optional<Error>& error);

std::string encode_rank_shard(const hf_sharded_detail::RankShard& shard);
hf_sharded_detail::RankShard decode_rank_shard(std::string_view bytes, size_t from);

}  // namespace ckpt::distributed_detail
