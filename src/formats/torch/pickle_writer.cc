#include "formats/torch/pickle_writer.h"

#include <bit>
#include <cstring>

namespace ckpt::torch_detail {
namespace {

void append_le(std::string& out, uint64_t value, size_t count) {
  for (size_t i = 0; i < count; ++i, value >>= 8) out.push_back(static_cast<char>(value & 0xFF));
}

}  // namespace

PickleWriter::PickleWriter() {
  out_.reserve(4096);
  out_ += "\x80\x02";
}

void PickleWriter::none() { out_.push_back('N'); }
void PickleWriter::boolean(bool value) { out_.push_back(value ? '\x88' : '\x89'); }

void PickleWriter::integer(int64_t value) {
  if (value >= 0 && value < 256) {
    out_.push_back('K');
    append_le(out_, static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value < 65536) {
    out_.push_back('M');
    append_le(out_, static_cast<uint64_t>(value), 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    out_.push_back('J');
    append_le(out_, static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
  } else {
    // LONG1: the shortest little-endian two's complement (as Python encodes it).
    size_t count = 8;
    const uint64_t bits = static_cast<uint64_t>(value);
    while (count > 1) {
      const uint8_t top = static_cast<uint8_t>(bits >> (8 * (count - 1)));
      const uint8_t next_sign = static_cast<uint8_t>(bits >> (8 * (count - 2))) & 0x80;
      if ((top == 0x00 && next_sign == 0) || (top == 0xFF && next_sign != 0)) {
        --count;
      } else {
        break;
      }
    }
    out_.push_back('\x8a');
    out_.push_back(static_cast<char>(count));
    append_le(out_, bits, count);
  }
}

void PickleWriter::real(double value) {
  out_.push_back('G');
  const uint64_t bits = std::bit_cast<uint64_t>(value);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void PickleWriter::str(std::string_view utf8) {
  out_.push_back('X');
  append_le(out_, utf8.size(), 4);
  out_ += utf8;
}

void PickleWriter::bytes(std::string_view data) {
  global("_codecs", "encode");
  std::string latin1;  // each byte as the code point of the same value, in UTF-8
  latin1.reserve(data.size());
  for (char c : data) {
    const auto byte = static_cast<uint8_t>(c);
    if (byte < 0x80) {
      latin1.push_back(c);
    } else {
      latin1.push_back(static_cast<char>(0xC0 | (byte >> 6)));
      latin1.push_back(static_cast<char>(0x80 | (byte & 0x3F)));
    }
  }
  str(latin1);
  memo_str("latin1");
  tuple(2);
  reduce();
}

void PickleWriter::put_memo(std::string key) {
  const auto index = static_cast<uint32_t>(memo_.size());
  if (index < 256) {
    out_.push_back('q');
    append_le(out_, index, 1);
  } else {
    out_.push_back('r');
    append_le(out_, index, 4);
  }
  memo_.emplace(std::move(key), index);
}

bool PickleWriter::get_memo(const std::string& key) {
  const auto found = memo_.find(key);
  if (found == memo_.end()) return false;
  if (found->second < 256) {
    out_.push_back('h');
    append_le(out_, found->second, 1);
  } else {
    out_.push_back('j');
    append_le(out_, found->second, 4);
  }
  return true;
}

void PickleWriter::global(std::string_view module, std::string_view name) {
  std::string key = "g:";
  key += module;
  key += '\n';
  key += name;
  if (get_memo(key)) return;
  out_.push_back('c');
  out_ += module;
  out_.push_back('\n');
  out_ += name;
  out_.push_back('\n');
  put_memo(std::move(key));
}

void PickleWriter::memo_str(std::string_view text) {
  std::string key = "s:";
  key += text;
  if (get_memo(key)) return;
  str(text);
  put_memo(std::move(key));
}

void PickleWriter::mark() { out_.push_back('('); }
void PickleWriter::empty_tuple() { out_.push_back(')'); }
void PickleWriter::tuple(size_t count) {
  if (count == 0) {
    empty_tuple();
  } else if (count <= 3) {
    out_.push_back(static_cast<char>(0x85 + count - 1));
  } else {
    out_.push_back('t');
  }
}
void PickleWriter::empty_list() { out_.push_back(']'); }
void PickleWriter::appends() { out_.push_back('e'); }
void PickleWriter::empty_dict() { out_.push_back('}'); }
void PickleWriter::setitems() { out_.push_back('u'); }
void PickleWriter::reduce() { out_.push_back('R'); }
void PickleWriter::binpersid() { out_.push_back('Q'); }
void PickleWriter::newobj() { out_.push_back(static_cast<char>(0x81)); }
void PickleWriter::build() { out_.push_back('b'); }

std::string PickleWriter::finish() {
  out_.push_back('.');
  return std::move(out_);
}

}  // namespace ckpt::torch_detail
