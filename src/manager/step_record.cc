#include "manager/step_record.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "core/text.h"
#include "io/mapped_file.h"

namespace ckpt::detail {
namespace {

using simdjson::dom::element;

[[noreturn]] void corrupt(const std::filesystem::path& path, const std::string& message, std::string_view entry = {}) {
  throw Error(ErrorCode::kCorrupt, message, {.path = path, .entry = std::string(entry)});
}

// A relative path below a directory: no empty, ".", ".." component, not
// absolute, no NUL, no backslash-free trickery beyond '/' separators.
bool valid_relative_path(std::string_view text) {
  if (text.empty() || text.front() == '/' || text.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('/', start), text.size());
    const std::string_view part = text.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

bool valid_hex16(std::string_view text) {
  return text.size() == 16 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::optional<double> number_value(element value) {
  double number = 0;
  if (!value.get_double().get(number)) return number;
  int64_t integer = 0;
  if (!value.get_int64().get(integer)) return static_cast<double>(integer);
  uint64_t unsigned_integer = 0;
  if (!value.get_uint64().get(unsigned_integer)) return static_cast<double>(unsigned_integer);
  return std::nullopt;
}

// A metric: a JSON number, or the strings JsonWriter::real writes for NaN
// and infinities.
std::optional<double> metric_value(element value) {
  if (std::optional<double> number = number_value(value)) return number;
  std::string_view text;
  if (value.get_string().get(text)) return std::nullopt;
  if (text == "nan") return NAN;
  if (text == "inf") return INFINITY;
  if (text == "-inf") return -INFINITY;
  return std::nullopt;
}

std::string required_string(const simdjson::dom::object& object, std::string_view key,
                            const std::filesystem::path& path) {
  std::string_view text;
  if (object[key].get_string().get(text)) corrupt(path, "checkpoint.json lacks a string \"" + std::string(key) + "\"");
  return std::string(text);
}

}  // namespace

std::string step_record_json(const StepRecord& record) {
  JsonWriter json;
  json.begin_object();
  json.key("ckpt_version");
  json.integer(kStepRecordVersion);
  // Which ckpt wrote it (informational: readers do not depend on it).
  json.key("written_by");
  json.string("ckpt " CKPT_LIBRARY_VERSION);
  json.key("step");
  json.integer(record.step);
  if (record.epoch) {
    json.key("epoch");
    json.integer(*record.epoch);
  }
  json.key("time");
  json.real(record.time);
  json.key("metrics");
  json.begin_object();
  for (const auto& [name, value] : record.metrics) {
    json.key(name);
    json.real(value);
  }
  json.end_object();
  json.key("format");
  json.string(record.format);
  json.key("state");
  json.string(record.state);
  json.key("state_digest");
  json.string(record.state_digest);
  if (!record.parts.empty()) {
    json.key("parts");
    json.begin_array();
    for (const RecordedPart& part : record.parts) {
      json.begin_object();
      json.key("state");
      json.string(part.state);
      json.key("state_digest");
      json.string(part.digest);
      json.end_object();
    }
    json.end_array();
  }
  json.key("files");
  json.begin_array();
  for (const RecordedFile& file : record.files) {
    json.begin_object();
    json.key("path");
    json.string(file.path);
    json.key("size");
    json.unsigned_integer(file.size);
    json.key("xxh3");
    json.string(file.xxh3);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  std::string text = json.take();
  text += '\n';
  return text;
}

StepRecord parse_step_record(std::string_view json, const std::filesystem::path& path) {
  if (json.size() > kMaxStepRecordBytes) corrupt(path, "checkpoint.json is larger than 64 MiB");
  simdjson::dom::parser parser;
  element root;
  const simdjson::padded_string padded(json.data(), json.size());
  if (parser.parse(padded).get(root)) corrupt(path, "checkpoint.json is not valid JSON");
  simdjson::dom::object object;
  if (root.get_object().get(object)) corrupt(path, "checkpoint.json is not a JSON object");
  StepRecord record;
  int64_t version = 0;
  if (object["ckpt_version"].get_int64().get(version)) corrupt(path, "checkpoint.json lacks an integer ckpt_version");
  if (version < 1 || version > kStepRecordVersion) {
    corrupt(path, "checkpoint.json has ckpt_version " + std::to_string(version) + "; this ckpt reads up to " +
                      std::to_string(kStepRecordVersion));
  }
  if (object["step"].get_int64().get(record.step) || record.step < 0) {
    corrupt(path, "checkpoint.json lacks a non-negative integer step");
  }
  element epoch;
  if (!object["epoch"].get(epoch) && !epoch.is_null()) {
    int64_t value = 0;
    if (epoch.get_int64().get(value)) corrupt(path, "checkpoint.json has an epoch that is not an integer");
    record.epoch = value;
  }
  element time;
  std::optional<double> time_value;
  if (object["time"].get(time) || !(time_value = number_value(time)) || !std::isfinite(*time_value)) {
    corrupt(path, "checkpoint.json lacks a finite number time");
  }
  record.time = *time_value;
  simdjson::dom::object metrics;
  if (object["metrics"].get_object().get(metrics)) corrupt(path, "checkpoint.json lacks a metrics object");
  for (const auto field : metrics) {
    const std::optional<double> value = metric_value(field.value);
    if (!value) corrupt(path, "checkpoint.json has a metric that is not a number", field.key);
    if (!record.metrics.emplace(std::string(field.key), *value).second) {
      corrupt(path, "checkpoint.json names a metric twice", field.key);
    }
  }
  record.format = required_string(object, "format", path);
  const auto part_of = [&](const simdjson::dom::object& part_object) {
    RecordedPart part{.state = required_string(part_object, "state", path),
                      .digest = required_string(part_object, "state_digest", path)};
    if (!valid_relative_path(part.state) || part.state.find('/') != std::string::npos) {
      corrupt(path, "checkpoint.json's state is not a name inside the step directory", part.state);
    }
    if (!part.digest.empty() && !valid_hex16(part.digest)) {
      corrupt(path, "checkpoint.json's state_digest is not 16 hex digits", part.state);
    }
    return part;
  };
  RecordedPart main = part_of(object);
  record.state = std::move(main.state);
  record.state_digest = std::move(main.digest);
  element parts;
  if (!object["parts"].get(parts)) {
    simdjson::dom::array part_array;
    if (parts.get_array().get(part_array)) corrupt(path, "checkpoint.json's parts is not an array");
    std::set<std::string> names{record.state};
    for (element item : part_array) {
      simdjson::dom::object part_object;
      if (item.get_object().get(part_object)) corrupt(path, "checkpoint.json has a part that is not an object");
      RecordedPart part = part_of(part_object);
      if (!names.insert(part.state).second) corrupt(path, "checkpoint.json names a part twice", part.state);
      record.parts.push_back(std::move(part));
    }
  }
  simdjson::dom::array files;
  if (object["files"].get_array().get(files)) corrupt(path, "checkpoint.json lacks a files array");
  std::set<std::string> seen;
  for (element item : files) {
    simdjson::dom::object file_object;
    if (item.get_object().get(file_object)) corrupt(path, "checkpoint.json has a file entry that is not an object");
    RecordedFile file;
    std::string_view text;
    if (file_object["path"].get_string().get(text)) corrupt(path, "checkpoint.json has a file without a path");
    file.path = std::string(text);
    if (!valid_relative_path(file.path) || file.path == kStepRecordName) {
      corrupt(path, "checkpoint.json lists a file path outside the step directory", file.path);
    }
    if (file_object["size"].get_uint64().get(file.size)) {
      corrupt(path, "checkpoint.json has a file without a non-negative integer size", file.path);
    }
    if (file_object["xxh3"].get_string().get(text) || !valid_hex16(text)) {
      corrupt(path, "checkpoint.json has a file whose xxh3 is not 16 hex digits", file.path);
    }
    file.xxh3 = std::string(text);
    if (!seen.insert(file.path).second) corrupt(path, "checkpoint.json lists a file twice", file.path);
    record.files.push_back(std::move(file));
  }
  return record;
}

StepRecord read_step_record(const std::filesystem::path& step_dir) {
  const std::filesystem::path path = step_dir / kStepRecordName;
  const std::shared_ptr<const MappedFile> file = MappedFile::open(path);
  if (file->size() > kMaxStepRecordBytes) corrupt(path, "checkpoint.json is larger than 64 MiB");
  const auto bytes = file->bytes();
  StepRecord record =
      parse_step_record(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
  const std::optional<int64_t> named = parse_step_directory_name(step_dir.filename().string());
  if (named && *named != record.step) {
    corrupt(path, "checkpoint.json records step " + std::to_string(record.step) + " in the directory of step " +
                      std::to_string(*named));
  }
  return record;
}

std::string step_directory_name(int64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  return "step-" + digits;
}

std::optional<int64_t> parse_step_directory_name(std::string_view name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() < 8 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  if (digits.size() > 8 && digits.front() == '0') return std::nullopt;
  int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

}  // namespace ckpt::detail
