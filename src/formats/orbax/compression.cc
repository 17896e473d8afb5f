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
  const size_t produced = ZSTD_decompress(output.data(), output.size(), input.data(), input.size());
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

}  // namespace ckpt::orbax_detail
