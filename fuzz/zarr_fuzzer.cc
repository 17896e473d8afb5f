// The input is one zarr v2 array: its .zarray JSON (the bytes before the
// first "\n@@"), then chunks packed as "\n@@" KEY "\n" BYTES ("0.0", ...).
// parse_zarray and read_zarr_array (formats/orbax/zarr.h) assemble it, now
// and deferred, and its bytes are read when within the memory bound. This is
// the zarr half of the orbax target without the directory around it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/buffer.h"
#include "ckpt/error.h"
#include "formats/orbax/zarr.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    constexpr std::string_view kMarker = "\n@@";
    size_t at = text.find(kMarker);
    std::string_view zarray = text.substr(0, at);
    std::map<std::string, std::string_view> chunks;
    while (at != std::string_view::npos && chunks.size() < 256) {
      size_t name_end = text.find('\n', at + kMarker.size());
      if (name_end == std::string_view::npos) break;
      size_t next = text.find(kMarker, name_end);
      size_t end = next == std::string_view::npos ? text.size() : next;
      chunks.emplace(std::string(text.substr(at + kMarker.size(), name_end - at - kMarker.size())),
                     text.substr(name_end + 1, end - name_end - 1));
      at = next;
    }
    ckpt::ErrorContext context{.path = "input/.zarray", .entry = "array"};
    ckpt::orbax_detail::ChunkSource source = [&](const std::string& key) -> std::optional<ckpt::Buffer> {
      auto found = chunks.find(key);
      if (found == chunks.end()) return std::nullopt;
      return ckpt::Buffer::copy_of(std::as_bytes(std::span(found->second.data(), found->second.size())));
    };
    try {
      ckpt::orbax_detail::ZarrArray array = ckpt::orbax_detail::parse_zarray(zarray, context);
      for (bool defer : {true, false}) {
        try {
          ckpt::Tensor tensor = ckpt::orbax_detail::read_zarr_array(array, source, context, {.defer = defer});
          if (tensor.nbytes() <= ckpt::fuzz::memory_bound(size)) {
            std::vector<std::byte> bytes(tensor.nbytes());
            tensor.read_into(bytes);
          }
        } catch (const ckpt::Error&) {
        }
      }
    } catch (const ckpt::Error&) {
    }
  });
}
