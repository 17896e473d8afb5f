#include "manager/run_config.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <system_error>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace ckpt::detail {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

[[noreturn]] void corrupt(const std::filesystem::path& path, const std::string& message) {
  throw Error(ErrorCode::kCorrupt, message, {.path = path});
}

void write_steps(JsonWriter& json, const std::vector<int64_t>& steps) {
  json.begin_array();
  for (int64_t step : steps) json.integer(step);
  json.end_array();
}

std::vector<int64_t> read_steps(element value, const std::filesystem::path& path, std::string_view what) {
  simdjson::dom::array array;
  if (value.get_array().get(array)) corrupt(path, std::string(what) + " is not an array of steps");
  std::vector<int64_t> steps;
  for (element item : array) {
    int64_t step = 0;
    if (item.get_int64().get(step)) corrupt(path, std::string(what) + " holds something other than an integer");
    steps.push_back(step);
  }
  return steps;
}

int64_t read_int(const object& policy, std::string_view key, const std::filesystem::path& path) {
  int64_t value = 0;
  if (policy[key].get_int64().get(value)) corrupt(path, "a policy lacks the integer \"" + std::string(key) + "\"");
  return value;
}

RetentionPolicy read_policy(element item, const std::filesystem::path& path) {
  object policy;
  if (item.get_object().get(policy)) corrupt(path, "a policy is not an object");
  std::string_view kind;
  if (policy["kind"].get_string().get(kind)) corrupt(path, "a policy lacks its kind");
  RetentionPolicy result;
  if (kind == "keep_last") {
    result = KeepLast{.n = read_int(policy, "n", path)};
  } else if (kind == "keep_best") {
    std::string_view metric;
    std::string_view mode;
    bool keep_missing = true;
    if (policy["metric"].get_string().get(metric) || policy["mode"].get_string().get(mode) ||
        (mode != "min" && mode != "max") || policy["keep_missing_metric"].get_bool().get(keep_missing)) {
      corrupt(path, "a keep_best policy lacks its metric, its mode (min or max) or keep_missing_metric");
    }
    result = KeepBest{.n = read_int(policy, "n", path),
                      .metric = std::string(metric),
                      .mode = metric_mode_from_name(mode),
                      .keep_missing_metric = keep_missing};
  } else if (kind == "keep_every_steps") {
    result = KeepEverySteps{.steps = read_int(policy, "steps", path)};
  } else if (kind == "keep_every_seconds") {
    double seconds = 0;
    if (policy["seconds"].get_double().get(seconds)) {
      int64_t whole = 0;
      if (policy["seconds"].get_int64().get(whole)) corrupt(path, "a keep_every_seconds policy lacks its seconds");
      seconds = static_cast<double>(whole);
    }
    result = KeepEverySeconds{.seconds = seconds};
  } else if (kind == "keep_steps") {
    element steps;
    if (policy["steps"].get(steps)) corrupt(path, "a keep_steps policy lacks its steps");
    result = KeepSteps{.steps = read_steps(steps, path, "keep_steps")};
  } else if (kind == "returnn") {
    ReturnnPolicy returnn{.keep_last_n = read_int(policy, "keep_last_n", path),
                          .keep_best_n = read_int(policy, "keep_best_n", path)};
    element keep;
    if (!policy["keep"].get(keep) && !keep.is_null()) returnn.keep = read_steps(keep, path, "returnn keep");
    if (policy["dry_run"].get_bool().get(returnn.dry_run)) corrupt(path, "a returnn policy lacks dry_run");
    result = returnn;
  } else if (kind == "custom") {
    element kept;
    if (policy["last_kept"].get(kept)) corrupt(path, "a custom policy lacks last_kept");
    result = CustomPolicy{.keep = {}, .last_kept = read_steps(kept, path, "custom last_kept")};
  } else {
    corrupt(path, "unknown policy kind '" + std::string(kind) + "'");
  }
  try {
    validate_policy(result);
  } catch (const Error& error) {
    corrupt(path, "invalid policy: " + error.message());
  }
  return result;
}

}  // namespace

std::string run_config_json(const RunConfig& config) {
  JsonWriter json;
  json.begin_object();
  json.key("ckpt_version");
  json.integer(kRunConfigVersion);
  json.key("format");
  json.string(config.format);
  json.key("keep_forever");
  write_steps(json, config.keep_forever);
  json.key("policies");
  json.begin_array();
  for (const RetentionPolicy& policy : config.policies) {
    json.begin_object();
    json.key("kind");
    if (const auto* p = std::get_if<KeepLast>(&policy)) {
      json.string("keep_last");
      json.key("n");
      json.integer(p->n);
    } else if (const auto* p = std::get_if<KeepBest>(&policy)) {
      json.string("keep_best");
      json.key("n");
      json.integer(p->n);
      json.key("metric");
      json.string(p->metric);
      json.key("mode");
      json.string(metric_mode_name(p->mode));
      json.key("keep_missing_metric");
      json.boolean(p->keep_missing_metric);
    } else if (const auto* p = std::get_if<KeepEverySteps>(&policy)) {
      json.string("keep_every_steps");
      json.key("steps");
      json.integer(p->steps);
    } else if (const auto* p = std::get_if<KeepEverySeconds>(&policy)) {
      json.string("keep_every_seconds");
      json.key("seconds");
      json.real(p->seconds);
    } else if (const auto* p = std::get_if<KeepSteps>(&policy)) {
      json.string("keep_steps");
      json.key("steps");
      write_steps(json, p->steps);
    } else if (const auto* p = std::get_if<ReturnnPolicy>(&policy)) {
      json.string("returnn");
      json.key("keep_last_n");
      json.integer(p->keep_last_n);
      json.key("keep_best_n");
      json.integer(p->keep_best_n);
      json.key("keep");
      if (p->keep) {
        write_steps(json, *p->keep);
      } else {
        json.null();
      }
      json.key("dry_run");
      json.boolean(p->dry_run);
    } else if (const auto* p = std::get_if<CustomPolicy>(&policy)) {
      json.string("custom");
      json.key("last_kept");
      write_steps(json, p->last_kept);
    }
    json.end_object();
  }
  json.end_array();
  if (config.layout != "ckpt") {  // the ckpt layout's config stays as it was
    json.key("layout");
    json.string(config.layout);
    json.key("committed_epochs");
    json.begin_array();
    for (const auto& [epoch, step] : config.committed_epochs) {
      json.begin_array();
      json.integer(epoch);
      json.integer(step);
      json.end_array();
    }
    json.end_array();
  }
  json.end_object();
  std::string text = json.take();
  text += '\n';
  return text;
}

RunConfig parse_run_config(std::string_view json, const std::filesystem::path& path) {
  if (json.size() > kMaxRunConfigBytes) corrupt(path, "ckpt_manager.json is larger than 16 MiB");
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(json.data(), json.size());
  element root;
  if (parser.parse(padded).get(root)) corrupt(path, "ckpt_manager.json is not valid JSON");
  object top;
  if (root.get_object().get(top)) corrupt(path, "ckpt_manager.json is not a JSON object");
  int64_t version = 0;
  if (top["ckpt_version"].get_int64().get(version) || version < 1 || version > kRunConfigVersion) {
    corrupt(path, "ckpt_manager.json lacks a ckpt_version this ckpt reads (1)");
  }
  RunConfig config;
  std::string_view format;
  if (top["format"].get_string().get(format)) corrupt(path, "ckpt_manager.json lacks its format");
  config.format = std::string(format);
  element keep_forever;
  if (top["keep_forever"].get(keep_forever)) corrupt(path, "ckpt_manager.json lacks keep_forever");
  config.keep_forever = read_steps(keep_forever, path, "keep_forever");
  simdjson::dom::array policies;
  if (top["policies"].get_array().get(policies)) corrupt(path, "ckpt_manager.json lacks a policies array");
  for (element item : policies) config.policies.push_back(read_policy(item, path));
  element layout;
  if (!top["layout"].get(layout)) {
    std::string_view name;
    if (layout.get_string().get(name) || (name != "ckpt" && name != "returnn")) {
      corrupt(path, "ckpt_manager.json's layout is not \"ckpt\" or \"returnn\"");
    }
    config.layout = std::string(name);
    simdjson::dom::array epochs;
    if (top["committed_epochs"].get_array().get(epochs)) corrupt(path, "ckpt_manager.json lacks committed_epochs");
    for (element pair : epochs) {
      const std::vector<int64_t> numbers = read_steps(pair, path, "a committed_epochs item");
      if (numbers.size() != 2 || !config.committed_epochs.emplace(numbers[0], numbers[1]).second) {
        corrupt(path, "committed_epochs holds something other than distinct [epoch, step] pairs");
      }
    }
  }
  return config;
}

std::optional<RunConfig> read_run_config(const std::filesystem::path& run_dir) {
  const std::filesystem::path path = run_dir / kRunConfigName;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  const std::shared_ptr<const MappedFile> file = MappedFile::open(path);
  const auto bytes = file->bytes();
  return parse_run_config(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

void write_run_config(const std::filesystem::path& run_dir, const RunConfig& config) {
  const std::string text = run_config_json(config);
  AtomicFile file(run_dir / kRunConfigName, {.fsync = true});
  file.write_at(std::as_bytes(std::span(text.data(), text.size())), 0);
  file.commit();
}

std::vector<RetentionPolicy> with_kept_forever(std::vector<RetentionPolicy> policies,
                                               const std::vector<int64_t>& keep_forever) {
  if (!keep_forever.empty()) policies.emplace_back(std::in_place_type<KeepSteps>, KeepSteps{.steps = keep_forever});
  return policies;
}

std::vector<RetentionPolicy> effective_policies(const RunConfig& config) {
  return with_kept_forever(config.policies, config.keep_forever);
}

void fill_kept_by(std::vector<CheckpointEntry>& entries, const std::vector<RetentionPolicy>& policies) {
  for (CheckpointEntry& entry : entries) entry.kept_by.clear();
  if (policies.empty() || entries.empty()) return;
  std::vector<std::vector<std::string>> kept = retention_kept_by(entries, policies);
  for (size_t i = 0; i < entries.size(); ++i) entries[i].kept_by = std::move(kept[i]);
  entries.back().kept_by.push_back("newest");
}

}  // namespace ckpt::detail
