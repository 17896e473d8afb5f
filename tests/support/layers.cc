#include "support/layers.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

// A layer: its rank (a file may include ranks up to its own) and, for the
// top, which of the side-by-side parts it is ("" for the library's layers).
struct Layer {
  int rank = 0;
  std::string name;
  std::string part;  // "tools" or "python": neither includes the other's files
};

const Layer kCore{0, "core", ""};
const Layer kIo{1, "io", ""};
const Layer kFormats{2, "formats", ""};
const Layer kCheckpoint{3, "checkpoint", ""};
const Layer kUpper{4, "restore/manager/modules/distributed", ""};
const Layer kTools{5, "tools", "tools"};
const Layer kPython{5, "python", "python"};
const Layer kPublicTop{5, "the CLI's public header", ""};

// The folders of src/ and the layer each is in.
const std::map<std::string, Layer>& source_folders() {
  static const std::map<std::string, Layer> folders = {
      {"core", kCore},         {"io", kIo},         {"formats", kFormats}, {"checkpoint", kCheckpoint},
      {"restore", kUpper},     {"manager", kUpper}, {"modules", kUpper},   {"distributed", kUpper},
  };
  return folders;
}

// Each public header's layer: that of the code behind it.
const std::map<std::string, Layer>& public_headers() {
  static const std::map<std::string, Layer> headers = {
      {"box.h", kCore},             {"buffer.h", kCore},          {"cast.h", kCore},         {"checksum.h", kCore},
      {"dtype.h", kCore},           {"error.h", kCore},        {"tensor.h", kCore},
      {"tree.h", kCore},            {"url.h", kIo},            {"format.h", kFormats},    {"registry.h", kFormats},
      {"checkpoint.h", kCheckpoint}, {"convert.h", kCheckpoint}, {"diff.h", kCheckpoint},
      {"document.h", kCheckpoint},  {"memory.h", kCheckpoint}, {"transform.h", kCheckpoint},
      {"restore.h", kUpper},        {"ckpt.h", kUpper},        {"cli.h", kPublicTop},
      {"run_directory.h", kUpper},  {"manager.h", kUpper},     {"average.h", kUpper},
      {"retention.h", kUpper},      {"modules.h", kUpper},     {"preload.h", kUpper},
      {"formula.h", kUpper},        {"weight_norm.h", kUpper}, {"derived.h", kUpper},  // modules: weight norm's converters
      {"distributed.h", kUpper},    {"mpi.h", kUpper},
  };
  return headers;
}

std::string generic(const fs::path& path) { return path.lexically_normal().generic_string(); }

// The layer of `relative` (a path under the root), or nullopt outside the
// layered code. `known` is false for a public header missing from the table.
std::optional<Layer> layer_of(const std::string& relative, bool* known = nullptr) {
  if (known) *known = true;
  const fs::path path(relative);
  auto part = path.begin();
  if (part == path.end()) return std::nullopt;
  const std::string top = part->string();
  ++part;
  if (top == "tools") return kTools;
  if (top == "python") return kPython;
  if (top == "src" && part != path.end()) {
    const auto found = source_folders().find(part->string());
    if (found != source_folders().end()) return found->second;
    return std::nullopt;
  }
  if (top == "include" && part != path.end() && part->string() == "ckpt") {
    const auto found = public_headers().find(path.filename().string());
    if (found != public_headers().end()) return found->second;
    if (known) *known = false;
    return std::nullopt;
  }
  return std::nullopt;
}

// Where `include` (as written in `file`) points, relative to the root:
// beside the file, else in the include directories the build gives (src,
// include, tools). A generated header (tensor_bundle.pb.h) that is not on
// disk belongs to the src folder its path names.
std::string resolve(const fs::path& root, const std::string& file, const std::string& include) {
  const fs::path beside = fs::path(file).parent_path() / include;
  if (fs::exists(root / beside)) return generic(beside);
  for (const char* directory : {"src", "include", "tools"}) {
    const fs::path candidate = fs::path(directory) / include;
    if (fs::exists(root / candidate)) return generic(candidate);
  }
  const std::string first = fs::path(include).begin()->string();
  if (source_folders().count(first) != 0) return generic(fs::path("src") / include);
  if (first == "ckpt") return generic(fs::path("include") / include);
  return generic(beside);
}

bool is_source(const fs::path& path) {
  const std::string extension = path.extension().string();
  return extension == ".h" || extension == ".cc" || extension == ".hpp" || extension == ".cpp";
}

void check_file(const fs::path& root, const std::string& file, std::vector<LayerViolation>& out) {
  bool known = true;
  const std::optional<Layer> layer = layer_of(file, &known);
  if (!known) {
    out.push_back({file, 0, "", "public header with no layer: add it to the table in tests/support/layers.cc"});
    return;
  }
  if (!layer) return;
  const bool public_header = file.rfind("include/", 0) == 0;
  static const std::regex kInclude(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::ifstream in(root / file);
  std::string text;
  int line = 0;
  while (std::getline(in, text)) {
    ++line;
    std::smatch match;
    if (!std::regex_search(text, match, kInclude)) continue;
    const std::string include = match[1];
    const std::string target = resolve(root, file, include);
    if (public_header && target.rfind("include/", 0) != 0) {
      out.push_back({file, line, include, "a public header includes a private one (" + target + ")"});
      continue;
    }
    bool target_known = true;
    const std::optional<Layer> to = layer_of(target, &target_known);
    if (!to) {
      if (!target_known) out.push_back({file, line, include, "includes a public header with no layer (" + target + ")"});
      continue;
    }
    if (!layer->part.empty() && target.rfind("include/", 0) != 0 && to->part != layer->part) {
      out.push_back({file, line, include,
                     layer->name + " includes a private file of " + to->name + " (" + target + "); use include/ckpt/"});
      continue;
    }
    if (to->rank > layer->rank) {
      out.push_back({file, line, include, layer->name + " includes " + to->name + " (" + target + ")"});
    }
  }
}

}  // namespace

std::vector<LayerViolation> layering_violations(const fs::path& root) {
  std::vector<LayerViolation> out;
  std::vector<std::string> files;
  for (const char* directory : {"src", "include", "tools", "python/src"}) {
    if (!fs::is_directory(root / directory)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / directory)) {
      if (entry.is_regular_file() && is_source(entry.path())) {
        files.push_back(generic(fs::relative(entry.path(), root)));
      }
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) check_file(root, file, out);
  return out;
}

std::string describe(const std::vector<LayerViolation>& violations) {
  std::string text;
  for (const LayerViolation& violation : violations) {
    text += violation.file + ":" + std::to_string(violation.line) + ": #include \"" + violation.include + "\": " +
            violation.why + "\n";
  }
  return text;
}

}  // namespace ckpt::testing
