#include "ckpt/error.h"

#include "core/text.h"

namespace ckpt {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kRemote: return "remote error";
  }
  return "unknown";
}

Error::Error(ErrorCode code, std::string message, ErrorContext context)
    : code_(code), message_(std::move(message)), context_(std::move(context)) {
  render();
}

Error& Error::with_path(const std::filesystem::path& path) {
  if (context_.path.empty()) {
    context_.path = path;
    render();
  }
  return *this;
}

Error& Error::with_entry(std::string_view entry) {
  if (context_.entry.empty()) {
    context_.entry = std::string(entry);
    render();
  }
  return *this;
}

void Error::render() {
  what_.clear();
  if (!context_.path.empty()) what_ += context_.path.string() + ": ";
  // The entry may be a name from the file: quoted, so that the line stays one
  // printable line whatever bytes it holds.
  if (!context_.entry.empty()) what_ += "entry " + detail::quoted(context_.entry, {.max_bytes = 1024}) + ": ";
  what_ += message_;
  if (context_.offset) what_ += " (at byte " + std::to_string(*context_.offset) + ")";
}

}  // namespace ckpt
