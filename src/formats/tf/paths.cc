#include "formats/tf/paths.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>

#include "ckpt/error.h"
#include "core/text.h"
#include "formats/tf/index_table.h"
#include "formats/tf/layout.h"
#include "formats/tf/tensor_bundle.pb.h"
#include "io/atomic_file.h"
#include "io/file_system.h"

namespace ckpt::tf_detail {

using tf::CheckpointState;
namespace {

namespace fs = std::filesystem;

// True if `index` is a file (that ends with the table magic, if required).
bool looks_like_index(const fs::path& index, const FindPrefixOptions& options) {
  if (!detail::regular_file_exists(index)) return false;
  if (!options.require_magic) return true;
  std::ifstream in(index, std::ios::binary);
  if (!in.seekg(-static_cast<std::streamoff>(kTableFooterSize), std::ios::end)) return false;
  std::byte footer[kTableFooterSize];
  if (!in.read(reinterpret_cast<char*>(footer), kTableFooterSize)) return false;
  return has_table_magic(footer);
}

// Keeps the text parser's first complaint for ckpt's own error instead of
// letting protobuf log it on stderr.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (text_.empty()) text_ = "line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1) + ": " + message;
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// What read_state does with a state file it cannot read or parse.
enum class OnFailure { kNullopt, kThrow };

std::optional<CheckpointState> read_state(const fs::path& file, OnFailure on_failure) {
  const bool throwing = on_failure == OnFailure::kThrow;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (throwing) throw Error(ErrorCode::kIo, "cannot read the checkpoint state file", {.path = file});
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  CheckpointState state;
  google::protobuf::TextFormat::Parser parser;
  FirstError error;
  parser.RecordErrorsTo(&error);
  parser.AllowUnknownField(true);
  if (!parser.ParseFromString(text.str(), &state)) {
    if (throwing) {
      throw Error(ErrorCode::kCorrupt,
                  "checkpoint state file is not a CheckpointState in text format (" +
                      detail::quoted(error.text(), {.max_bytes = 300}) + ")",
                  {.path = file});
    }
    return std::nullopt;
  }
  return state;
}

// "DDDDD-of-DDDDD" (at least five digits each): the shard count M.
std::optional<long long> shard_count_of_suffix(std::string_view suffix) {
  const size_t separator = suffix.find("-of-");
  if (separator == std::string_view::npos) return std::nullopt;
  const auto digits = [](std::string_view text) {
    return text.size() >= 5 && text.size() <= 12 &&
           text.find_first_not_of("0123456789") == std::string_view::npos;
  };
  const std::string_view index = suffix.substr(0, separator);
  const std::string_view count = suffix.substr(separator + 4);
  if (!digits(index) || !digits(count)) return std::nullopt;
  return std::stoll(std::string(count));
}

fs::path latest_in(const fs::path& directory, const CheckpointState& state) {
  const fs::path latest(state.model_checkpoint_path());
  return latest.is_absolute() ? latest : directory / latest;
}

}  // namespace

std::optional<fs::path> find_prefix(const fs::path& path, const FindPrefixOptions& options) noexcept {
  try {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      const fs::path state_file = path / kStateFileName;
      if (detail::regular_file_exists(state_file)) {
        const auto state = read_state(state_file, OnFailure::kNullopt);
        if (!state || state->model_checkpoint_path().empty()) return std::nullopt;
        const fs::path prefix = latest_in(path, *state);
        if (!looks_like_index(index_path(prefix), options)) return std::nullopt;
        return prefix;
      }
      // A SavedModel directory: its variables are the bundle variables/variables.
      const fs::path saved_model_variables = path / kSavedModelVariables;
      if (looks_like_index(index_path(saved_model_variables), options)) return saved_model_variables;
    }
    const std::string text = path.string();
    if (text.size() > 6 && text.ends_with(".index") && looks_like_index(path, options)) {
      return fs::path(text.substr(0, text.size() - 6));
    }
    if (looks_like_index(index_path(path), options)) return path;
  } catch (...) {
  }
  return std::nullopt;
}

fs::path resolve_prefix(const fs::path& path) {
  if (auto prefix = find_prefix(path, {.require_magic = false})) return *prefix;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    const fs::path state_file = path / kStateFileName;
    if (!detail::regular_file_exists(state_file)) {
      throw Error(ErrorCode::kNotFound, "directory holds no 'checkpoint' state file", {.path = path});
    }
    const CheckpointState state = *read_state(state_file, OnFailure::kThrow);
    throw Error(ErrorCode::kNotFound,
                "the latest checkpoint named by the state file has no .index file",
                {.path = state_file, .entry = state.model_checkpoint_path()});
  }
  throw Error(ErrorCode::kNotFound, "no such tensor bundle (neither the prefix's .index nor the file exists)",
              {.path = path});
}

StateFileContents read_state_file(const fs::path& file) {
  // A state file names a few paths; a larger one is not TensorFlow's.
  constexpr uintmax_t kMaxStateFileBytes = 16u << 20;
  std::error_code error;
  const uintmax_t size = fs::file_size(file, error);
  if (!error && size > kMaxStateFileBytes) {
    throw Error(ErrorCode::kCorrupt,
                "checkpoint state file of " + std::to_string(size) + " bytes is over ckpt's limit of 16 MiB",
                {.path = file});
  }
  const CheckpointState state = *read_state(file, OnFailure::kThrow);
  StateFileContents contents;
  contents.model_checkpoint_path = state.model_checkpoint_path();
  contents.all_model_checkpoint_paths.assign(state.all_model_checkpoint_paths().begin(),
                                             state.all_model_checkpoint_paths().end());
  contents.all_model_checkpoint_timestamps.assign(state.all_model_checkpoint_timestamps().begin(),
                                                  state.all_model_checkpoint_timestamps().end());
  return contents;
}

fs::path prefix_for_write(const fs::path& path) {
  const std::string text = path.string();
  if (text.size() > 6 && text.ends_with(".index")) return text.substr(0, text.size() - 6);
  return path;
}

std::vector<fs::path> remove_stale_shards(const fs::path& prefix, int num_shards) noexcept {
  std::vector<fs::path> stale, removed;
  try {
    const fs::path directory = prefix.has_parent_path() ? prefix.parent_path() : fs::path(".");
    const std::string stem = prefix.filename().string() + ".data-";
    std::error_code error;
    for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (!name.starts_with(stem)) continue;
      const std::optional<long long> count = shard_count_of_suffix(std::string_view(name).substr(stem.size()));
      if (!count || *count == num_shards) continue;
      std::error_code status_error;
      if (it->is_regular_file(status_error)) stale.push_back(it->path());
    }
    for (const fs::path& path : stale) {  // not while the directory is being listed
      std::error_code remove_error;
      if (fs::remove(path, remove_error)) removed.push_back(path);
    }
  } catch (...) {
  }
  return removed;
}

void update_state_file(const fs::path& prefix, const StateFileOptions& options) {
  if (options.policy == StateFilePolicy::kLeave) return;
  const fs::path directory = prefix.has_parent_path() ? prefix.parent_path() : fs::path(".");
  const fs::path state_file = directory / kStateFileName;
  const bool present = detail::regular_file_exists(state_file);
  if (!present && options.policy == StateFilePolicy::kIfPresent) return;
  const CheckpointState state = present ? *read_state(state_file, OnFailure::kThrow) : CheckpointState();
  const std::string name = prefix.filename().string();
  const bool timestamped = state.all_model_checkpoint_timestamps_size() == state.all_model_checkpoint_paths_size() &&
                           state.all_model_checkpoint_paths_size() > 0;
  CheckpointState updated;
  for (int i = 0; i < state.all_model_checkpoint_paths_size(); ++i) {
    if (state.all_model_checkpoint_paths(i) == name) continue;
    updated.add_all_model_checkpoint_paths(state.all_model_checkpoint_paths(i));
    if (timestamped) updated.add_all_model_checkpoint_timestamps(state.all_model_checkpoint_timestamps(i));
  }
  updated.set_model_checkpoint_path(name);
  updated.add_all_model_checkpoint_paths(name);
  if (timestamped) {
    const auto now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch());
    updated.add_all_model_checkpoint_timestamps(now.count());
  }
  updated.set_last_preserved_timestamp(state.last_preserved_timestamp());
  std::string text;
  google::protobuf::TextFormat::PrintToString(updated, &text);
  detail::AtomicFile file(state_file, {.fsync = options.fsync});
  file.write_at(std::as_bytes(std::span(text)), 0);
  file.commit();
}

}  // namespace ckpt::tf_detail
