#pragma once
// Tree: the state of a model or a training run, as a nest of ordered maps and
// lists whose leaves are tensors, integers, floats, bools, strings, bytes or
// none.
//
// Names. A leaf's name is its path of keys joined with dots: a flat torch
// state dict {"encoder.layers.0.weight": t} keeps its key as the name, and
// {"model": sd} gives "model.encoder.layers.0.weight". Integer keys (torch
// optimizer state) and list positions print in decimal. The tree's shape is
// kept in the Tree itself (and stored beside the names by every format that
// can hold it), never guessed back from names. When two leaves would get one
// name ({"a.b": x, "a": {"b": y}}), the later one in tree order gets an
// escaped name: string keys with "\" written "\\" and "." written "\.",
// plus "\#N" should that still collide. See leaves().

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ckpt/tensor.h"

namespace ckpt {

// A map key: a string, or an integer as in torch's optimizer state.
using Key = std::variant<std::string, int64_t>;

// Returns the key as it appears in a leaf name: the string, or the decimal integer.
std::string key_to_string(const Key& key);

// The dotted name of the child `key` of the node named `parent`:
// "parent.key", or `key` alone when `parent` is empty (the root's children).
// This is how leaves are named (before the escape of colliding names, see
// leaves()), and how formats, restore and Python name entries in messages.
std::string join_name(std::string_view parent, std::string_view key);
// Appends `key` to the dotted name `name` in place, as join_name(name, key)
// would return it.
void append_name(std::string& name, std::string_view key);
// The keys of a path joined by the same rule: join_names({"a", "b"}) == "a.b".
std::string join_names(std::span<const std::string> keys);

// A path of keys from a tree's root to one of its nodes: map keys (strings or
// integers) and list positions (integers), exactly as the tree holds them, so
// that it finds a node without the dotted names' escapes ({"a.b": x} and
// {"a": {"b": y}} are {"a.b"} and {"a", "b"}).
using KeyPath = std::vector<Key>;

// Raw bytes as a leaf (Python `bytes`), distinct from a (UTF-8) string.
struct Bytes {
  std::string data;
  bool operator==(const Bytes&) const = default;
};

struct TreeEntry;

class Tree {
 public:
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTensor, kMap, kList };

  // Leaves.
  Tree();  // none
  Tree(std::nullptr_t);
  Tree(bool value);
  Tree(int value) : Tree(static_cast<int64_t>(value)) {}
  Tree(int64_t value);
  Tree(double value);
  Tree(std::string value);
  Tree(const char* value) : Tree(std::string(value)) {}
  Tree(Bytes value);
  Tree(Tensor value);
  // Containers, empty.
  static Tree map();
  static Tree list();

  Tree(const Tree& other);
  Tree(Tree&& other) noexcept;
  Tree& operator=(const Tree& other);
  Tree& operator=(Tree&& other) noexcept;
  ~Tree();

  Kind kind() const noexcept { return kind_; }
  bool is_map() const noexcept { return kind_ == Kind::kMap; }
  bool is_list() const noexcept { return kind_ == Kind::kList; }
  bool is_container() const noexcept { return is_map() || is_list(); }
  bool is_tensor() const noexcept { return kind_ == Kind::kTensor; }
  bool is_none() const noexcept { return kind_ == Kind::kNone; }

  // Leaf accessors. Each throws Error{kInvalidArgument} for another kind.
  bool boolean() const;
  int64_t integer() const;
  double real() const;
  const std::string& string() const;
  const Bytes& bytes() const;
  const Tensor& tensor() const;
  Tensor& tensor();

  // Containers: the number of children (0 for a leaf), and the children in order.
  size_t size() const noexcept;
  // Containers: room for `count` children without reallocation.
  void reserve(size_t count);
  const std::vector<TreeEntry>& entries() const noexcept;

  // Map: inserts or replaces `key`, keeping the first insertion's position.
  // Returns the stored child. Throws Error{kInvalidArgument} on a non-map.
  Tree& set(Key key, Tree value);
  // Map: the child at `key`, or nullptr.
  const Tree* find(const Key& key) const;
  Tree* find(const Key& key);
  // The node at `path` below this one, each key found as find() finds it
  // (exactly: the string "0" is not the integer 0); the empty path is this
  // node. nullptr if there is none.
  const Tree* find_key_path(const KeyPath& path) const;
  Tree* find_key_path(const KeyPath& path);
  // List: appends. Throws Error{kInvalidArgument} on a non-list.
  Tree& push_back(Tree value);
  // List: the child at `index`; map: the child at integer or string key.
  const Tree& operator[](size_t index) const;

  // The leaf (or subtree) whose dotted name is `name`: keys are matched
  // whole, so "a.b" finds {"a.b": x} as well as {"a": {"b": x}}; escaped
  // names from leaves() are found too. The empty name is the tree itself.
  // Returns nullptr if there is none.
  const Tree* find_path(std::string_view name) const;
  // As find_path(); throws Error{kNotFound} naming `name` if absent.
  const Tree& at(std::string_view name) const;

  // A leaf with its unique dotted name, in tree order (depth first, children
  // in order). Empty maps and lists are not leaves.
  struct Leaf {
    std::string name;
    const Tree* value;
  };
  // Every leaf, with names made unique by the escape rule in the file comment.
  std::vector<Leaf> leaves() const;
  // Only the tensor leaves, likewise named.
  std::vector<Leaf> tensor_leaves() const;
  // Calls `fn` on every tensor leaf in tree order, with write access (to
  // swap a tensor for another, e.g. a heap copy).
  void for_each_tensor(const std::function<void(Tensor&)>& fn);

  // Deep equality: same shape of tree, same keys in the same order, equal
  // leaves (tensors by dtype, shape and bytes; floats bitwise, so NaN == NaN).
  bool operator==(const Tree& other) const;

 private:
  using Scalar = std::variant<std::monostate, bool, int64_t, double, std::string, Bytes, Tensor>;
  // Open-addressing hash index over a large map's entries (positions, not
  // copies of the keys); small maps are searched linearly.
  struct Index;
  size_t position_of(const Key& key) const noexcept;
  void index_entry(size_t position);

  Kind kind_ = Kind::kNone;
  Scalar scalar_;
  std::unique_ptr<std::vector<TreeEntry>> children_;  // maps and lists
  std::unique_ptr<Index> index_;                      // maps with many entries
};

// One child of a map (key is the map key) or a list (key is the position).
struct TreeEntry {
  Key key;
  Tree value;
};

// "none", "bool", "int", "float", "string", "bytes", "tensor", "map", "list".
std::string_view tree_kind_name(Tree::Kind kind);

}  // namespace ckpt
