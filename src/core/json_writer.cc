#include "core/json_writer.h"

#include <charconv>
#include <cmath>

namespace ckpt::detail {

void append_json_string(std::string& out, std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  // Characters that need no escape are appended in runs.
  size_t run_start = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    const auto u = static_cast<unsigned char>(value[i]);
    // A UTF-16 surrogate encoded as UTF-8 (ED A0..BF xx, which Python strings
    // may hold and pickles carry) is not UTF-8: write it as a \uDxxx escape.
    if (u == 0xED && i + 2 < value.size() && (static_cast<unsigned char>(value[i + 1]) & 0xE0) == 0xA0) {
      out.append(value.data() + run_start, i - run_start);
      const unsigned code = 0xD000u | (static_cast<unsigned char>(value[i + 1]) & 0x3Fu) << 6 |
                            (static_cast<unsigned char>(value[i + 2]) & 0x3Fu);
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(code >> shift) & 15];
      i += 2;
      run_start = i + 1;
      continue;
    }
    if (u >= 0x20 && u != '"' && u != '\\') continue;
    out.append(value.data() + run_start, i - run_start);
    run_start = i + 1;
    switch (u) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out += kHex[u >> 4];
        out += kHex[u & 15];
    }
  }
  out.append(value.data() + run_start, value.size() - run_start);
  out += '"';
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (first_.back() == '0') out_ += ',';
    first_.back() = '0';
  }
}

void JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  first_ += '1';
}

void JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
}

void JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  first_ += '1';
}

void JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
}

void JsonWriter::key(std::string_view key) {
  before_value();
  append_json_string(out_, key);
  out_ += ':';
  after_key_ = true;
}

void JsonWriter::string(std::string_view value) {
  before_value();
  append_json_string(out_, value);
}

void JsonWriter::integer(int64_t value) {
  before_value();
  out_ += std::to_string(value);
}

void JsonWriter::unsigned_integer(uint64_t value) {
  before_value();
  out_ += std::to_string(value);
}

void JsonWriter::real(double value) {
  if (std::isnan(value)) return string("nan");
  if (std::isinf(value)) return string(value > 0 ? "inf" : "-inf");
  before_value();
  char text[32];
  auto result = std::to_chars(text, text + sizeof text, value);
  std::string_view written(text, result.ptr - text);
  out_ += written;
  // Keep it a float when read back: "1" would read as an integer.
  if (written.find_first_of(".eE") == std::string_view::npos) out_ += ".0";
}

void JsonWriter::boolean(bool value) {
  before_value();
  out_ += value ? "true" : "false";
}

void JsonWriter::null() {
  before_value();
  out_ += "null";
}

void JsonWriter::raw(std::string_view json) {
  before_value();
  out_ += json;
}

}  // namespace ckpt::detail
