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
#include <compare>
#include <cstddef>
#include <functional>
#include <iterator>
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

class Tree;

// One child of a map (key is the map key) or a list (key is the position),
// as Tree::entries() presents it: the key by value (list positions are not
// stored, so a list's keys are made as they are read), the child by
// reference into the tree (valid while the container is not changed).
struct TreeEntry {
  Key key;
  const Tree& value;
};

class Tree {
 public:
  enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kString, kBytes, kTensor, kMap, kList };

  // Leaves.
  Tree() noexcept = default;  // none
  Tree(std::nullptr_t) noexcept {}
  Tree(bool value) noexcept : kind_(Kind::kBool) { value_.boolean = value; }
  Tree(int value) noexcept : Tree(static_cast<int64_t>(value)) {}
  Tree(int64_t value) noexcept : kind_(Kind::kInt) { value_.integer = value; }
  Tree(double value) noexcept : kind_(Kind::kFloat) { value_.real = value; }
  Tree(std::string value);
  Tree(const char* value) : Tree(std::string(value)) {}
  Tree(Bytes value);
  Tree(Tensor value);
  // Containers, empty.
  static Tree map();
  static Tree list();

  // Copies share a string's or bytes' payload (immutable, reference
  // counted: a copy of a string leaf costs no copy of its text, as a pickle's
  // memo shares one str among all its references); tensors and containers
  // are copied (a tensor's copy shares its buffer).
  Tree(const Tree& other);
  Tree(Tree&& other) noexcept : kind_(other.kind_), value_(other.value_) { other.kind_ = Kind::kNone; }
  Tree& operator=(const Tree& other);
  Tree& operator=(Tree&& other) noexcept;
  ~Tree() { release(); }

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
  // String and bytes leaves: true while another Tree shares this one's
  // payload (string() / bytes() of both are the same object). False for
  // other kinds.
  bool shared() const noexcept;

  // The children of a map or a list in order (none for a leaf): a view with
  // size(), empty(), operator[], at(), front(), back() and iterators whose
  // elements are TreeEntry values (bind them as `const TreeEntry&`).
  class Entries;

  // Containers: the number of children (0 for a leaf), and the children in order.
  size_t size() const noexcept;
  // Containers: room for `count` children without reallocation.
  void reserve(size_t count);
  Entries entries() const noexcept;
  // The child at `position` (< size()) of a map or a list, and its key.
  const Tree& child(size_t position) const noexcept;
  Key key_at(size_t position) const;
  // Map: the key at `position` (< size()) without a copy; nullptr for a list.
  const Key* map_key(size_t position) const noexcept;

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
  // Calls `fn` on every leaf (or only every tensor leaf) in tree order with
  // the name leaves() gives it, without keeping the names: memory grows with
  // the depth of the tree, not with its leaves (except where names collide,
  // see the file comment: then the names seen are kept to find the later
  // ones). `name` is valid during the call only.
  void for_each_leaf(const std::function<void(std::string_view name, const Tree& leaf)>& fn) const;
  void for_each_tensor_leaf(const std::function<void(std::string_view name, const Tree& leaf)>& fn) const;
  // Calls `fn` on every tensor leaf in tree order, with write access (to
  // swap a tensor for another, e.g. a heap copy).
  void for_each_tensor(const std::function<void(Tensor&)>& fn);

  // Deep equality: same shape of tree, same keys in the same order, equal
  // leaves (tensors by dtype, shape and bytes; floats bitwise, so NaN == NaN).
  bool operator==(const Tree& other) const;

 private:
  // A leaf costs sizeof(Tree) (16 bytes) where it is stored: a kind and an
  // 8-byte value, inline for none, bool, int and float, else a pointer to
  // the payload on the heap.
  template <class T>
  struct Shared;            // string and bytes: immutable, reference counted
  struct MapNode;           // keys and children, and a hash index when large
  struct ListNode;          // children only: positions are not stored
  union Value {
    bool boolean;
    int64_t integer;
    double real;
    Shared<std::string>* string;
    Shared<Bytes>* bytes;
    Tensor* tensor;
    MapNode* map;
    ListNode* list;
  };
  void release() noexcept;
  size_t position_of(const Key& key) const noexcept;
  void index_entry(size_t position);

  Kind kind_ = Kind::kNone;
  Value value_{.integer = 0};
};

class Tree::Entries {
 public:
  class iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = TreeEntry;
    using difference_type = std::ptrdiff_t;
    using reference = TreeEntry;
    using pointer = void;
    iterator() = default;
    iterator(const Tree* tree, size_t position) : tree_(tree), position_(position) {}
    TreeEntry operator*() const { return {tree_->key_at(position_), tree_->child(position_)}; }
    TreeEntry operator[](difference_type n) const { return *(*this + n); }
    iterator& operator++() { ++position_; return *this; }
    iterator operator++(int) { iterator old = *this; ++position_; return old; }
    iterator& operator--() { --position_; return *this; }
    iterator operator--(int) { iterator old = *this; --position_; return old; }
    iterator& operator+=(difference_type n) { position_ += n; return *this; }
    iterator& operator-=(difference_type n) { position_ -= n; return *this; }
    friend iterator operator+(iterator it, difference_type n) { return it += n; }
    friend iterator operator+(difference_type n, iterator it) { return it += n; }
    friend iterator operator-(iterator it, difference_type n) { return it -= n; }
    friend difference_type operator-(const iterator& a, const iterator& b) {
      return static_cast<difference_type>(a.position_) - static_cast<difference_type>(b.position_);
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.position_ == b.position_; }
    friend auto operator<=>(const iterator& a, const iterator& b) { return a.position_ <=> b.position_; }

   private:
    const Tree* tree_ = nullptr;
    size_t position_ = 0;
  };
  using const_iterator = iterator;
  using value_type = TreeEntry;

  explicit Entries(const Tree* tree) noexcept : tree_(tree) {}
  size_t size() const noexcept { return tree_->size(); }
  bool empty() const noexcept { return size() == 0; }
  iterator begin() const noexcept { return {tree_, 0}; }
  iterator end() const noexcept { return {tree_, size()}; }
  TreeEntry operator[](size_t position) const { return {tree_->key_at(position), tree_->child(position)}; }
  // Throws Error{kNotFound} past the end.
  TreeEntry at(size_t position) const;
  TreeEntry front() const { return (*this)[0]; }
  TreeEntry back() const { return (*this)[size() - 1]; }

 private:
  const Tree* tree_;
};

inline Tree::Entries Tree::entries() const noexcept { return Entries(this); }

// "none", "bool", "int", "float", "string", "bytes", "tensor", "map", "list".
std::string_view tree_kind_name(Tree::Kind kind);

}  // namespace ckpt
