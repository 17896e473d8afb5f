#include "formats/orbax/compression.h"

#include <zstd.h>

#include <memory>

namespace ckpt::orbax_detail {
namespace {

struct DContextDeleter {
  void operator()(ZSTD_DCtx* context) const { ZSTD_freeDCtx(context); }
};

[[noreturn]] void fail(const std::string& message, const ErrorContext& context) {
  throw Error(ErrorCode::kCorrupt, message, context);
}

}  // namespace

std::vector<std::byte> zstd_decode(std::span<const std::byte> input, uint64_t max_size,
                                   const ErrorContext& context) {
  std::unique_ptr<ZSTD_DCtx, DContextDeleter> stream(ZSTD_createDCtx());
  if (stream == nullptr) throw std::bad_alloc();
  std::vector<std::byte> output;
  ZSTD_inBuffer in{input.data(), input.size(), 0};
  const size_t step = ZSTD_DStreamOutSize();
  while (true) {
    const size_t before = output.size();
    output.resize(before + step);
    ZSTD_outBuffer out{output.data() + before, step, 0};
    const size_t remaining = ZSTD_decompressStream(stream.get(), &out, &in);
    output.resize(before + out.pos);
    if (ZSTD_isError(remaining)) {
      fail(std::string("zstd data does not decode: ") + ZSTD_getErrorName(remaining), context);
    }
    if (output.size() > max_size) {
      fail("zstd data decodes to more than " + std::to_string(max_size) + " bytes", context);
    }
    if (in.pos == in.size && remaining == 0) break;  // every frame complete
    if (in.pos == in.size && out.pos < step) fail("zstd data is truncated (a frame does not end)", context);
  }
  return output;
}

void zstd_decode_exact(std::span<const std::byte> input, std::span<std::byte> output,
                       const ErrorContext& context) {
  // One context per thread: a context holds ~100 KiB of tables that
  // ZSTD_decompress would allocate and free on every call.
  thread_local const std::unique_ptr<ZSTD_DCtx, DContextDeleter> decoder(ZSTD_createDCtx());
  if (decoder == nullptr) throw std::bad_alloc();
  const size_t produced = ZSTD_decompressDCtx(decoder.get(), output.data(), output.size(), input.data(), input.size());
  if (ZSTD_isError(produced)) {
    fail(std::string("zstd chunk does not decode to ") + std::to_string(output.size()) +
             " bytes: " + ZSTD_getErrorName(produced),
         context);
  }
  if (produced != output.size()) {
    fail("zstd chunk decodes to " + std::to_string(produced) + " bytes, expected " +
             std::to_string(output.size()),
         context);
  }
}

std::optional<uint64_t> zstd_frames_size(std::span<const std::byte> input, const ErrorContext& context) {
  if (input.empty()) fail("zstd chunk does not decode: it is empty", context);
  uint64_t total = 0;
  bool known = true;
  size_t at = 0;
  while (at < input.size()) {
    const std::byte* frame = input.data() + at;
    const size_t left = input.size() - at;
    const size_t length = ZSTD_findFrameCompressedSize(frame, left);
    if (ZSTD_isError(length)) {
      fail(std::string("zstd chunk does not decode: ") + ZSTD_getErrorName(length) + " (frame at byte " +
               std::to_string(at) + ")",
           context);
    }
    const unsigned long long size = ZSTD_getFrameContentSize(frame, left);
    if (size == ZSTD_CONTENTSIZE_ERROR) {
      fail("zstd chunk does not decode: bad frame header at byte " + std::to_string(at), context);
    }
    if (size == ZSTD_CONTENTSIZE_UNKNOWN) {
      known = false;
    } else if (__builtin_add_overflow(total, size, &total)) {
      fail("zstd chunk does not decode: frame sizes overflow 64 bits", context);
    }
    at += length;
  }
  if (!known) return std::nullopt;
  return total;
}

}  // namespace ckpt::orbax_detail
