#pragma once
// The Flax msgpack Format plugin: flax.serialization.to_bytes /
// msgpack_serialize output and flax.training.checkpoints' checkpoint_<step>
// files. Byte layout: docs/formats/flax.md.
//
// Trees: a msgpack map reads as a map (str keys, and int keys, which
// msgpack_restore accepts too), an array as a list, ext 1 / ext 3 as a
// tensor viewing the file, ext 2 (a Python complex) as a 0-d complex128
// tensor, a chunked-array map as one assembled tensor, other values as
// leaves (nil, bool, int64, float, str, bytes). Flax writes lists and tuples
// as maps keyed "0", "1", ...: they read as such maps. Writing stores the
// tree as it is (lists as msgpack arrays, int keys as msgpack ints), every
// tensor as ext 1, arrays over 2^30 bytes (outside lists) chunked as flax
// chunks them, and, with SaveOptions::extras, tied tensors once (ckpt's
// alias ext 99).

#include "ckpt/format.h"

namespace ckpt {

const Format& flax_format();

}  // namespace ckpt
