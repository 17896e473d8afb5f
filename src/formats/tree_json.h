#pragma once
// Tree skeleton as JSON: the shape of a ckpt::Tree (maps with their key order
// and key types, lists, non-tensor leaves) written as JSON text, with tensor
// leaves replaced by the name under which a format stores them. Formats that
// have a place for one JSON document (safetensors' __metadata__, a zip member)
// keep the tree here; the tensors stay wherever the format keeps tensors.
// Knows no format. Described in docs/formats/safetensors.md ("Tree skeleton").
//
// Encoding of one tree node (every JSON object is a tagged value with exactly
// one key, so nothing is guessed back):
//
//   none            null
//   bool            true / false
//   int             a JSON integer (int64 range): 42, -7
//   float           {"float": 1.5}; finite values as the shortest text that
//                   reads back to the same double (always with '.' or an
//                   exponent, so -0.0 keeps its sign); non-finite values as a
//                   string: "inf", "-inf", "nan" (the quiet NaN
//                   0x7ff8000000000000), else "nan:" + 16 lower-case hex
//                   digits of the IEEE-754 bits ("nan:fff8000000000000")
//   string          a JSON string (the leaf must be valid UTF-8)
//   bytes           {"bytes": "<standard base64 with '=' padding>"}
//   tensor          {"tensor": "<stored name>"}; the format resolves the name
//                   (safetensors: a stored tensor, or an alias of one)
//   list            [node, node, ...]
//   map             {"map": [[key, node], ...]} in map order; a key is a JSON
//                   string (string key) or a JSON integer (integer key)
//
// Example: {"step": 3, "model": {"w": T}, "opt": {0: [1.5]}} becomes
//   {"map":[["step",3],["model",{"map":[["w",{"tensor":"model.w"}]]}],
//           ["opt",{"map":[[0,[{"float":1.5}]]]}]]}

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "ckpt/tensor.h"
#include "ckpt/tree.h"

namespace simdjson::dom {
class element;
}  // namespace simdjson::dom

namespace ckpt::detail {

class JsonWriter;

// Appends the skeleton of `tree` to `out` as one JSON value. `tensor_leaves`
// names the tensor leaves of `tree` in tree order, exactly as
// tree.tensor_leaves() lists them (the stored name of each is leaf.name).
// Throws Error{kUnsupported} for a string leaf or string key that is not
// valid UTF-8 (JSON cannot hold it; the message names the leaf),
// {kInvalidArgument} if `tensor_leaves` does not list the tree's tensor leaves.
void write_tree_json(JsonWriter& out, const Tree& tree, std::span<const Tree::Leaf> tensor_leaves);

// The skeleton of `tree` as JSON text, tensors named by tree.tensor_leaves().
std::string tree_to_json(const Tree& tree);

// Returns the tensor stored under `name`. Throws (typically Error{kCorrupt})
// if there is none; the decoder adds the tree path to the error.
using TensorResolver = std::function<Tensor(std::string_view name)>;

// Rebuilds a tree from its skeleton. Each {"tensor": NAME} leaf becomes
// resolve(NAME).
// Throws Error{kCorrupt} if `json` is not valid JSON or not a skeleton as
// described above (the entry names the tree path of the offending node).
Tree tree_from_json(std::string_view json, const TensorResolver& resolve);
// As above, from an already parsed JSON value.
Tree tree_from_json(const simdjson::dom::element& json, const TensorResolver& resolve);

// Standard base64 (RFC 4648, with '=' padding), as the skeleton stores bytes.
std::string base64_encode(std::string_view bytes);
// Throws Error{kCorrupt} unless `text` is canonical padded base64.
std::string base64_decode(std::string_view text);

}  // namespace ckpt::detail
