#pragma once
// zstd (libzstd) as OCDBT nodes and zarr chunks use it: decoding with a cap
// on the output.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/error.h"

namespace ckpt::orbax_detail {

// Decodes `input`, which must be exactly one or more complete zstd frames,
// into at most `max_size` bytes. Throws Error{kCorrupt} with `context` (and a
// message saying why: not zstd, truncated, trailing bytes, larger than the
// cap).
std::vector<std::byte> zstd_decode(std::span<const std::byte> input, uint64_t max_size,
                                   const ErrorContext& context);

// Decodes `input` into `output`, which it must fill exactly. Throws
// Error{kCorrupt} with `context` otherwise. Reuses one decoding context per
// thread.
void zstd_decode_exact(std::span<const std::byte> input, std::span<std::byte> output,
                       const ErrorContext& context);

// The decoded size of `input` as its frame headers state it, without
// decoding: the sum over its frames (walking each frame's block headers to
// find where it ends; skippable frames count 0). nullopt when a frame does
// not state its size. Throws Error{kCorrupt} with `context` ("zstd chunk does
// not decode: ...") unless `input` is one or more complete zstd frames and
// nothing else.
std::optional<uint64_t> zstd_frames_size(std::span<const std::byte> input, const ErrorContext& context);

}  // namespace ckpt::orbax_detail
