#pragma once
// Writing Flax msgpack files as flax.serialization.to_bytes does.
// Byte layout: layout.h, docs/formats/flax.md.

#include <cstdint>
#include <filesystem>

#include "ckpt/format.h"
#include "formats/flax/layout.h"

namespace ckpt::flax_detail {

// Writes `tree` as flax.serialization.to_bytes writes the Python value it
// stands for, with flax.serialization.MAX_CHUNK_SIZE = `max_chunk_size`
// (tests lower it): to_state_dict's convention first, so that every
// container is a map of string keys (a list becomes a map keyed "0".."n-1",
// an integer key its decimal string; a map whose integer and string keys
// would meet as strings is kUnsupported, as flax refuses it), then
// msgpack_serialize(in_place=True): a tensor of more bytes becomes a
// chunked-array map of flat chunks of max(1, max_chunk_size / itemsize)
// elements each (_chunk). An ext payload of 2^32 bytes or more is
// kUnsupported (msgpack's limit). Reading needs no chunk size: read_file
// accepts chunks of any sizes, as _unchunk concatenates whatever it finds.
void write_file(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options,
                uint64_t max_chunk_size = kMaxChunkSize);

}  // namespace ckpt::flax_detail
