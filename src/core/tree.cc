#include "ckpt/tree.h"

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

// Slots hold entry position + 1 (0 = empty); the slot count is a power of two
// at least twice the number of entries, so probes stay short.
struct Tree::Index {
  std::vector<uint32_t> slots;
};

size_t Tree::position_of(const Key& key) const noexcept {
  const std::vector<TreeEntry>& children = *children_;
  if (!index_) {
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].key == key) return i;
    }
    return kNoPosition;
  }
  const size_t mask = index_->slots.size() - 1;
  for (size_t slot = hash_key(key) & mask;; slot = (slot + 1) & mask) {
    const uint32_t stored = index_->slots[slot];
    if (stored == 0) return kNoPosition;
    if (children[stored - 1].key == key) return stored - 1;
  }
}

void Tree::index_entry(size_t position) {
  const size_t count = children_->size();
  if (count < kIndexThreshold) return;
  if (!index_ || index_->slots.size() < 2 * count) {
    // (Re)build with room to grow.
    if (!index_) index_ = std::make_unique<Index>();
    size_t capacity = 64;
    while (capacity < 4 * count) capacity *= 2;
    index_->slots.assign(capacity, 0);
    for (size_t i = 0; i < count; ++i) {
      const size_t mask = capacity - 1;
      size_t slot = hash_key((*children_)[i].key) & mask;
      while (index_->slots[slot] != 0) slot = (slot + 1) & mask;
      index_->slots[slot] = static_cast<uint32_t>(i + 1);
    }
    return;
  }
  const size_t mask = index_->slots.size() - 1;
  size_t slot = hash_key((*children_)[position].key) & mask;
  while (index_->slots[slot] != 0) slot = (slot + 1) & mask;
  index_->slots[slot] = static_cast<uint32_t>(position + 1);
}

namespace {
[[noreturn]] void wrong_kind(std::string_view wanted, Tree::Kind actual) {
  throw Error(ErrorCode::kInvalidArgument,
              "tree node is a " + std::string(tree_kind_name(actual)) + ", not a " + std::string(wanted));
}
}  // namespace

Tree::Tree() = default;
Tree::Tree(std::nullptr_t) {}
Tree::Tree(bool value) : kind_(Kind::kBool), scalar_(value) {}
Tree::Tree(int64_t value) : kind_(Kind::kInt), scalar_(value) {}
Tree::Tree(double value) : kind_(Kind::kFloat), scalar_(value) {}
Tree::Tree(std::string value) : kind_(Kind::kString), scalar_(std::move(value)) {}
Tree::Tree(Bytes value) : kind_(Kind::kBytes), scalar_(std::move(value)) {}
Tree::Tree(Tensor value) : kind_(Kind::kTensor), scalar_(std::move(value)) {}

Tree Tree::map() {
  Tree tree;
  tree.kind_ = Kind::kMap;
  tree.children_ = std::make_unique<std::vector<TreeEntry>>();
  return tree;
}

Tree Tree::list() {
  Tree tree;
  tree.kind_ = Kind::kList;
  tree.children_ = std::make_unique<std::vector<TreeEntry>>();
  return tree;
}

Tree::Tree(const Tree& other) : kind_(other.kind_), scalar_(other.scalar_) {
  if (other.children_) children_ = std::make_unique<std::vector<TreeEntry>>(*other.children_);
  if (other.index_) index_ = std::make_unique<Index>(*other.index_);
}

Tree::Tree(Tree&& other) noexcept = default;

Tree& Tree::operator=(const Tree& other) {
  if (this != &other) *this = Tree(other);
  return *this;
}

Tree& Tree::operator=(Tree&& other) noexcept = default;
Tree::~Tree() = default;


bool Tree::boolean() const {
  if (kind_ != Kind::kBool) wrong_kind("bool", kind_);
  return std::get<bool>(scalar_);
}
int64_t Tree::integer() const {
  if (kind_ != Kind::kInt) wrong_kind("int", kind_);
  return std::get<int64_t>(scalar_);
}
double Tree::real() const {
  if (kind_ != Kind::kFloat) wrong_kind("float", kind_);
  return std::get<double>(scalar_);
}
const std::string& Tree::string() const {
  if (kind_ != Kind::kString) wrong_kind("string", kind_);
  return std::get<std::string>(scalar_);
}
const Bytes& Tree::bytes() const {
  if (kind_ != Kind::kBytes) wrong_kind("bytes", kind_);
  return std::get<Bytes>(scalar_);
}
const Tensor& Tree::tensor() const {
  if (kind_ != Kind::kTensor) wrong_kind("tensor", kind_);
  return std::get<Tensor>(scalar_);
}
Tensor& Tree::tensor() {
  if (kind_ != Kind::kTensor) wrong_kind("tensor", kind_);
  return std::get<Tensor>(scalar_);
}

size_t Tree::size() const noexcept { return children_ ? children_->size() : 0; }

void Tree::reserve(size_t count) {
  if (!is_container()) wrong_kind("map or list", kind_);
  children_->reserve(count);
}

const std::vector<TreeEntry>& Tree::entries() const noexcept {
  static const std::vector<TreeEntry> kNone;
  return children_ ? *children_ : kNone;
}

Tree& Tree::set(Key key, Tree value) {
  if (kind_ != Kind::kMap) wrong_kind("map", kind_);
  const size_t position = position_of(key);
  if (position != kNoPosition) {
    (*children_)[position].value = std::move(value);
    return (*children_)[position].value;
  }
  if (children_->size() >= UINT32_MAX) throw Error(ErrorCode::kInvalidArgument, "map has too many entries");
  children_->push_back(TreeEntry{std::move(key), std::move(value)});
  index_entry(children_->size() - 1);
  return children_->back().value;
}

const Tree* Tree::find(const Key& key) const {
  if (kind_ == Kind::kMap) {
    const size_t position = position_of(key);
    return position == kNoPosition ? nullptr : &(*children_)[position].value;
  }
  if (kind_ == Kind::kList) {
    const auto* position = std::get_if<int64_t>(&key);
    if (position && *position >= 0 && static_cast<size_t>(*position) < children_->size()) {
      return &(*children_)[static_cast<size_t>(*position)].value;
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
  children_->push_back(TreeEntry{static_cast<int64_t>(children_->size()), std::move(value)});
  return children_->back().value;
}

const Tree& Tree::operator[](size_t index) const {
  if (!is_container() || index >= children_->size()) {
    throw Error(ErrorCode::kNotFound, "no child at position " + std::to_string(index));
  }
  return (*children_)[index].value;
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

struct LeafCollector {
  bool tensors_only;
  std::vector<Tree::Leaf> leaves;
  std::unordered_set<std::string> taken;
  std::vector<const Key*> path;

  void visit(const Tree& node, const std::string& name) {
    if (node.is_container()) {
      for (const TreeEntry& entry : node.entries()) {
        path.push_back(&entry.key);
        const std::string part = key_to_string(entry.key);
        visit(entry.value, name.empty() && path.size() == 1 ? part : name + "." + part);
        path.pop_back();
      }
      return;
    }
    if (tensors_only && !node.is_tensor()) return;
    std::string unique = name;
    if (!taken.insert(unique).second) {
      unique.clear();
      for (size_t i = 0; i < path.size(); ++i) {
        if (i) unique += '.';
        unique += escape_key(*path[i]);
      }
      const std::string base = unique;
      for (int n = 1; !taken.insert(unique).second; ++n) unique = base + "\\#" + std::to_string(n);
    }
    leaves.push_back(Tree::Leaf{std::move(unique), &node});
  }
};

enum class Leaves { kAll, kTensorsOnly };

std::vector<Tree::Leaf> collect(const Tree& tree, Leaves which) {
  LeafCollector collector{which == Leaves::kTensorsOnly, {}, {}, {}};
  collector.visit(tree, "");
  return std::move(collector.leaves);
}

}  // namespace

std::vector<Tree::Leaf> Tree::leaves() const { return collect(*this, Leaves::kAll); }
std::vector<Tree::Leaf> Tree::tensor_leaves() const { return collect(*this, Leaves::kTensorsOnly); }

void Tree::for_each_tensor(const std::function<void(Tensor&)>& fn) {
  if (kind_ == Kind::kTensor) {
    fn(std::get<Tensor>(scalar_));
    return;
  }
  if (!children_) return;
  for (TreeEntry& entry : *children_) entry.value.for_each_tensor(fn);
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
        const TreeEntry& a = (*children_)[i];
        const TreeEntry& b = (*other.children_)[i];
        if (a.key != b.key || !(a.value == b.value)) return false;
      }
      return true;
    }
  }
  return false;
}

}  // namespace ckpt
