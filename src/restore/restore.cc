// restore(): matching a source tree against a target by leaf name, see
// include/ckpt/restore.h. Three passes: classify every target leaf (restored,
// missing, defaulted, mismatched) without touching data; in strict mode throw
// if anything is wrong; then build the result (casts, defaults, ties). Which
// default covers a leaf and what it takes: restore/defaults.h.

#include "ckpt/restore.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>

#include "ckpt/cast.h"
#include "restore/defaults.h"

namespace ckpt {
namespace {

// "[3, 4] float32" for a tensor, the kind's name for anything else.
std::string describe(const Tree& leaf) {
  if (!leaf.is_tensor()) return std::string(tree_kind_name(leaf.kind()));
  return shape_text(leaf.tensor().shape()) + " " + std::string(dtype_name(leaf.tensor().dtype()));
}

enum class DTypeClass { kBool, kInt, kFloat, kComplex };

DTypeClass dtype_class(DType dtype) {
  switch (dtype) {
    case DType::kBool: return DTypeClass::kBool;
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
      return DTypeClass::kInt;
    case DType::kComplex64: case DType::kComplex128: return DTypeClass::kComplex;
    default: return DTypeClass::kFloat;
  }
}

// A 0-d tensor's value read as `T` through a cast to `dtype`.
template <class T>
T read_scalar(const Tensor& tensor, DType dtype) {
  T value;
  std::memcpy(&value, cast(tensor, dtype).bytes().data(), sizeof(T));
  return value;
}

// A 0-d tensor's value as a bool/int/float leaf of kind `want`, when exact
// (floats: any float value; ints: integer dtypes that fit int64).
std::optional<Tree> scalar_from_tensor(const Tensor& tensor, Tree::Kind want) {
  if (tensor.ndim() != 0 || !tensor.has_data()) return std::nullopt;
  const DTypeClass from = dtype_class(tensor.dtype());
  if (want == Tree::Kind::kBool && from == DTypeClass::kBool) {
    return Tree(std::to_integer<uint8_t>(tensor.bytes()[0]) != 0);
  }
  if (want == Tree::Kind::kInt && from == DTypeClass::kInt) {
    if (tensor.dtype() == DType::kUInt64) {
      const uint64_t value = read_scalar<uint64_t>(tensor, DType::kUInt64);
      if (value > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return Tree(static_cast<int64_t>(value));
    }
    return Tree(read_scalar<int64_t>(tensor, DType::kInt64));
  }
  if (want == Tree::Kind::kFloat && (from == DTypeClass::kFloat || from == DTypeClass::kInt)) {
    if (from == DTypeClass::kInt && !cast_is_exact(tensor.dtype(), DType::kFloat64)) {
      const Tensor back = cast(cast(tensor, DType::kFloat64), tensor.dtype());
      if (!back.equals(tensor)) return std::nullopt;
    }
    return Tree(read_scalar<double>(tensor, DType::kFloat64));
  }
  return std::nullopt;
}

// A bool/int/float leaf as a 0-d tensor of `dtype`: integers must survive the
// trip exactly, floats round to the target's precision.
std::optional<Tensor> tensor_from_scalar(const Tree& leaf, DType dtype) {
  const DTypeClass to = dtype_class(dtype);
  Tensor source;
  switch (leaf.kind()) {
    case Tree::Kind::kBool: {
      if (to != DTypeClass::kBool) return std::nullopt;
      const uint8_t value = leaf.boolean() ? 1 : 0;
      return Tensor::from_values<uint8_t>(DType::kBool, {}, std::span(&value, 1));
    }
    case Tree::Kind::kInt: {
      if (to != DTypeClass::kInt && to != DTypeClass::kFloat) return std::nullopt;
      const int64_t value = leaf.integer();
      source = Tensor::from_values<int64_t>(DType::kInt64, {}, std::span(&value, 1));
      break;
    }
    case Tree::Kind::kFloat: {
      if (to != DTypeClass::kFloat) return std::nullopt;
      const double value = leaf.real();
      return cast(Tensor::from_values<double>(DType::kFloat64, {}, std::span(&value, 1)), dtype);
    }
    default: return std::nullopt;
  }
  Tensor converted = cast(source, dtype);
  if (!cast(converted, DType::kInt64).equals(source)) return std::nullopt;
  return converted;
}

enum class Status { kOutOfScope, kRestored, kMissing, kDefaulted, kShape, kDType };

using DefaultCover = detail::Cover;

struct Match {
  Status status = Status::kOutOfScope;
  const Tree* source = nullptr;  // kRestored
  std::optional<Tree> value;     // a converted value (scalars), else the source
  bool cast = false;             // kRestored through cast()
  DefaultCover cover;            // kDefaulted
  std::string detail;            // kShape, kDType
};

class Matcher {
 public:
  Matcher(const Tree& source, const RestoreOptions& options, const detail::DeclaredDefaults* defaults = nullptr)
      : options_(options), defaults_(defaults) {
    if (!options.rename.empty()) renamed_ = options.rename.apply(source);
    root_ = options.rename.empty() ? &source : &renamed_;
    source_leaves_ = root_->leaves();
    consumed_.assign(source_leaves_.size(), false);
    index_.reserve(source_leaves_.size());
    for (size_t i = 0; i < source_leaves_.size(); ++i) index_.emplace(source_leaves_[i].name, i);
  }

  bool in_scope(std::string_view name) const {
    if (!name_under(name, options_.prefix)) return false;
    if (options_.only.empty()) return true;
    for (const std::string& glob : options_.only) {
      if (glob_match(glob, name)) return true;
    }
    return false;
  }

  Match match(std::string_view name, const KeyPath& path, const Tree& target) {
    Match result;
    if (!in_scope(name)) return result;
    const auto found = index_.find(std::string(name));
    if (found != index_.end()) {
      consumed_[found->second] = true;
      compare(target, *source_leaves_[found->second].value, result);
      return result;
    }
    if (target.is_none()) {
      // A none leaf takes a whole subtree of the source.
      if (const Tree* subtree = root_->find_path(name); subtree != nullptr && subtree->is_container()) {
        for (size_t i = 0; i < source_leaves_.size(); ++i) {
          if (name_under(source_leaves_[i].name, name)) consumed_[i] = true;
        }
        result.status = Status::kRestored;
        result.source = subtree;
        return result;
      }
    }
    if (defaults_ != nullptr) {
      if (std::optional<detail::Cover> cover = defaults_->cover(name, path)) {
        result.status = Status::kDefaulted;
        result.cover = std::move(*cover);
        return result;
      }
    }
    result.status = Status::kMissing;
    return result;
  }

  // Source leaves in scope that matched nothing, in source order.
  std::vector<std::string> unexpected() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < source_leaves_.size(); ++i) {
      if (!consumed_[i] && in_scope(source_leaves_[i].name)) names.push_back(source_leaves_[i].name);
    }
    return names;
  }

  const Tree& root() const { return *root_; }

 private:
  bool cast_allowed(DType from, DType to) const {
    if (options_.dtype != DTypePolicy::kCast) return false;
    if (options_.casts.empty()) return true;
    for (const auto& [a, b] : options_.casts) {
      if (a == from && b == to) return true;
    }
    return false;
  }

  void compare(const Tree& target, const Tree& source, Match& result) const {
    result.source = &source;
    result.status = Status::kRestored;
    if (target.is_none() || (target.kind() == source.kind() && !target.is_tensor())) return;
    const auto mismatch = [&](Status status) {
      result.status = status;
      result.detail = "checkpoint " + describe(source) + ", target " + describe(target);
    };
    if (target.is_tensor() && source.is_tensor()) {
      const Tensor& want = target.tensor();
      const Tensor& have = source.tensor();
      if (want.shape() != have.shape()) return mismatch(Status::kShape);
      if (want.dtype() == have.dtype()) return;
      if (!cast_allowed(have.dtype(), want.dtype())) return mismatch(Status::kDType);
      result.cast = true;
      return;
    }
    if (target.is_tensor()) {
      if (target.tensor().ndim() != 0) return mismatch(Status::kShape);
      if (auto converted = tensor_from_scalar(source, target.tensor().dtype())) {
        result.value = Tree(std::move(*converted));
        return;
      }
      return mismatch(Status::kDType);
    }
    if (source.is_tensor()) {
      if (auto converted = scalar_from_tensor(source.tensor(), target.kind())) {
        result.value = std::move(*converted);
        return;
      }
      return mismatch(source.tensor().ndim() != 0 ? Status::kShape : Status::kDType);
    }
    if (target.kind() == Tree::Kind::kFloat && source.kind() == Tree::Kind::kInt) {
      const double value = static_cast<double>(source.integer());
      if (value >= -9007199254740992.0 && value <= 9007199254740992.0) {
        result.value = Tree(value);
        return;
      }
    }
    mismatch(Status::kDType);
  }

  const RestoreOptions& options_;
  const detail::DeclaredDefaults* defaults_;
  Tree renamed_;
  const Tree* root_ = nullptr;
  std::vector<Tree::Leaf> source_leaves_;
  std::vector<bool> consumed_;
  std::unordered_map<std::string, size_t> index_;
};

// The source's leaves in scope, structure kept; lists that lose items become
// maps with integer keys so that the remaining names do not change.
Tree filtered(const Tree& node, std::string& name, const Matcher& matcher) {
  if (!node.is_container()) return node;
  Tree result = node.is_map() ? Tree::map() : Tree::list();
  std::vector<std::pair<Key, Tree>> kept;
  bool dropped = false;
  const size_t length = name.size();
  for (const TreeEntry& entry : node.entries()) {
    append_name(name, key_to_string(entry.key));
    const bool leaf = !entry.value.is_container() || entry.value.size() == 0;
    if (leaf ? matcher.in_scope(name) : true) {
      Tree child = filtered(entry.value, name, matcher);
      if (leaf || child.size() > 0) {
        kept.emplace_back(entry.key, std::move(child));
      } else {
        dropped = true;
      }
    } else {
      dropped = true;
    }
    name.resize(length);
  }
  if (node.is_list() && dropped) result = Tree::map();
  for (auto& [key, child] : kept) {
    if (result.is_list()) {
      result.push_back(std::move(child));
    } else {
      result.set(std::move(key), std::move(child));
    }
  }
  return result;
}

std::string join(const std::vector<std::string>& names, const std::map<std::string, std::string>& details) {
  std::string text;
  for (const std::string& name : names) {
    if (!text.empty()) text += ", ";
    text += name;
    if (const auto found = details.find(name); found != details.end()) text += " (" + found->second + ")";
  }
  return text;
}

void collect_paths(const Tree& node, KeyPath& path, std::vector<std::pair<const Tree*, KeyPath>>& out) {
  if (!node.is_container()) {
    out.emplace_back(&node, path);
    return;
  }
  for (const TreeEntry& entry : node.entries()) {
    path.push_back(entry.key);
    collect_paths(entry.value, path, out);
    path.pop_back();
  }
}

// The key path of each of `tree`'s `leaves` (Tree::leaves(), whose order a
// depth-first walk repeats; checked leaf by leaf).
std::vector<KeyPath> key_paths(const Tree& tree, const std::vector<Tree::Leaf>& leaves) {
  std::vector<std::pair<const Tree*, KeyPath>> walked;
  KeyPath path;
  collect_paths(tree, path, walked);
  std::vector<KeyPath> paths;
  paths.reserve(walked.size());
  for (size_t i = 0; i < walked.size(); ++i) {
    if (i >= leaves.size() || walked[i].first != leaves[i].value) break;
    paths.push_back(std::move(walked[i].second));
  }
  if (paths.size() != leaves.size()) throw Error(ErrorCode::kInvalidArgument, "restore: the leaf walk lost its way");
  return paths;
}

}  // namespace

FieldDefault FieldDefault::keep() { return FieldDefault(); }

FieldDefault FieldDefault::value(Tree value) {
  FieldDefault result;
  result.kind_ = Kind::kValue;
  result.value_ = std::move(value);
  return result;
}

FieldDefault FieldDefault::factory(Factory factory) {
  FieldDefault result;
  result.kind_ = Kind::kFactory;
  result.factory_ = std::move(factory);
  return result;
}

FieldDefault FieldDefault::init(Initializer initializer) {
  FieldDefault result;
  result.kind_ = Kind::kInit;
  result.initializer_ = std::move(initializer);
  return result;
}

bool RestoreReport::ok() const noexcept {
  return missing.empty() && unexpected.empty() && shape_mismatched.empty() && dtype_mismatched.empty();
}

std::string RestoreReport::summary() const {
  if (ok()) return "";
  std::map<std::string, std::string> by_name;
  for (const std::string& line : details) {
    const size_t colon = line.rfind(": checkpoint ");
    if (colon != std::string::npos) by_name.emplace(line.substr(0, colon), line.substr(colon + 2));
  }
  const size_t count = missing.size() + unexpected.size() + shape_mismatched.size() + dtype_mismatched.size();
  std::string text = "restore found " + std::to_string(count) + (count == 1 ? " problem" : " problems");
  const char* separator = ": ";
  const auto group = [&](const char* title, const std::vector<std::string>& names) {
    if (names.empty()) return;
    text += separator;
    text += std::string(title) + " (" + std::to_string(names.size()) + "): " + join(names, by_name);
    separator = "; ";
  };
  group("missing", missing);
  group("unexpected", unexpected);
  group("shape mismatched", shape_mismatched);
  group("dtype mismatched", dtype_mismatched);
  return text;
}

MismatchError::MismatchError(RestoreReport report)
    : Error(ErrorCode::kMismatch, report.summary()), report_(std::move(report)) {}

RestoreReport restore(const Tree& target, const Tree& source, const RestoreOptions& options) {
  detail::DeclaredDefaults defaults(options.defaults);
  Matcher matcher(source, options, &defaults);
  RestoreReport report;
  report.tree = target;
  const std::vector<Tree::Leaf> leaves = report.tree.leaves();
  std::vector<KeyPath> paths = key_paths(report.tree, leaves);
  std::vector<Match> matches(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) matches[i] = matcher.match(leaves[i].name, paths[i], *leaves[i].value);
  // Tied target leaves: a missing one is filled from a restored partner.
  std::unordered_map<const std::byte*, std::vector<size_t>> ties;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Tree& leaf = *leaves[i].value;
    if (leaf.is_tensor() && leaf.tensor().has_data() && leaf.tensor().nbytes() > 0 &&
        leaf.tensor().buffer().address() != nullptr) {
      ties[leaf.tensor().buffer().address()].push_back(i);
    }
  }
  for (const auto& [address, members] : ties) {
    for (size_t i : members) {
      if (matches[i].status != Status::kMissing) continue;
      const Tensor& mine = leaves[i].value->tensor();
      for (size_t j : members) {
        const Tensor& partner = leaves[j].value->tensor();
        if (matches[j].status == Status::kRestored && mine.same_memory(partner) &&
            mine.dtype() == partner.dtype() && mine.shape() == partner.shape()) {
          matches[i] = matches[j];
          break;
        }
      }
    }
  }

  for (size_t i = 0; i < leaves.size(); ++i) {
    const std::string& name = leaves[i].name;
    switch (matches[i].status) {
      case Status::kOutOfScope: break;
      case Status::kRestored:
        report.restored.push_back(name);
        if (matches[i].cast) report.cast.push_back(name);
        break;
      case Status::kMissing: report.missing.push_back(name); break;
      case Status::kDefaulted: report.defaulted.push_back(name); break;
      case Status::kShape: report.shape_mismatched.push_back(name); break;
      case Status::kDType: report.dtype_mismatched.push_back(name); break;
    }
  }
  report.unexpected = matcher.unexpected();
  for (const Status status : {Status::kShape, Status::kDType}) {
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (matches[i].status == status) report.details.push_back(leaves[i].name + ": " + matches[i].detail);
    }
  }
  if (options.strict && !report.ok()) {
    report.tree = Tree();
    throw MismatchError(std::move(report));
  }

  // Declared subtrees whose every leaf was defaulted by them take their
  // value whole; each is filled in place of its first leaf.
  std::vector<std::optional<size_t>> defaulted_by(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (matches[i].status == Status::kDefaulted) defaulted_by[i] = matches[i].cover.index;
  }
  const std::vector<detail::WholeField> whole = defaults.whole_fields(report.tree, paths, defaulted_by);
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> whole_of(leaves.size(), kNone);
  for (size_t w = 0; w < whole.size(); ++w) {
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (detail::path_under(paths[i], whole[w].path)) whole_of[i] = w;
    }
  }
  std::vector<bool> placed(whole.size(), false);

  for (size_t i = 0; i < leaves.size(); ++i) {
    Tree& slot = const_cast<Tree&>(*leaves[i].value);  // a node of report.tree, which we own
    Match& match = matches[i];
    if (const size_t w = whole_of[i]; w != kNone) {
      if (!placed[w]) report.filled.push_back({whole[w].path, whole[w].index, /*whole_default=*/true});
      placed[w] = true;
      continue;
    }
    if (match.status == Status::kRestored) {
      if (match.value) {
        slot = std::move(*match.value);
      } else if (match.cast) {
        slot = Tree(cast(match.source->tensor(), slot.tensor().dtype(), options.threads));
      } else {
        slot = *match.source;
      }
      report.filled.push_back({.path = std::move(paths[i])});
    } else if (match.status == Status::kDefaulted) {
      const FieldDefault::Kind kind = defaults.kind(match.cover.index);
      if (kind == FieldDefault::Kind::kKeep) continue;
      slot = defaults.leaf_value(match.cover, leaves[i].name, slot);
      const bool whole_value = match.cover.whole() && kind != FieldDefault::Kind::kInit;
      report.filled.push_back({std::move(paths[i]), match.cover.index, whole_value});
    }
  }
  // Last: replacing a subtree ends the life of its leaves.
  for (const detail::WholeField& field : whole) {
    *report.tree.find_key_path(field.path) = defaults.whole_value(field.index);
  }
  return report;
}

RestoreReport restore(const Tree& source, const RestoreOptions& options) {
  Matcher matcher(source, options);
  RestoreReport report;
  if (options.prefix.empty() && options.only.empty()) {
    report.tree = matcher.root();
  } else {
    std::string name;
    report.tree = filtered(matcher.root(), name, matcher);
  }
  for (const Tree::Leaf& leaf : report.tree.leaves()) report.restored.push_back(leaf.name);
  return report;
}

}  // namespace ckpt
