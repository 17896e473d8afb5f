// split_by_module and merge_module_files, see include/ckpt/modules.h. One
// walk of the tree decides each leaf's file (module_file_of) and builds the
// parts together; the merge unites the parts map by map and checks each
// leaf against the same rule.

#include "ckpt/modules.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>

#include "ckpt/error.h"
#include "core/text.h"
#include "ckpt/transform.h"

namespace ckpt {
namespace {

void require_file_name(const std::string& file, std::string_view what) {
  const bool plain = !file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos &&
                     file.find('\0') == std::string::npos;
  if (!plain) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(what) + " '" + file + "' is not a plain file name (one path component)");
  }
}

void validate_module_options(const ModuleFileOptions& options) {
  require_file_name(options.main_file, "main file");
  for (const auto& [module, file] : options.files) {
    if (module.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "module name is empty (the main file takes everything unassigned: set main_file)");
    }
    require_file_name(file, "file of module '" + module + "':");
  }
  for (const std::string& name : options.init_only) {
    if (name.empty()) throw Error(ErrorCode::kInvalidArgument, "init_only entry is empty");
  }
}

// The files in the order split_by_module returns them: the main file, then
// the assigned ones by name.
std::vector<std::string> file_order(const ModuleFileOptions& options) {
  std::set<std::string> assigned;
  for (const auto& [module, file] : options.files) {
    if (file != options.main_file) assigned.insert(file);
  }
  std::vector<std::string> files{options.main_file};
  files.insert(files.end(), assigned.begin(), assigned.end());
  return files;
}

constexpr size_t kNowhere = static_cast<size_t>(-1);

// One pass over the tree: each leaf's destination, and the parts built.
class Splitter {
 public:
  Splitter(const ModuleFileOptions& options, const std::vector<std::string>& files)
      : options_(options), files_(files) {
    for (size_t i = 0; i < files_.size(); ++i) index_.emplace(files_[i], i);
  }

  // The part of a node for each file (nullopt where a file gets none of
  // it), and whether all of it goes to one destination (kNowhere included).
  struct Parts {
    std::vector<std::optional<Tree>> parts;
    bool mixed = false;
    size_t destination = kNowhere;
  };

  // The parts of `node`, named `name`.
  Parts split(const Tree& node, std::string& name) {
    Parts out{.parts = std::vector<std::optional<Tree>>(files_.size())};
    if (!node.is_container() || node.size() == 0) {
      out.destination = destination_of(name);
      if (out.destination != kNowhere) out.parts[out.destination] = node;
      return out;
    }
    const size_t length = name.size();
    for (size_t position = 0; position < node.size(); ++position) {
      const Key key = node.key_at(position);
      append_name(name, key_to_string(key));
      Parts child = split(node.child(position), name);
      name.resize(length);
      if (position == 0) out.destination = child.destination;
      if (child.mixed || child.destination != out.destination) {
        if (node.is_list()) throw divided_list(name);
        out.mixed = true;
      }
      if (node.is_list()) continue;
      for (size_t i = 0; i < out.parts.size(); ++i) {
        if (!child.parts[i]) continue;
        if (!out.parts[i]) out.parts[i] = Tree::map();
        out.parts[i]->set(key, std::move(*child.parts[i]));
      }
    }
    // A list goes whole to its one destination.
    if (node.is_list() && out.destination != kNowhere) out.parts[out.destination] = node;
    return out;
  }

  void require_all_matched() const {
    for (const auto& [module, file] : options_.files) {
      if (!matched_.contains(module)) {
        throw Error(ErrorCode::kInvalidArgument, "module '" + module + "' (assigned to " + file + ") matches no leaf",
                    {.entry = module});
      }
    }
    for (const std::string& entry : options_.init_only) {
      if (!matched_.contains(entry)) {
        throw Error(ErrorCode::kInvalidArgument, "init_only entry '" + entry + "' matches no leaf", {.entry = entry});
      }
    }
  }

 private:
  static Error divided_list(const std::string& name) {
    return Error(ErrorCode::kInvalidArgument,
                 "list '" + name + "' would be divided between module files (or init-only): assign the whole list",
                 {.entry = name});
  }

  size_t destination_of(const std::string& name) {
    for (const auto& [module, file] : options_.files) {
      if (name_under(name, module)) matched_.insert(module);
    }
    for (const std::string& entry : options_.init_only) {
      if (name_under(name, entry)) matched_.insert(entry);
    }
    const std::string file = module_file_of(name, options_);
    return file.empty() ? kNowhere : index_.at(file);
  }

  const ModuleFileOptions& options_;
  const std::vector<std::string>& files_;
  std::unordered_map<std::string, size_t> index_;
  std::set<std::string> matched_;
};

// The map `tree` rebuilt with the key order of `reference` where it has
// the key (recursively), then its other keys in their order.
Tree ordered_like(const Tree& tree, const Tree& reference) {
  if (!tree.is_map() || !reference.is_map()) {
    if (tree.is_list() && reference.is_list() && tree.size() == reference.size()) {
      Tree list = Tree::list();
      list.reserve(tree.size());
      for (size_t i = 0; i < tree.size(); ++i) list.push_back(ordered_like(tree.child(i), reference.child(i)));
      return list;
    }
    return tree;
  }
  Tree out = Tree::map();
  out.reserve(tree.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    const Key& key = *reference.map_key(i);
    if (const Tree* child = tree.find(key)) out.set(key, ordered_like(*child, reference.child(i)));
  }
  for (size_t i = 0; i < tree.size(); ++i) {
    const Key& key = *tree.map_key(i);
    if (out.find(key) == nullptr) out.set(key, tree.child(i));
  }
  return out;
}

class Merger {
 public:
  explicit Merger(const ModuleFileOptions& options) : options_(options) {}

  // Unites the children of `from` (the map named `name` of file `file`)
  // into the map `into`. `owner`: the file that `into` came from whole, if one did.
  void unite(Tree& into, const Tree& from, std::string& name, const std::string& file, const std::string* owner) {
    const size_t length = name.size();
    for (const TreeEntry& entry : from.entries()) {
      append_name(name, key_to_string(entry.key));
      if (Tree* existing = into.find(entry.key)) {
        const auto found = owners_.find(name);
        const std::string* existing_owner = found != owners_.end() ? &found->second : owner;
        // Two maps with children unite; anything else (a leaf, a list, an
        // empty container: placed whole) in two files is one too many.
        if (existing->is_map() && entry.value.is_map() && existing->size() > 0 && entry.value.size() > 0) {
          unite(*existing, entry.value, name, file, existing_owner);
        } else {
          in_two_files.push_back(name);
          details.push_back(name + ": in " + (existing_owner != nullptr ? *existing_owner : std::string("?")) +
                            " and " + file);
        }
      } else {
        into.set(entry.key, entry.value);
        owners_.emplace(name, file);
        check_placement(entry.value, name, file);
      }
      name.resize(length);
    }
  }

  // Every leaf of `node` (named `name`) found in `file`: is that its file?
  void check_placement(const Tree& node, std::string& name, const std::string& file) {
    if (node.is_container() && node.size() > 0) {
      const size_t length = name.size();
      for (const TreeEntry& entry : node.entries()) {
        append_name(name, key_to_string(entry.key));
        check_placement(entry.value, name, file);
        name.resize(length);
      }
      return;
    }
    const std::string expected = module_file_of(name, options_);
    if (expected == file) return;
    wrong_file.push_back(name);
    wrong_details.push_back(name + ": in " + file + ", " +
                            (expected.empty() ? std::string("init-only (in no file)") : "assigned to " + expected));
  }

  std::vector<std::string> in_two_files, wrong_file, details, wrong_details;

 private:
  const ModuleFileOptions& options_;
  std::unordered_map<std::string, std::string> owners_;
};

}  // namespace

std::string module_file_of(std::string_view name, const ModuleFileOptions& options) {
  for (const std::string& entry : options.init_only) {
    if (name_under(name, entry)) return "";
  }
  const std::string* file = &options.main_file;
  size_t depth = 0;
  for (const auto& [module, assigned] : options.files) {
    if (name_under(name, module) && module.size() >= depth) {
      depth = module.size();
      file = &assigned;
    }
  }
  return *file;
}

std::vector<ModuleFile> split_by_module(const Tree& state, const ModuleFileOptions& options) {
  validate_module_options(options);
  if (!state.is_map() && !state.is_none()) {
    throw Error(ErrorCode::kInvalidArgument,
                "split_by_module: the state must be a map, not a " + std::string(tree_kind_name(state.kind())));
  }
  const std::vector<std::string> files = file_order(options);
  Splitter splitter(options, files);
  std::string name;
  std::vector<std::optional<Tree>> parts =
      state.is_map() ? splitter.split(state, name).parts : std::vector<std::optional<Tree>>(files.size());
  splitter.require_all_matched();
  std::vector<ModuleFile> out;
  out.reserve(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    ModuleFile part{.file = files[i], .state = parts[i] ? std::move(*parts[i]) : Tree::map()};
    for (const auto& [module, file] : options.files) {
      if (file == files[i]) part.modules.push_back(module);
    }
    out.push_back(std::move(part));
  }
  return out;
}

bool ModuleFilesReport::ok() const noexcept {
  return in_two_files.empty() && wrong_file.empty() && missing_files.empty();
}

std::string ModuleFilesReport::summary() const {
  if (ok()) return "";
  const size_t count = in_two_files.size() + wrong_file.size() + missing_files.size();
  std::string text = "module files found " + std::to_string(count) + (count == 1 ? " problem" : " problems");
  const char* separator = ": ";
  size_t line = 0;
  const auto group = [&](const char* title, const std::vector<std::string>& names) {
    if (names.empty()) return;
    std::vector<std::string> lines(details.begin() + line, details.begin() + line + names.size());
    line += names.size();
    text += separator;
    text += std::string(title) + " (" + std::to_string(names.size()) + "): " + detail::comma_separated(lines);
    separator = "; ";
  };
  group("in two files", in_two_files);
  group("in the wrong file", wrong_file);
  group("missing files", missing_files);
  return text;
}

ModuleFilesReport merge_module_files(std::span<const ModuleFile> parts, const ModuleFileOptions& options,
                                     const MergeModuleFilesOptions& merge_options) {
  validate_module_options(options);
  std::set<std::string> seen;
  for (const ModuleFile& part : parts) {
    require_file_name(part.file, "file");
    if (!seen.insert(part.file).second) {
      throw Error(ErrorCode::kInvalidArgument, "file '" + part.file + "' is given twice", {.entry = part.file});
    }
    if (!part.state.is_map() && !part.state.is_none()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "the state of file '" + part.file + "' is a " + std::string(tree_kind_name(part.state.kind())) +
                      ", not a map",
                  {.entry = part.file});
    }
  }
  Merger merger(options);
  Tree state = Tree::map();
  for (const ModuleFile& part : parts) {
    if (!part.state.is_map()) continue;
    std::string name;
    merger.unite(state, part.state, name, part.file, nullptr);
  }
  ModuleFilesReport report;
  report.state = merge_options.order_like != nullptr ? ordered_like(state, *merge_options.order_like)
                                                     : std::move(state);
  report.in_two_files = std::move(merger.in_two_files);
  report.wrong_file = std::move(merger.wrong_file);
  report.details = std::move(merger.details);
  report.details.insert(report.details.end(), merger.wrong_details.begin(), merger.wrong_details.end());
  for (const std::string& file : file_order(options)) {
    if (seen.contains(file)) continue;
    report.missing_files.push_back(file);
    report.details.push_back(file + ": no such file");
  }
  return report;
}

}  // namespace ckpt
