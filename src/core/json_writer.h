#pragma once
// JsonWriter: compact JSON text, written exactly as serde_json writes it
// (the safetensors reference writer): no spaces, strings escaped only where
// JSON requires ('"', '\\', control characters as \b \f \n \r \t or \u00xx),
// non-ASCII UTF-8 written as is.

#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt::detail {

class JsonWriter {
 public:
  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  void key(std::string_view key);
  void string(std::string_view value);
  void integer(int64_t value);
  void unsigned_integer(uint64_t value);
  // Shortest text that reads back to the same double; NaN and infinities
  // (which JSON lacks) are written as the strings "nan", "inf", "-inf".
  void real(double value);
  void boolean(bool value);
  void null();
  // Inserts already-valid JSON text as one value.
  void raw(std::string_view json);

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }
  // Hands over the text written so far and goes on with an empty buffer
  // (to write a long document out in pieces).
  std::string drain() {
    std::string text;
    text.swap(out_);
    return text;
  }

 private:
  void before_value();
  std::string out_;
  // One bit per open container: does it already have an element?
  std::string first_;  // stack of '1' (no element yet) / '0'
  bool after_key_ = false;
};

// Appends `value` to `out` as a JSON string literal, quotes included.
void append_json_string(std::string& out, std::string_view value);

}  // namespace ckpt::detail
