#pragma once
// ChecksumKind: which checksum a checkpoint stores beside its tensors, and
// the names the CLI, the Python package and ckpt's own extras spell it with.

#include <string_view>

namespace ckpt {

// Checksum stored beside the tensors and checked by verify: ckpt's own
// per-tensor xxh3 or CRC-32C, or the zip CRC-32 of the record holding a
// tensor's storage (torch files; read only).
enum class ChecksumKind { kNone, kXxh3, kCrc32c, kCrc32 };

// "none", "xxh3", "crc32c" or "crc32": the name ckpt writes into its extras
// and accepts on its command line and in Python.
std::string_view checksum_name(ChecksumKind kind);

// The kind that checksum_name() calls `name`. Throws Error{kUnsupported}
// naming `name` and the known names for any other text (there is no
// fallback to kNone).
ChecksumKind checksum_from_name(std::string_view name);

}  // namespace ckpt
