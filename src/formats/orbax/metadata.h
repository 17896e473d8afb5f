#pragma once
// Orbax's JSON side files: `_METADATA` (the tree's structure: one entry per
// leaf, keyed by the Python repr of its key tuple) and `_CHECKPOINT_METADATA`
// (the step's handlers, timestamps and custom metadata). See
// docs/formats/orbax.md.

#include <simdjson.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/error.h"
#include "ckpt/format.h"
#include "ckpt/tree.h"
#include "formats/orbax/layout.h"

namespace ckpt::orbax_detail {

struct MetadataKey {
  std::string name;
  bool sequence = false;  // a list / tuple position; else a dict key
};

// One entry of tree_metadata.
struct MetadataLeaf {
  std::string tuple;  // "('params', 'dense', 'kernel')" as stored
  std::vector<MetadataKey> keys;
  std::string value_type;  // "jax.Array", "np.ndarray", "scalar", "string", "None", "Dict", "List"
  bool skip_deserialize = false;
  // Orbax's parameter name: the keys joined with "." (the zarr array's name).
  std::string param_name() const;
};

// Parses `_METADATA`. Throws Error{kCorrupt} (with `context`, the entry set
// to the offending tuple) if it is not JSON, lacks tree_metadata, or an entry
// is not a tuple string agreeing with its key_metadata.
std::vector<MetadataLeaf> parse_tree_metadata(std::string_view json, const ErrorContext& context);

// Assembles the tree: dict keys give maps (in the order of first
// appearance), sequence keys lists (ordered by index, which must run
// 0..n-1). `value` gives each leaf. Throws Error{kCorrupt} when two entries
// disagree about a container.
Tree build_tree(const std::vector<MetadataLeaf>& leaves, const std::function<Tree(const MetadataLeaf&)>& value,
                const ErrorContext& context);

// `_CHECKPOINT_METADATA` flattened: nested objects joined with "."
// ("item_handlers.default"), strings as they are, other values as JSON text;
// the dotted key `skip` (and what lies under it) is left out.
// Throws Error{kCorrupt} if it is not a JSON object.
Metadata flatten_checkpoint_metadata(std::string_view json, const ErrorContext& context,
                                     std::string_view skip = {});

// ckpt's record of the tree, written with SaveOptions::extras where Orbax
// keeps its callers' own data: `_CHECKPOINT_METADATA` custom_metadata.ckpt =
// {"version": 1, "tree": <tree skeleton, formats/tree_json.h>}, whose
// {"tensor": NAME} leaves name arrays by their Orbax parameter name.
constexpr std::string_view kRecordKey = "ckpt";
constexpr std::string_view kRecordEntry = "custom_metadata.ckpt";
constexpr int64_t kRecordVersion = 1;

struct Record {
  int64_t version = 0;
  simdjson::dom::element tree;  // the skeleton (valid while the parsed document lives)
};

// The record in `root` (the parsed `_CHECKPOINT_METADATA`), or nullopt when
// custom_metadata is not an object, holds no "ckpt", or its "ckpt" is not
// ckpt's record: not an object with both a "version" and a "tree" field (a
// caller's own custom metadata under that key, which stays user metadata).
// Fields other than version and tree are ignored (later additions). Throws
// Error{kCorrupt} with `context` (entry custom_metadata.ckpt) if the version
// is not a positive integer or a field appears twice; {kUnsupported} if the
// version is newer than kRecordVersion.
std::optional<Record> find_record(simdjson::dom::element root, const ErrorContext& context);

// The item names `_CHECKPOINT_METADATA` lists in item_handlers (an object);
// empty when item_handlers is a string (the step is the item) or absent.
std::vector<std::string> item_names(std::string_view json);

// Python's repr() of a tuple of strings: "('a', 'b')", "('a',)".
std::string python_tuple_repr(const std::vector<std::string>& items);

}  // namespace ckpt::orbax_detail
