// apply_preloads and read_preload_source, see include/ckpt/preload.h. Each
// spec is resolved against its source into (target name -> source name)
// pairs, checked whole (prefixes, mappings, shapes, missing names, earlier
// writes), and only then written into the copy of the state that the
// report returns.

#include "ckpt/preload.h"

#include <set>
#include <unordered_map>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "core/text.h"
#include "ckpt/run_directory.h"

namespace ckpt {
namespace {

// A leaf of the target with the keys that find it in a copy of the tree.
struct PreloadTargetLeaf {
  std::string name;
  KeyPath path;
  const Tree* value;
};

void collect_preload_targets(const Tree& node, std::string& name, KeyPath& path,
                             std::vector<PreloadTargetLeaf>& out) {
  if (!node.is_container()) {
    out.push_back({name, path, &node});
    return;
  }
  const size_t length = name.size();
  for (size_t position = 0; position < node.size(); ++position) {
    path.push_back(node.key_at(position));
    append_name(name, key_to_string(path.back()));
    collect_preload_targets(node.child(position), name, path, out);
    name.resize(length);
    path.pop_back();
  }
}

// "[3, 4] float32" for a tensor, the kind's name for anything else.
std::string preload_leaf_text(const Tree& leaf) {
  if (!leaf.is_tensor()) return std::string(tree_kind_name(leaf.kind()));
  return shape_text(leaf.tensor().shape()) + " " + std::string(dtype_name(leaf.tensor().dtype()));
}

bool same_form(const Tree& source, const Tree& target) {
  if (source.kind() != target.kind()) return false;
  if (!source.is_tensor()) return true;
  return source.tensor().dtype() == target.tensor().dtype() && source.tensor().shape() == target.tensor().shape();
}

// What a spec writes: target name -> source name, and the target names in
// the order the source gave them (for `unexpected`).
struct ResolvedNames {
  std::unordered_map<std::string, std::string> source_of;
  std::vector<std::string> order;
};

class PreloadApplier {
 public:
  PreloadApplier(const Tree& state, const PreloadOptions& options) : options_(options), state_(state) {
    std::string name;
    KeyPath path;
    if (state.is_container()) collect_preload_targets(state, name, path, targets_);
    for (size_t i = 0; i < targets_.size(); ++i) target_index_.emplace(targets_[i].name, i);
  }

  PreloadResult apply(const PreloadSpec& spec) {
    PreloadResult result{.name = spec.name, .when = spec.when};
    if (!preload_applies(spec.when, options_.stage)) return result;
    result.applied = true;
    PreloadSource source = options_.read_source ? options_.read_source(spec) : read_preload_source(spec.source);
    result.source = source.path;
    context_ = "preload '" + spec.name + "' (" + source.path.string() + ")";
    const Tree& root = sub_tree(spec, source);
    std::unordered_map<std::string, const Tree*> source_leaves;
    const std::vector<Tree::Leaf> leaves = root.is_container() ? root.leaves() : std::vector<Tree::Leaf>{};
    for (const Tree::Leaf& leaf : leaves) source_leaves.emplace(leaf.name, leaf.value);
    const ResolvedNames names = resolve(spec, leaves, source_leaves, source.path);

    const auto ignored = [&](const std::string& target) {
      for (const std::string& name : spec.ignore_params) {
        if (target == name) return true;
      }
      for (const std::string& prefix : spec.ignore_params_prefixes) {
        if (target.starts_with(prefix)) return true;
      }
      return false;
    };
    const auto in_scope = [&](const std::string& target) {
      if (spec.prefix.empty()) return true;
      for (const auto& [from, to] : spec.prefix) {
        if (target.starts_with(to)) return true;
      }
      return spec.var_name_mapping.contains(target);
    };
    std::vector<size_t> writes;  // target positions, in target order
    for (size_t i = 0; i < targets_.size(); ++i) {
      const PreloadTargetLeaf& target = targets_[i];
      const auto incoming = names.source_of.find(target.name);
      if (ignored(target.name)) {
        if (incoming != names.source_of.end() || in_scope(target.name)) result.ignored.push_back(target.name);
        continue;
      }
      if (incoming == names.source_of.end()) {
        if (in_scope(target.name) && !written_by_.contains(target.name)) result.missing.push_back(target.name);
        continue;
      }
      const Tree& value = *source_leaves.at(incoming->second);
      if (!same_form(value, *target.value)) {
        throw Error(ErrorCode::kMismatch,
                    context_ + ": parameter '" + target.name + "': source '" + incoming->second + "' " +
                        preload_leaf_text(value) + ", target " + preload_leaf_text(*target.value),
                    {.path = source.path, .entry = target.name});
      }
      if (const auto earlier = written_by_.find(target.name); earlier != written_by_.end()) {
        if (!spec.overrides) {
          throw Error(ErrorCode::kInvalidArgument,
                      context_ + " writes '" + target.name + "', which preload '" + earlier->second +
                          "' wrote: set overrides on the later one to let it",
                      {.path = source.path, .entry = target.name});
        }
        result.overridden.push_back(target.name);
      }
      writes.push_back(i);
      result.set.emplace_back(target.name, incoming->second);
    }
    for (const std::string& target : names.order) {
      if (!target_index_.contains(target) && !ignored(target)) result.unexpected.push_back(target);
    }
    if (!result.missing.empty() && !spec.ignore_missing) {
      throw Error(ErrorCode::kNotFound,
                  context_ + ": target parameters missing in the source (" + std::to_string(result.missing.size()) +
                      "): " + detail::comma_separated(result.missing) + " (ignore_missing lets them pass)",
                  {.path = source.path, .entry = result.missing.front()});
    }
    if (result.set.empty()) {
      throw Error(ErrorCode::kNotFound,
                  context_ + " sets no parameter of the target (" + std::to_string(names.order.size()) +
                      " source names mapped, " + std::to_string(result.unexpected.size()) + " not in the target)",
                  {.path = source.path});
    }
    for (size_t i = 0; i < writes.size(); ++i) {
      const PreloadTargetLeaf& target = targets_[writes[i]];
      pending_.push_back({target.path, *source_leaves.at(result.set[i].second)});
      written_by_[target.name] = spec.name;
    }
    return result;
  }

  // The state with every checked write made.
  Tree finish() {
    Tree out = state_;
    for (auto& [path, value] : pending_) *out.find_key_path(path) = std::move(value);
    return out;
  }

 private:
  const Tree& sub_tree(const PreloadSpec& spec, const PreloadSource& source) {
    if (!spec.checkpoint_key) return source.state;
    const Tree* found = source.state.find_path(*spec.checkpoint_key);
    if (found == nullptr) {
      std::vector<std::string> keys;
      for (const TreeEntry& entry : source.state.entries()) keys.push_back(key_to_string(entry.key));
      throw Error(ErrorCode::kNotFound,
                  context_ + ": checkpoint_key '" + *spec.checkpoint_key + "' is not in the source (its keys: " +
                      detail::comma_separated(keys) + ")",
                  {.path = source.path, .entry = *spec.checkpoint_key});
    }
    if (!found->is_container()) {
      throw Error(ErrorCode::kInvalidArgument,
                  context_ + ": checkpoint_key '" + *spec.checkpoint_key + "' is a " +
                      std::string(tree_kind_name(found->kind())) + ", not a map",
                  {.path = source.path, .entry = *spec.checkpoint_key});
    }
    return *found;
  }

  ResolvedNames resolve(const PreloadSpec& spec, const std::vector<Tree::Leaf>& leaves,
                        const std::unordered_map<std::string, const Tree*>& source_leaves,
                        const std::filesystem::path& path) {
    ResolvedNames names;
    for (const auto& [from, to] : spec.prefix) {
      bool in_source = false;
      for (const Tree::Leaf& leaf : leaves) in_source = in_source || leaf.name.starts_with(from);
      if (!in_source) {
        throw Error(ErrorCode::kNotFound, context_ + ": prefix '" + from + "' matches no name in the source",
                    {.path = path, .entry = from});
      }
      bool in_target = false;
      for (const PreloadTargetLeaf& target : targets_) in_target = in_target || target.name.starts_with(to);
      if (!in_target) {
        throw Error(ErrorCode::kNotFound,
                    context_ + ": target prefix '" + to + "' (of source prefix '" + from +
                        "') matches no parameter of the target",
                    {.path = path, .entry = to});
      }
    }
    std::set<std::string> mapped;
    for (const auto& [target, source] : spec.var_name_mapping) {
      if (!source_leaves.contains(source)) {
        throw Error(ErrorCode::kNotFound,
                    context_ + ": var_name_mapping: '" + source + "' (for '" + target + "') is not in the source",
                    {.path = path, .entry = source});
      }
      if (!target_index_.contains(target)) {
        throw Error(ErrorCode::kNotFound,
                    context_ + ": var_name_mapping: target '" + target + "' is not a parameter of the target",
                    {.path = path, .entry = target});
      }
      mapped.insert(source);
      names.source_of.emplace(target, source);
      names.order.push_back(target);
    }
    for (const Tree::Leaf& leaf : leaves) {
      if (mapped.contains(leaf.name)) continue;
      std::string target;
      if (spec.prefix.empty()) {
        target = leaf.name;
      } else {
        const std::pair<const std::string, std::string>* best = nullptr;
        for (const auto& entry : spec.prefix) {
          if (leaf.name.starts_with(entry.first) && (best == nullptr || entry.first.size() >= best->first.size())) {
            best = &entry;
          }
        }
        if (best == nullptr) continue;
        target = best->second + leaf.name.substr(best->first.size());
      }
      if (names.source_of.emplace(target, leaf.name).second) names.order.push_back(target);
    }
    return names;
  }

  const PreloadOptions& options_;
  const Tree& state_;
  std::vector<PreloadTargetLeaf> targets_;
  std::unordered_map<std::string, size_t> target_index_;
  std::unordered_map<std::string, std::string> written_by_;  // target name -> spec name
  std::vector<std::pair<KeyPath, Tree>> pending_;
  std::string context_;
};

}  // namespace

bool preload_applies(PreloadWhen when, TrainingStage stage) noexcept {
  switch (when) {
    case PreloadWhen::kNotInTraining: return stage == TrainingStage::kNotTraining;
    case PreloadWhen::kFreshTraining: return stage == TrainingStage::kFreshTraining;
    case PreloadWhen::kAlways: return true;
  }
  return false;
}

PreloadSource read_preload_source(const std::filesystem::path& source) {
  std::error_code error;
  if (std::filesystem::is_directory(source, error)) {
    const RunListing listing = list_run_directory(source);
    if (!listing.checkpoints.empty()) {
      const std::filesystem::path latest = listing.checkpoints.back().path;
      return {latest, load(latest)};
    }
    try {
      return {source, load(source)};
    } catch (const Error& failure) {
      // "is a directory, not a file" or no format claims it: nothing to read here.
      if (failure.code() != ErrorCode::kUnsupported && failure.code() != ErrorCode::kInvalidArgument) throw;
      throw Error(ErrorCode::kNotFound,
                  "neither a run directory with a checkpoint nor a checkpoint (" + failure.message() + ")",
                  {.path = source});
    }
  }
  return {source, load(source)};
}

std::vector<std::string> PreloadReport::init_only() const {
  std::vector<std::string> names;
  for (const PreloadResult& result : preloads) {
    if (!result.applied || result.when != PreloadWhen::kAlways) continue;
    for (const auto& [target, source] : result.set) names.push_back(target);
  }
  return names;
}

PreloadReport apply_preloads(const Tree& state, std::span<const PreloadSpec> specs, const PreloadOptions& options) {
  PreloadApplier applier(state, options);
  PreloadReport report;
  for (size_t i = 0; i < specs.size(); ++i) report.preloads.push_back(applier.apply(specs[i]));
  report.state = applier.finish();
  return report;
}

}  // namespace ckpt
