// Reading RETURNN's learning_rates file (learning_rates.h): a recursive-
// descent parser of the Python-literal subset docs/manager.md lists.

#include "manager/learning_rates.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include "ckpt/error.h"
#include "core/text.h"
#include "io/file_system.h"

namespace ckpt::detail {
namespace {

namespace fs = std::filesystem;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_identifier_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_identifier_char(char c) { return is_identifier_start(c) || is_digit(c); }

// The numpy scalar types that np.NAME(X) may name in the file (numpy 2
// prints a float64 score as np.float64(1.5)), and whether the value is
// rounded to float32 on the way.
struct NumpyScalar {
  std::string_view name;
  bool float32 = false;
};
constexpr NumpyScalar kNumpyScalars[] = {
    {"float64"}, {"float32", true}, {"float16"}, {"double"}, {"single", true}, {"half"},
    {"longdouble"}, {"float_"}, {"int64"}, {"int32"}, {"int16"}, {"int8"},
    {"uint64"}, {"uint32"}, {"uint16"}, {"uint8"}, {"int_"}, {"intc"},
};

// A recursive-descent reader of the literal subset; every failure is one
// kCorrupt naming the file, the line and the column.
class Parser {
 public:
  Parser(std::string_view text, const fs::path& file) : text_(text), file_(file) {}

  LearningRates parse() {
    skip_space();
    if (at_end()) fail("the file is empty (expected a dict literal of epochs)", position_);
    expect('{', "'{' (a dict of epochs)");
    LearningRates rates;
    while (true) {
      skip_space();
      if (consume('}')) break;
      const size_t key_at = position_;
      const int64_t epoch = epoch_key();
      skip_space();
      expect(':', "':' after the epoch");
      skip_space();
      EpochRecord record = epoch_data();
      if (!rates.emplace(epoch, std::move(record)).second) {
        fail("epoch " + std::to_string(epoch) + " appears twice", key_at);
      }
      skip_space();
      if (consume('}')) break;
      expect(',', "',' or '}' after an epoch's EpochData");
    }
    skip_space();
    if (!at_end()) fail("text after the dict of epochs", position_);
    return rates;
  }

 private:
  bool at_end() const { return position_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return position_ + ahead < text_.size() ? text_[position_ + ahead] : '\0';
  }

  [[noreturn]] void fail(const std::string& message, size_t at) const {
    at = std::min(at, text_.size());
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at; ++i) {
      if (text_[i] == '\n') ++line, line_start = i + 1;
    }
    throw Error(ErrorCode::kCorrupt,
                "learning_rates file, line " + std::to_string(line) + ", column " +
                    std::to_string(at - line_start + 1) + ": " + message,
                {.path = file_, .offset = at});
  }

  std::string found() const {
    if (at_end()) return "the end of the file";
    return detail::quoted(text_.substr(position_, std::min<size_t>(12, text_.size() - position_)));
  }

  // Whitespace, line breaks, backslash continuations and # comments.
  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        ++position_;
      } else if (c == '\\' && (peek(1) == '\n' || (peek(1) == '\r' && peek(2) == '\n'))) {
        position_ += peek(1) == '\n' ? 2 : 3;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++position_;
      } else {
        return;
      }
    }
  }

  bool consume(char c) {
    if (peek() != c || at_end()) return false;
    ++position_;
    return true;
  }

  void expect(char c, std::string_view what) {
    if (!consume(c)) fail("expected " + std::string(what) + ", found " + found(), position_);
  }

  std::string_view identifier() {
    const size_t start = position_;
    if (!is_identifier_start(peek())) return {};
    while (!at_end() && is_identifier_char(peek())) ++position_;
    return text_.substr(start, position_ - start);
  }

  // Digits with single underscores between them (Python 3.6's rule), as
  // plain digits.
  std::string digits() {
    std::string out;
    while (!at_end() && is_digit(peek())) {
      out += text_[position_++];
      if (peek() == '_' && is_digit(peek(1))) ++position_;
    }
    return out;
  }

  int64_t epoch_key() {
    const size_t start = position_;
    const std::string text = digits();
    if (text.empty() || peek() == '.' || peek() == 'e' || peek() == 'E' || is_identifier_char(peek())) {
      position_ = start;
      fail("expected an epoch number (an integer), found " + found(), start);
    }
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) fail("epoch number out of range", start);
    return value;
  }

  // A Python int or float literal without sign: 12, 1_000, 0.5, .5, 1., 1e-5.
  double unsigned_literal() {
    const size_t start = position_;
    std::string text = digits();
    if (peek() == '.') {
      ++position_;
      text += '.';
      text += digits();
    }
    if (text.empty() || text == ".") fail("expected a number, found " + found(), start);
    if ((peek() == 'e' || peek() == 'E') &&
        (is_digit(peek(1)) || ((peek(1) == '+' || peek(1) == '-') && is_digit(peek(2))))) {
      text += 'e';
      ++position_;
      if (peek() == '+' || peek() == '-') text += text_[position_++];
      text += digits();
    }
    if (is_identifier_char(peek()) || peek() == '.') fail("malformed number", start);
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (end != text.data() + text.size() || (error != std::errc() && error != std::errc::result_out_of_range)) {
      fail("malformed number", start);
    }
    if (error == std::errc::result_out_of_range) {
      // Python reads an overflowing float literal as inf, an underflowing one as 0.
      value = text.find_first_of("eE") != std::string::npos &&
                      text[text.find_first_of("eE") + 1] == '-'
                  ? 0.0
                  : std::numeric_limits<double>::infinity();
    }
    return value;
  }

  // float('nan'), float("-inf"), float('1.5') as Python's float() reads
  // a string: surrounding spaces, a sign, nan / inf / infinity in any case,
  // or a number.
  double float_of_string(const std::string& text, size_t at) {
    std::string_view value = text;
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
    bool negative = false;
    if (!value.empty() && (value.front() == '+' || value.front() == '-')) {
      negative = value.front() == '-';
      value.remove_prefix(1);
    }
    std::string lower(value);
    for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    double result;
    if (lower == "nan") {
      result = std::numeric_limits<double>::quiet_NaN();
    } else if (lower == "inf" || lower == "infinity") {
      result = std::numeric_limits<double>::infinity();
    } else {
      Parser inner(value, file_);
      try {
        result = inner.unsigned_literal();
      } catch (const Error&) {
        fail("float() of " + detail::quoted(text) + " is not a number", at);
      }
      if (!inner.at_end()) fail("float() of " + detail::quoted(text) + " is not a number", at);
    }
    return negative ? -result : result;
  }

  // A number: a literal, nan, inf, float(...), np.NAME(...), any of them
  // after signs.
  double number() {
    // float(float(...)) nests: bounded like every other nesting.
    struct Nesting {
      explicit Nesting(Parser& parser) : parser(parser) {
        if (++parser.number_depth_ > kMaxLiteralDepth) {
          parser.fail("number nested deeper than " + std::to_string(kMaxLiteralDepth) + " calls", parser.position_);
        }
      }
      ~Nesting() { --parser.number_depth_; }
      Parser& parser;
    } nesting(*this);
    bool negative = false;
    while (peek() == '+' || peek() == '-') {
      negative ^= peek() == '-';
      ++position_;
      skip_space();
    }
    const size_t start = position_;
    double value;
    if (is_digit(peek()) || (peek() == '.' && is_digit(peek(1)))) {
      value = unsigned_literal();
    } else {
      const std::string_view name = identifier();
      if (name == "nan") {
        value = std::numeric_limits<double>::quiet_NaN();
      } else if (name == "inf") {
        value = std::numeric_limits<double>::infinity();
      } else if (name == "float") {
        skip_space();
        expect('(', "'(' after float");
        skip_space();
        if (peek() == '\'' || peek() == '"') {
          const size_t string_at = position_;
          value = float_of_string(string_literal(), string_at);
        } else {
          value = number();
        }
        skip_space();
        expect(')', "')' closing float(");
      } else if (name == "np") {
        skip_space();
        expect('.', "'.' after np");
        skip_space();
        const size_t type_at = position_;
        const std::string_view type = identifier();
        const auto scalar = std::find_if(std::begin(kNumpyScalars), std::end(kNumpyScalars),
                                         [&](const NumpyScalar& known) { return known.name == type; });
        if (scalar == std::end(kNumpyScalars)) {
          fail("np." + std::string(type) + " is not a numpy scalar type the file may hold", type_at);
        }
        skip_space();
        expect('(', "'(' after np." + std::string(type));
        skip_space();
        value = number();
        if (scalar->float32) value = static_cast<float>(value);
        skip_space();
        expect(')', "')' closing np." + std::string(type) + "(");
      } else {
        position_ = start;
        fail("expected a number, found " + found(), start);
      }
    }
    return negative ? -value : value;
  }

  // A Python string literal in single or double quotes (no prefix, no
  // triple quotes), its escapes decoded; the result must be valid UTF-8.
  std::string string_literal() {
    const size_t start = position_;
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a string, found " + found(), start);
    ++position_;
    std::string out;
    while (true) {
      if (at_end() || peek() == '\n') fail("unterminated string", start);
      const char c = text_[position_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail("unterminated string", start);
      const size_t escape_at = position_ - 1;
      const char e = text_[position_++];
      const auto hex = [&](size_t count) {
        uint32_t code = 0;
        for (size_t k = 0; k < count; ++k) {
          const char h = peek();
          const int digit = is_digit(h)                ? h - '0'
                            : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                            : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                     : -1;
          if (digit < 0) fail("malformed \\" + std::string(1, e) + " escape in a string", escape_at);
          code = code << 4 | static_cast<uint32_t>(digit);
          ++position_;
        }
        return code;
      };
      uint32_t code = 0;
      switch (e) {
        case '\n': continue;
        case '\\': case '\'': case '"': out += e; continue;
        case 'n': out += '\n'; continue;
        case 'r': out += '\r'; continue;
        case 't': out += '\t'; continue;
        case 'a': out += '\a'; continue;
        case 'b': out += '\b'; continue;
        case 'f': out += '\f'; continue;
        case 'v': out += '\v'; continue;
        case 'x': code = hex(2); break;
        case 'u': code = hex(4); break;
        case 'U': code = hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            code = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && peek() >= '0' && peek() <= '7'; ++k) {
              code = code * 8 + static_cast<uint32_t>(text_[position_++] - '0');
            }
            break;
          }
          if (e == 'N') fail("\\N{...} escapes are not supported in a string", escape_at);
          // Python keeps an unknown escape as it is (with a warning).
          out += '\\';
          out += e;
          continue;
      }
      if ((code >= 0xD800 && code <= 0xDFFF) || !append_utf8(out, code)) {
        fail("string escape names no character (a surrogate or past U+10FFFF)", escape_at);
      }
    }
    if (!valid_utf8(out)) fail("string is not valid UTF-8", start);
    return out;
  }

  // Any literal the file may hold as a meta value (numbers, strings, None,
  // True, False, and lists, tuples, dicts and sets of them), skipped.
  void skip_literal(int depth) {
    if (depth > kMaxLiteralDepth) {
      fail("literal nested deeper than " + std::to_string(kMaxLiteralDepth) + " levels", position_);
    }
    const char c = peek();
    if (c == '\'' || c == '"') {
      string_literal();
      return;
    }
    if (c == '[' || c == '(' || c == '{') {
      const char close = c == '[' ? ']' : c == '(' ? ')' : '}';
      ++position_;
      while (true) {
        skip_space();
        if (consume(close)) return;
        skip_literal(depth + 1);
        skip_space();
        if (c == '{' && consume(':')) {
          skip_space();
          skip_literal(depth + 1);
          skip_space();
        }
        if (consume(close)) return;
        expect(',', std::string("',' or '") + close + "'");
      }
    }
    const size_t start = position_;
    const std::string_view name = identifier();
    if (name == "None" || name == "True" || name == "False") return;
    position_ = start;
    number();
  }

  // learningRate=: a number or None.
  std::optional<double> learning_rate() {
    const size_t start = position_;
    if (identifier() == "None") return std::nullopt;
    position_ = start;
    return number();
  }

  // error=: {str: number | (":meta:" keys) literal}, a plain number (the
  // old format) or None.
  void error_value(EpochRecord& record) {
    const size_t start = position_;
    if (identifier() == "None") return;
    position_ = start;
    if (!consume('{')) {
      record.scores.emplace("old_format_score", number());
      return;
    }
    while (true) {
      skip_space();
      if (consume('}')) return;
      const size_t key_at = position_;
      const std::string key = string_literal();
      skip_space();
      expect(':', "':' after a score's name");
      skip_space();
      bool fresh;
      if (key.starts_with(kMetaKeyPrefix)) {
        const size_t value_at = position_;
        skip_literal(1);
        const std::string literal(text_.substr(value_at, position_ - value_at));
        fresh = record.meta.emplace(key.substr(kMetaKeyPrefix.size()), literal).second;
      } else {
        fresh = record.scores.emplace(key, number()).second;
      }
      if (!fresh) fail("score " + detail::quoted(key) + " appears twice", key_at);
      skip_space();
      if (consume('}')) return;
      expect(',', "',' or '}' after a score");
    }
  }

  // meta=: {str: literal}.
  void meta_value(EpochRecord& record) {
    expect('{', "'{' (meta=, a dict)");
    while (true) {
      skip_space();
      if (consume('}')) return;
      const size_t key_at = position_;
      const std::string key = string_literal();
      skip_space();
      expect(':', "':' after a meta entry's name");
      skip_space();
      const size_t value_at = position_;
      skip_literal(1);
      if (!record.meta.emplace(key, std::string(text_.substr(value_at, position_ - value_at))).second) {
        fail("meta entry " + detail::quoted(key) + " appears twice", key_at);
      }
      skip_space();
      if (consume('}')) return;
      expect(',', "',' or '}' after a meta entry");
    }
  }

  EpochRecord epoch_data() {
    const size_t start = position_;
    if (identifier() != "EpochData") {
      position_ = start;
      fail("expected EpochData(...), found " + found(), start);
    }
    skip_space();
    expect('(', "'(' after EpochData");
    EpochRecord record;
    bool seen_rate = false, seen_error = false, seen_meta = false;
    while (true) {
      skip_space();
      if (consume(')')) break;
      const size_t name_at = position_;
      const std::string_view name = identifier();
      bool* seen = name == "learningRate" || name == "learning_rate" ? &seen_rate
                   : name == "error"                                 ? &seen_error
                   : name == "meta"                                  ? &seen_meta
                                                                     : nullptr;
      if (seen == nullptr) {
        position_ = name_at;
        fail("EpochData takes learningRate=, error= and meta=, found " + found(), name_at);
      }
      if (*seen) fail("EpochData's " + std::string(name) + " given twice", name_at);
      *seen = true;
      skip_space();
      expect('=', "'=' after " + std::string(name));
      skip_space();
      if (seen == &seen_rate) {
        record.learning_rate = learning_rate();
      } else if (seen == &seen_error) {
        error_value(record);
      } else {
        meta_value(record);
      }
      skip_space();
      if (consume(')')) break;
      expect(',', "',' or ')' in EpochData(...)");
    }
    return record;
  }

  std::string_view text_;
  const fs::path& file_;
  size_t position_ = 0;
  int number_depth_ = 0;
};

}  // namespace

namespace {

void check_size(uintmax_t size, const fs::path& file) {
  if (size > kMaxLearningRatesBytes) {
    throw Error(ErrorCode::kCorrupt,
                "learning_rates file of " + std::to_string(size) + " bytes is over ckpt's limit of " +
                    std::to_string(kMaxLearningRatesBytes) + " bytes",
                {.path = file});
  }
}

}  // namespace

LearningRates parse_learning_rates(std::string_view text, const fs::path& file) {
  check_size(text.size(), file);
  return Parser(text, file).parse();
}

LearningRates read_learning_rates(const fs::path& file) {
  std::error_code error;
  const uintmax_t size = fs::file_size(file, error);
  if (error) throw_io(file, "cannot read the learning_rates file", error.value());
  check_size(size, file);
  std::ifstream in(file, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  const auto length = static_cast<std::streamsize>(size);
  if (!in || !in.read(text.data(), length) || in.gcount() != length) {
    throw Error(ErrorCode::kIo, "cannot read the learning_rates file", {.path = file});
  }
  return parse_learning_rates(text, file);
}

}  // namespace ckpt::detail
