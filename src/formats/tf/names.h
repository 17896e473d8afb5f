#pragma once
// TensorFlow checkpoint keys <-> ckpt tree paths (docs/formats/tf.md, "Names").
//
// Object-based checkpoints (tf.train.Checkpoint, Keras; those holding
// "_CHECKPOINTABLE_OBJECT_GRAPH"): a key "<p1>/<p2>/.../.ATTRIBUTES/<attr>"
// becomes the tree path [p1, p2, ..., attr], so
//   layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE
//     -> layer_with_weights-0.kernel.VARIABLE_VALUE
//   layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE
//     -> layer_with_weights-0.kernel..OPTIMIZER_SLOT.optimizer.m.VARIABLE_VALUE
// and any other key (the object graph itself) is one top-level tree key.
// Other checkpoints (tf.compat.v1 Saver): a key is split at every "/".
// Components are kept as TensorFlow escaped them ("." as "..", "/" as ".S").
// Should two keys want one tree path (a leaf that is also a folder, as in V1
// "dense/kernel" beside "dense/kernel/Adam"), every key becomes one
// top-level tree key instead. The way back (key_of) is exact for every tree
// read this way, so TF -> ckpt -> TF keeps every key.

#include <string>
#include <string_view>
#include <vector>

namespace ckpt::tf_detail {

using TreePath = std::vector<std::string>;

// The tree paths of `keys` (the bundle's keys but the header, in any order),
// by the rules above; result[i] belongs to keys[i].
std::vector<TreePath> tree_paths_of(const std::vector<std::string>& keys);

// The bundle key of a leaf at `path` in a tree that is object-based (holds
// "_CHECKPOINTABLE_OBJECT_GRAPH" at the top) or not.
std::string key_of(const TreePath& path, bool object_based);

}  // namespace ckpt::tf_detail
