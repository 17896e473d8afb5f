#include "formats/tf/names.h"

#include <algorithm>
#include <map>
#include <set>

#include "formats/tf/layout.h"

namespace ckpt::tf_detail {
namespace {

TreePath split(std::string_view text) {
  TreePath parts;
  size_t start = 0;
  while (true) {
    const size_t slash = text.find('/', start);
    parts.emplace_back(text.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) return parts;
    start = slash + 1;
  }
}

std::string join(const TreePath& path, size_t count) {
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) text += '/';
    text += path[i];
  }
  return text;
}

// Object-based key "<path>/.ATTRIBUTES/<attr>": [path..., attr]; else [key].
TreePath object_path(const std::string& key) {
  TreePath parts = split(key);
  if (parts.size() >= 3 && parts[parts.size() - 2] == kAttributesComponent) {
    parts.erase(parts.end() - 2);
    return parts;
  }
  return {key};
}

// True if no path is a proper prefix of another and no two are equal: the
// paths can be the leaves of one tree.
bool form_a_tree(std::vector<TreePath> paths) {
  std::sort(paths.begin(), paths.end());
  for (size_t i = 1; i < paths.size(); ++i) {
    const TreePath& shorter = paths[i - 1];
    const TreePath& longer = paths[i];
    if (shorter.size() <= longer.size() && std::equal(shorter.begin(), shorter.end(), longer.begin())) return false;
  }
  return true;
}

}  // namespace

std::vector<TreePath> tree_paths_of(const std::vector<std::string>& keys) {
  const bool object_based = std::find(keys.begin(), keys.end(), kObjectGraphKey) != keys.end();
  std::vector<TreePath> paths;
  paths.reserve(keys.size());
  for (const std::string& key : keys) paths.push_back(object_based ? object_path(key) : split(key));
  if (form_a_tree(paths)) return paths;
  paths.clear();
  for (const std::string& key : keys) paths.push_back({key});
  return paths;
}

std::string key_of(const TreePath& path, bool object_based) {
  if (path.size() == 1) return path.front();
  if (!object_based) return join(path, path.size());
  return join(path, path.size() - 1) + "/" + std::string(kAttributesComponent) + "/" + path.back();
}

}  // namespace ckpt::tf_detail
