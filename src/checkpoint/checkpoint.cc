#include "ckpt/checkpoint.h"

#include <filesystem>
#include <string>

#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "io/mapped_file.h"

namespace ckpt {
namespace {

const Format& format_for_save(const std::filesystem::path& path, const SaveOptions& options) {
  if (!options.format.empty()) return format_by_id(options.format);
  if (const Format* format = format_for_extension(path)) return *format;
  return format_by_id("safetensors");
}

void require_writable(const Format& format, const std::filesystem::path& path) {
  if (!format.capabilities().write) {
    throw Error(ErrorCode::kUnsupported, "format '" + std::string(format.id()) + "' cannot be written", {.path = path});
  }
}

// Runs `body`, adding `path` to any ckpt::Error that lacks it.
template <class Body>
auto with_path(const std::filesystem::path& path, Body body) -> decltype(body()) {
  try {
    return body();
  } catch (Error& error) {
    error.with_path(path);
    throw;
  }
}

}  // namespace

const Format& detect(const std::filesystem::path& path) {
  return with_path(path, [&]() -> const Format& {
    const detail::FileHead head = detail::read_head(path);
    // The extension's format first, so that it breaks ties between formats
    // that both accept the bytes.
    const Format* hinted = format_for_extension(path);
    if (hinted && hinted->capabilities().read && hinted->detect(head.head, head.size)) return *hinted;
    for (const Format* format : formats()) {
      if (format->capabilities().read && format->detect(head.head, head.size)) return *format;
    }
    // No format accepts the bytes, but the name says what the file should be:
    // let that format's reader name the defect (a truncated .safetensors is
    // corrupt, not "some unknown format").
    if (hinted && hinted->capabilities().read) return *hinted;
    throw Error(ErrorCode::kUnsupported, "not a checkpoint in any known format (" +
                                             std::to_string(head.size) + " bytes)");
  });
}

Contents open(const std::filesystem::path& path, const LoadOptions& options) {
  return with_path(path, [&] {
    const Format& format = options.format.empty() ? detect(path) : format_by_id(options.format);
    return format.read(path, options);
  });
}

Tree load(const std::filesystem::path& path, const LoadOptions& options) {
  return open(path, options).tree;
}

Contents verify(const std::filesystem::path& path) {
  return open(path, {.verify = true});
}

void save(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) {
  with_path(path, [&] {
    const Format& format = format_for_save(path, options);
    require_writable(format, path);
    format.write(path, tree, options);
  });
}

void convert(const std::filesystem::path& src, const std::filesystem::path& dst, const SaveOptions& options) {
  Contents contents = open(src);
  SaveOptions target = options;
  // User metadata travels along unless the caller gave its own.
  if (target.metadata.empty()) target.metadata = contents.metadata;
  save(dst, contents.tree, target);
}

}  // namespace ckpt
