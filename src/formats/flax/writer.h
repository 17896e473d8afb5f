#pragma once
// Writing Flax msgpack files as flax.serialization.msgpack_serialize does.
// Byte layout: layout.h, docs/formats/flax.md.

#include <cstdint>
#include <filesystem>

#include "ckpt/format.h"
#include "formats/flax/layout.h"

namespace ckpt::flax_detail {

// Writes `tree` as msgpack_serialize(tree, in_place=True) would with
// flax.serialization.MAX_CHUNK_SIZE = `max_chunk_size` (tests lower it): a
// tensor of more bytes that is the root or reached from it through maps
// only becomes a chunked-array map of flat chunks of max(1, max_chunk_size
// / itemsize) elements each (_chunk). Tensors inside lists are never
// chunked, as flax leaves them; an ext payload of 2^32 bytes or more is
// kUnsupported (msgpack's limit). Reading needs no chunk size: read_file
// accepts chunks of any sizes, as _unchunk concatenates whatever it finds.
void write_file(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options,
                uint64_t max_chunk_size = kMaxChunkSize);

}  // namespace ckpt::flax_detail
