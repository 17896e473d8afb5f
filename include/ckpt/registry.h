#pragma once
// The registered formats. The list lives in src/formats/registry.cc, the one
// place where a new format is added.

#include <filesystem>
#include <span>
#include <string_view>

#include "ckpt/format.h"

namespace ckpt {

// Every registered format, in detection order.
std::span<const Format* const> formats();

// The format with id `id`; throws Error{kUnsupported} listing the known ids.
const Format& format_by_id(std::string_view id);

// The format whose extensions include `path`'s extension, or nullptr.
const Format* format_for_extension(const std::filesystem::path& path);

}  // namespace ckpt
