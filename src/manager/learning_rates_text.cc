// Writing RETURNN's learning_rates file (learning_rates.h) as RETURNN's
// save() writes it: better_repr (returnn/util/basic.py) of the epochs'
// EpochData, whose __repr__ joins the ":meta:" entries into the error dict.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/error.h"
#include "core/text.h"
#include "io/atomic_file.h"
#include "manager/learning_rates.h"

namespace ckpt::detail {
namespace {

// Python's len(): code points.
size_t python_length(std::string_view text) {
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// Python's repr() of a str (valid UTF-8): single quotes unless the text
// holds ' and no ", \\ \n \r \t, \xHH for the other controls (U+0000..U+001F,
// U+007F..U+009F); every other character as it is.
std::string python_string_repr(std::string_view text) {
  const bool single = text.find('\'') != std::string_view::npos;
  const char quote = single && text.find('"') == std::string_view::npos ? '"' : '\'';
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(1, quote);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    uint32_t control = 0x100;
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0xA0) {
      control = static_cast<unsigned char>(text[++i]);
    } else if (c < 0x20 || c == 0x7F) {
      control = c;
    }
    if (control == 0x100) {
      if (c == '\\' || c == static_cast<unsigned char>(quote)) out += '\\';
      out += text[i];
    } else if (control == '\n') {
      out += "\\n";
    } else if (control == '\r') {
      out += "\\r";
    } else if (control == '\t') {
      out += "\\t";
    } else {
      out += "\\x";
      out += kDigits[control >> 4];
      out += kDigits[control & 15];
    }
  }
  out += quote;
  return out;
}

// better_repr of a float: float('nan'), float('inf'), float('-inf'), else repr.
std::string float_literal(double value) {
  if (std::isnan(value)) return "float('nan')";
  if (std::isinf(value)) return value > 0 ? "float('inf')" : "float('-inf')";
  return python_float_repr(value);
}

// better_repr of a dict whose items ("KEY: VALUE") are rendered and in
// order: on several lines, each with a trailing comma, once the items are 40
// characters or more together; else on one.
std::string dict_repr(const std::vector<std::string>& items) {
  size_t length = 0;
  for (const std::string& item : items) length += python_length(item);
  std::string out;
  if (length >= 40) {
    out = "{\n";
    for (const std::string& item : items) out += item + ",\n";
  } else {
    out = "{";
    for (size_t i = 0; i < items.size(); ++i) out += (i > 0 ? ", " : "") + items[i];
  }
  return out + "}";
}

std::string epoch_repr(int64_t epoch, const EpochRecord& record) {
  const std::string where = "learning_rates, epoch " + std::to_string(epoch);
  if (!record.learning_rate) {
    throw Error(ErrorCode::kInvalidArgument, where + ": RETURNN's EpochData needs a learning rate (a float)");
  }
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& [key, value] : record.scores) {
    if (!valid_utf8(key) || key.starts_with(kMetaKeyPrefix)) {
      throw Error(ErrorCode::kInvalidArgument,
                  where + ": score name " + detail::quoted(key) + " is not valid UTF-8 or starts with ':meta:'");
    }
    items.emplace_back(key, python_string_repr(key) + ": " + float_literal(value));
  }
  for (const auto& [name, literal] : record.meta) {
    const std::string key = std::string(kMetaKeyPrefix) + name;
    // The literal must be one value the parser reads back (and nothing more).
    bool valid = valid_utf8(key);
    if (valid) {
      try {
        const LearningRates probe = parse_learning_rates("{1: EpochData(learningRate=1.0, error={'" +
                                                         std::string(kMetaKeyPrefix) + "': " + literal + "})}");
        valid = probe.size() == 1 && probe.begin()->second.meta.size() == 1 &&
                probe.begin()->second.meta.begin()->second == literal;
      } catch (const Error&) {
        valid = false;
      }
    }
    if (!valid) {
      throw Error(ErrorCode::kInvalidArgument,
                  where + ": meta entry " + detail::quoted(name) + " is not valid UTF-8 or not one Python literal");
    }
    items.emplace_back(key, python_string_repr(key) + ": " + literal);
  }
  // better_repr sorts a dict's items by key.
  std::sort(items.begin(), items.end());
  std::vector<std::string> rendered;
  for (auto& item : items) rendered.push_back(std::move(item.second));
  return "EpochData(learningRate=" + float_literal(*record.learning_rate) + ", error=" + dict_repr(rendered) +
         ")";
}

}  // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest digits that read back, in scientific form: "-d.ddde±X".
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  const std::string_view text(buffer, static_cast<size_t>(result.ptr - buffer));
  const size_t e = text.find('e');
  std::string_view mantissa = text.substr(0, e);
  const int exponent = std::stoi(std::string(text.substr(e + 1)));
  std::string sign;
  if (mantissa.front() == '-') {
    sign = "-";
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  // Python's repr: fixed notation for decimal exponents -4..15.
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign;
    out += digits.front();
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char tail[16];
    std::snprintf(tail, sizeof tail, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + tail;
  }
  std::string out = sign;
  if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const size_t point = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= point) {
      out += digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out.append(digits, 0, point);
      out += '.';
      out.append(digits, point, std::string::npos);
    }
  }
  return out;
}

std::string learning_rates_text(const LearningRates& rates) {
  // Epochs are ints: in numeric order (std::map's), as Python sorts them.
  std::vector<std::string> items;
  items.reserve(rates.size());
  for (const auto& [epoch, record] : rates) {
    items.push_back(std::to_string(epoch) + ": " + epoch_repr(epoch, record));
  }
  return dict_repr(items) + "\n";
}

void write_learning_rates(const std::filesystem::path& file, const LearningRates& rates) {
  const std::string text = learning_rates_text(rates);
  AtomicFile out(file);
  out.write_at(std::as_bytes(std::span(text)), 0);
  out.commit();
}

}  // namespace ckpt::detail
