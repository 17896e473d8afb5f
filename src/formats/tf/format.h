#pragma once
// The TensorFlow tensor bundle (V2) format plugin: PREFIX.index (a LevelDB
// table) + PREFIX.data-0000K-of-0000N. Byte layout: docs/formats/tf.md.

#include "ckpt/format.h"

namespace ckpt {

const Format& tf_format();

}  // namespace ckpt
