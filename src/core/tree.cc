#include "ckpt/tree.h"

#include <atomic>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "ckpt/error.h"

namespace ckpt {

std::string_view tree_kind_name(Tree::Kind kind) {
  switch (kind) {
    case Tree::Kind::kNone: return "none";
    case Tree::Kind::kBool: return "bool";
    case Tree::Kind::kInt: return "int";
    case Tree::Kind::kFloat: return "float";
    case Tree::Kind::kString: return "string";
    case Tree::Kind::kBytes: return "bytes";
    case Tree::Kind::kTensor: return "tensor";
    case Tree::Kind::kMap: return "map";
    case Tree::Kind::kList: return "list";
  }
  return "unknown";
}

std::string key_to_string(const Key& key) {
  if (const auto* text = std::get_if<std::string>(&key)) return *text;
  return std::to_string(std::get<int64_t>(key));
}

namespace {

// Maps with fewer entries are searched linearly; no index is built.
constexpr size_t kIndexThreshold = 16;
constexpr size_t kNoPosition = static_cast<size_t>(-1);

size_t hash_key(const Key& key) noexcept {
  if (const auto* text = std::get_if<std::string>(&key)) return std::hash<std::string_view>()(*text);
  return static_cast<size_t>(std::get<int64_t>(key)) * 0x9e3779b97f4a7c15ull;
}

}  // namespace

namespace {

// Slots hold entry position + 1 in the low 32 bits (0 = empty) and the high
// 32 bits of the key's hash in the high ones, so that a probe compares keys
// only when their hashes agree; the slot count is a power of two at least
// twice the number of entries, so probes stay short.
struct Index {
  std::vector<uint64_t> slots;
};

constexpr uint64_t slot_value(size_t position, size_t hash) noexcept {
  return (static_cast<uint64_t>(hash) & 0xffffffff00000000ull) | static_cast<uint64_t>(position + 1);
}
constexpr uint32_t slot_position(uint64_t slot) noexcept { return static_cast<uint32_t>(slot); }  // + 1
constexpr bool slot_hash_matches(uint64_t slot, size_t hash) noexcept {
  return ((slot ^ static_cast<uint64_t>(hash)) & 0xffffffff00000000ull) == 0;
}

struct MapEntry {
  Key key;
  Tree value;
};

}  // namespace

template <class T>
struct Tree::Shared {
  explicit Shared(T held) : value(std::move(held)) {}
  std::atomic<uint64_t> references{1};
  const T value;
};

struct Tree::MapNode {
  std::vector<MapEntry> entries;
  std::unique_ptr<Index> index;  // maps with many entries
};

struct Tree::ListNode {
  std::vector<Tree> items;
};

namespace {

template <class T>
T* acquire(T* shared) noexcept {
  shared->references.fetch_add(1, std::memory_order_relaxed);
  return shared;
}

template <class T>
void drop(T* shared) noexcept {
  if (shared->references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete shared;
}

}  // namespace

namespace {

// The position of `key` (whose hash is `hash`) among `children`, or
// kNoPosition.
size_t find_position(const std::vector<MapEntry>& children, const Index* index, const Key& key, size_t hash) noexcept {
  if (!index) {
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].key == key) return i;
    }
    return kNoPosition;
  }
  const size_t mask = index->slots.size() - 1;
  for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    const uint64_t stored = index->slots[slot];
    if (stored == 0) return kNoPosition;
    if (slot_hash_matches(stored, hash) && children[slot_position(stored) - 1].key == key) {
      return slot_position(stored) - 1;
    }
  }
}

// (Re)builds the index over `children` with room for `count` entries.
void build_index(const std::vector<MapEntry>& children, std::unique_ptr<Index>& index, size_t count) {
  if (!index) index = std::make_unique<Index>();
  size_t capacity = 64;
  while (capacity < 4 * count) capacity *= 2;
  index->slots.assign(capacity, 0);
  const size_t mask = capacity - 1;
  for (size_t i = 0; i < children.size(); ++i) {
    const size_t hash = hash_key(children[i].key);
    size_t slot = hash & mask;
    while (index->slots[slot] != 0) slot = (slot + 1) & mask;
    index->slots[slot] = slot_value(i, hash);
  }
}

// Adds children[position], whose key hashes to `hash`, to the index (built,
// or grown with room to spare, where needed).
void add_to_index(const std::vector<MapEntry>& children, std::unique_ptr<Index>& index, size_t position, size_t hash) {
  const size_t count = children.size();
  if (!index && count < kIndexThreshold) return;  // once built (or reserved), kept up to date
  if (!index || index->slots.size() < 2 * count) return build_index(children, index, count);
  const size_t mask = index->slots.size() - 1;
  size_t slot = hash & mask;
  while (index->slots[slot] != 0) slot = (slot + 1) & mask;
  index->slots[slot] = slot_value(position, hash);
}

}  // namespace

size_t Tree::position_of(const Key& key) const noexcept {
  return find_position(value_.map->entries, value_.map->index.get(), key, hash_key(key));
}

void Tree::index_entry(size_t position) {
  const std::vector<MapEntry>& children = value_.map->entries;
  add_to_index(children, value_.map->index, position, hash_key(children[position].key));
}

namespace {
[[noreturn]] void wrong_kind(std::string_view wanted, Tree::Kind actual) {
  throw Error(ErrorCode::kInvalidArgument,
              "tree node is a " + std::string(tree_kind_name(actual)) + ", not a " + std::string(wanted));
}
}  // namespace

Tree::Tree(std::string value) : kind_(Kind::kString) { value_.string = new Shared<std::string>(std::move(value)); }
Tree::Tree(Bytes value) : kind_(Kind::kBytes) { value_.bytes = new Shared<Bytes>(std::move(value)); }
Tree::Tree(Tensor value) : kind_(Kind::kTensor) { value_.tensor = new Tensor(std::move(value)); }

Tree Tree::map() {
  Tree tree;
  tree.value_.map = new MapNode();
  tree.kind_ = Kind::kMap;
  return tree;
}

Tree Tree::list() {
  Tree tree;
  tree.value_.list = new ListNode();
  tree.kind_ = Kind::kList;
  return tree;
}

Tree::Tree(const Tree& other) {
  switch (other.kind_) {
    case Kind::kString: value_.string = acquire(other.value_.string); break;
    case Kind::kBytes: value_.bytes = acquire(other.value_.bytes); break;
    case Kind::kTensor: value_.tensor = new Tensor(*other.value_.tensor); break;
    case Kind::kMap: {
      auto node = std::make_unique<MapNode>();
      node->entries = other.value_.map->entries;
      if (other.value_.map->index) node->index = std::make_unique<Index>(*other.value_.map->index);
      value_.map = node.release();
      break;
    }
    case Kind::kList: value_.list = new ListNode(*other.value_.list); break;
    default: value_ = other.value_; break;
  }
  kind_ = other.kind_;
}

void Tree::release() noexcept {
  switch (kind_) {
    case Kind::kString: drop(value_.string); break;
    case Kind::kBytes: drop(value_.bytes); break;
    case Kind::kTensor: delete value_.tensor; break;
    case Kind::kMap: delete value_.map; break;
    case Kind::kList: delete value_.list; break;
    default: break;
  }
  kind_ = Kind::kNone;
}

Tree& Tree::operator=(const Tree& other) {
  if (this != &other) *this = Tree(other);
  return *this;
}

Tree& Tree::operator=(Tree&& other) noexcept {
  if (this != &other) {
    // `other` may live inside this node (a child moved over its parent):
    // take it before releasing.
    const Kind kind = other.kind_;
    const Value value = other.value_;
    other.kind_ = Kind::kNone;
    release();
    kind_ = kind;
    value_ = value;
  }
  return *this;
}

bool Tree::boolean() const {
  if (kind_ != Kind::kBool) wrong_kind("bool", kind_);
  return value_.boolean;
}
int64_t Tree::integer() const {
  if (kind_ != Kind::kInt) wrong_kind("int", kind_);
  return value_.integer;
}
double Tree::real() const {
  if (kind_ != Kind::kFloat) wrong_kind("float", kind_);
  return value_.real;
}
const std::string& Tree::string() const {
  if (kind_ != Kind::kString) wrong_kind("string", kind_);
  return value_.string->value;
}
const Bytes& Tree::bytes() const {
  if (kind_ != Kind::kBytes) wrong_kind("bytes", kind_);
  return value_.bytes->value;
}
const Tensor& Tree::tensor() const {
  if (kind_ != Kind::kTensor) wrong_kind("tensor", kind_);
  return *value_.tensor;
}
Tensor& Tree::tensor() {
  if (kind_ != Kind::kTensor) wrong_kind("tensor", kind_);
  return *value_.tensor;
}

bool Tree::shared() const noexcept {
  if (kind_ == Kind::kString) return value_.string->references.load(std::memory_order_relaxed) > 1;
  if (kind_ == Kind::kBytes) return value_.bytes->references.load(std::memory_order_relaxed) > 1;
  return false;
}

size_t Tree::size() const noexcept {
  if (kind_ == Kind::kMap) return value_.map->entries.size();
  if (kind_ == Kind::kList) return value_.list->items.size();
  return 0;
}

void Tree::reserve(size_t count) {
  if (kind_ == Kind::kMap) {
    value_.map->entries.reserve(count);
    // The index sized for `count` at once, not rebuilt as the map grows.
    const Index* index = value_.map->index.get();
    if (count >= kIndexThreshold && (!index || index->slots.size() < 2 * count)) {
      build_index(value_.map->entries, value_.map->index, count);
    }
    return;
  }
  if (kind_ == Kind::kList) return value_.list->items.reserve(count);
  wrong_kind("map or list", kind_);
}

const Tree& Tree::child(size_t position) const noexcept {
  return kind_ == Kind::kMap ? value_.map->entries[position].value : value_.list->items[position];
}

Key Tree::key_at(size_t position) const {
  if (kind_ == Kind::kMap) return value_.map->entries[position].key;
  return static_cast<int64_t>(position);
}

const Key* Tree::map_key(size_t position) const noexcept {
  return kind_ == Kind::kMap ? &value_.map->entries[position].key : nullptr;
}

TreeEntry Tree::Entries::at(size_t position) const {
  if (position >= size()) throw Error(ErrorCode::kNotFound, "no child at position " + std::to_string(position));
  return (*this)[position];
}

Tree& Tree::set(Key key, Tree value) {
  if (kind_ != Kind::kMap) wrong_kind("map", kind_);
  std::vector<MapEntry>& children = value_.map->entries;
  const size_t hash = hash_key(key);
  const size_t position = find_position(children, value_.map->index.get(), key, hash);
  if (position != kNoPosition) {
    children[position].value = std::move(value);
    return children[position].value;
  }
  if (children.size() >= UINT32_MAX - 1) throw Error(ErrorCode::kInvalidArgument, "map has too many entries");
  children.push_back(MapEntry{std::move(key), std::move(value)});
  add_to_index(children, value_.map->index, children.size() - 1, hash);
  return children.back().value;
}

const Tree* Tree::find(const Key& key) const {
  if (kind_ == Kind::kMap) {
    const size_t position = position_of(key);
    return position == kNoPosition ? nullptr : &value_.map->entries[position].value;
  }
  if (kind_ == Kind::kList) {
    const auto* position = std::get_if<int64_t>(&key);
    if (position && *position >= 0 && static_cast<size_t>(*position) < value_.list->items.size()) {
      return &value_.list->items[static_cast<size_t>(*position)];
    }
  }
  return nullptr;
}

void append_name(std::string& name, std::string_view key) {
  if (!name.empty()) name += '.';
  name += key;
}

std::string join_name(std::string_view parent, std::string_view key) {
  std::string name(parent);
  append_name(name, key);
  return name;
}

std::string join_names(std::span<const std::string> keys) {
  std::string name;
  for (const std::string& key : keys) append_name(name, key);
  return name;
}

Tree* Tree::find(const Key& key) { return const_cast<Tree*>(std::as_const(*this).find(key)); }

const Tree* Tree::find_key_path(const KeyPath& path) const {
  const Tree* node = this;
  for (const Key& key : path) {
    node = node->find(key);
    if (node == nullptr) return nullptr;
  }
  return node;
}

Tree* Tree::find_key_path(const KeyPath& path) {
  return const_cast<Tree*>(std::as_const(*this).find_key_path(path));
}

Tree& Tree::push_back(Tree value) {
  if (kind_ != Kind::kList) wrong_kind("list", kind_);
  std::vector<Tree>& items = value_.list->items;
  items.push_back(std::move(value));
  return items.back();
}

const Tree& Tree::operator[](size_t index) const {
  if (!is_container() || index >= size()) {
    throw Error(ErrorCode::kNotFound, "no child at position " + std::to_string(index));
  }
  return child(index);
}

namespace {

// Children of `node` whose name equals `part` (a string key, or an integer
// key / list position printed in decimal).
const Tree* find_child_named(const Tree& node, std::string_view part) {
  if (const Tree* child = node.find(Key(std::string(part)))) return child;
  if (part.empty() || part.size() > 19) return nullptr;
  int64_t number = 0;
  size_t start = part[0] == '-' ? 1 : 0;
  if (start == part.size()) return nullptr;
  for (size_t i = start; i < part.size(); ++i) {
    if (part[i] < '0' || part[i] > '9') return nullptr;
    number = number * 10 + (part[i] - '0');
  }
  if (start) number = -number;
  if (std::to_string(number) != part) return nullptr;  // "01" is not 1
  return node.find(Key(number));
}

const Tree* find_structural(const Tree& node, std::string_view name) {
  if (name.empty()) return &node;
  if (!node.is_container()) return nullptr;
  // The whole remaining name as one key first (flat state dicts), then every
  // split at a dot from the left.
  if (const Tree* child = find_child_named(node, name)) return child;
  for (size_t dot = name.find('.'); dot != std::string_view::npos; dot = name.find('.', dot + 1)) {
    if (const Tree* child = find_child_named(node, name.substr(0, dot))) {
      if (const Tree* found = find_structural(*child, name.substr(dot + 1))) return found;
    }
  }
  return nullptr;
}

std::string escape_key(const Key& key) {
  if (const auto* number = std::get_if<int64_t>(&key)) return std::to_string(*number);
  std::string out;
  for (char c : std::get<std::string>(key)) {
    if (c == '\\' || c == '.') out += '\\';
    out += c;
  }
  return out;
}

// Whether two leaves below `node` could get one dotted name. Keys are joined
// with dots, one between each two, so paths of different lengths make
// different names and paths of one length make the same name only if some
// key holds a '.', or a map holds a string key and an integer key that print
// the same ("1" and 1). Neither: every name is unique as it is.
bool names_may_collide(const Tree& node) {
  if (!node.is_container()) return false;
  if (node.is_map()) {
    bool integers = false;
    bool strings = false;
    for (size_t i = 0; i < node.size(); ++i) {
      const Key& key = *node.map_key(i);
      if (const auto* text = std::get_if<std::string>(&key)) {
        if (text->find('.') != std::string::npos) return true;
        strings = true;
      } else {
        integers = true;
      }
    }
    if (integers && strings) {
      for (size_t i = 0; i < node.size(); ++i) {
        const auto* number = std::get_if<int64_t>(node.map_key(i));
        if (number && node.find(Key(std::to_string(*number)))) return true;
      }
    }
  }
  for (size_t i = 0; i < node.size(); ++i) {
    if (names_may_collide(node.child(i))) return true;
  }
  return false;
}

// Walks the leaves depth first, building each name in one string as it goes.
// Only when names may collide are the names seen kept (to escape the later
// ones) and the path of keys followed (to write the escaped name).
struct LeafWalker {
  bool tensors_only;
  bool collisions;
  const std::function<void(std::string_view, const Tree&)>& fn;
  std::unordered_set<std::string> taken;
  std::vector<Key> path;
  std::string name;

  void visit(const Tree& node, size_t depth) {
    if (node.is_container()) {
      for (size_t i = 0; i < node.size(); ++i) {
        const size_t length = name.size();
        if (depth > 0) name += '.';
        const Key* key = node.map_key(i);
        if (key == nullptr) {
          name += std::to_string(i);
        } else if (const auto* text = std::get_if<std::string>(key)) {
          name += *text;
        } else {
          name += std::to_string(std::get<int64_t>(*key));
        }
        if (collisions) path.push_back(key ? *key : Key(static_cast<int64_t>(i)));
        visit(node.child(i), depth + 1);
        if (collisions) path.pop_back();
        name.resize(length);
      }
      return;
    }
    if (tensors_only && !node.is_tensor()) return;
    if (!collisions) return fn(name, node);
    std::string unique = name;
    if (!taken.insert(unique).second) {
      unique.clear();
      for (size_t i = 0; i < path.size(); ++i) {
        if (i) unique += '.';
        unique += escape_key(path[i]);
      }
      const std::string base = unique;
      for (int n = 1; !taken.insert(unique).second; ++n) unique = base + "\\#" + std::to_string(n);
    }
    fn(unique, node);
  }
};

void walk_leaves(const Tree& tree, bool tensors_only,
                 const std::function<void(std::string_view, const Tree&)>& fn) {
  LeafWalker walker{tensors_only, names_may_collide(tree), fn, {}, {}, {}};
  walker.visit(tree, 0);
}

std::vector<Tree::Leaf> collect(const Tree& tree, bool tensors_only) {
  std::vector<Tree::Leaf> leaves;
  walk_leaves(tree, tensors_only,
              [&](std::string_view name, const Tree& leaf) { leaves.push_back({std::string(name), &leaf}); });
  return leaves;
}

}  // namespace

std::vector<Tree::Leaf> Tree::leaves() const { return collect(*this, false); }
std::vector<Tree::Leaf> Tree::tensor_leaves() const { return collect(*this, true); }

void Tree::for_each_leaf(const std::function<void(std::string_view, const Tree&)>& fn) const {
  walk_leaves(*this, false, fn);
}
void Tree::for_each_tensor_leaf(const std::function<void(std::string_view, const Tree&)>& fn) const {
  walk_leaves(*this, true, fn);
}

void Tree::for_each_tensor(const std::function<void(Tensor&)>& fn) {
  if (kind_ == Kind::kTensor) {
    fn(*value_.tensor);
    return;
  }
  if (kind_ == Kind::kMap) {
    for (MapEntry& entry : value_.map->entries) entry.value.for_each_tensor(fn);
  } else if (kind_ == Kind::kList) {
    for (Tree& item : value_.list->items) item.for_each_tensor(fn);
  }
}

const Tree* Tree::find_path(std::string_view name) const {
  if (const Tree* found = find_structural(*this, name)) return found;
  // Escaped names (collisions) are only known to the full walk.
  if (name.find('\\') == std::string_view::npos) return nullptr;
  for (const Leaf& leaf : leaves()) {
    if (leaf.name == name) return leaf.value;
  }
  return nullptr;
}

const Tree& Tree::at(std::string_view name) const {
  if (const Tree* found = find_path(name)) return *found;
  throw Error(ErrorCode::kNotFound, "no entry named '" + std::string(name) + "' in the tree",
              {.entry = std::string(name)});
}

bool Tree::operator==(const Tree& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kNone: return true;
    case Kind::kBool: return boolean() == other.boolean();
    case Kind::kInt: return integer() == other.integer();
    case Kind::kFloat: {
      const double a = real(), b = other.real();
      return std::memcmp(&a, &b, sizeof a) == 0;
    }
    case Kind::kString: return string() == other.string();
    case Kind::kBytes: return bytes() == other.bytes();
    case Kind::kTensor: return tensor().equals(other.tensor());
    case Kind::kMap:
    case Kind::kList: {
      if (size() != other.size()) return false;
      for (size_t i = 0; i < size(); ++i) {
        if (kind_ == Kind::kMap && *map_key(i) != *other.map_key(i)) return false;
        if (!(child(i) == other.child(i))) return false;
      }
      return true;
    }
  }
  return false;
}

}  // namespace ckpt
