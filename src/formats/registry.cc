// The one place where formats are registered. Detection tries them in this
// order; the first whose detect() accepts the file wins.

#include "ckpt/registry.h"

#include <string>

#include "ckpt/error.h"
#include "formats/dcp/format.h"
#include "formats/flax/format.h"
#include "formats/hf_sharded/format.h"
#include "formats/numpy/format.h"
#include "formats/orbax/format.h"
#include "formats/safetensors/format.h"
#include "formats/tf/format.h"
#include "formats/torch/format.h"

namespace ckpt {

std::span<const Format* const> formats() {
  static const Format* const kFormats[] = {
      &safetensors_format(),
      &npz_format(),
      &npy_format(),
      &torch_format(),
      &tf_format(),
      &flax_format(),
      &orbax_format(),
      &dcp_format(),
      &hf_sharded_format(),
  };
  return kFormats;
}

const Format& format_by_id(std::string_view id) {
  std::string known;
  for (const Format* format : formats()) {
    if (format->id() == id) return *format;
    known += known.empty() ? "" : ", ";
    known += format->id();
  }
  throw Error(ErrorCode::kUnsupported,
              "unknown format '" + std::string(id) + "' (known: " + known + ")");
}

const Format* format_for_extension(const std::filesystem::path& path) {
  const std::string extension = path.extension().string();
  if (extension.empty()) return nullptr;
  for (const Format* format : formats()) {
    for (std::string_view candidate : format->extensions()) {
      if (candidate == extension) return format;
    }
  }
  return nullptr;
}

}  // namespace ckpt
