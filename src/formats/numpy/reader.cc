// Reading .npy and .npz files: a strict hand parser for the .npy header
// (the Python dict literal numpy writes), the conversion of the data to a
// C-order little-endian Tensor, and .npz archives of such members, whose
// stored members are views of the mapping and deflated ones are inflated.

#include "formats/numpy/reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "ckpt/error.h"
#include "core/text.h"
#include "formats/numpy/layout.h"
#include "formats/numpy/npz_comment.h"
#include "formats/zip/layout.h"
#include "formats/zip/reader.h"
#include "io/mapped_file.h"

namespace ckpt::numpy_detail {
namespace {

static_assert(std::endian::native == std::endian::little, "ckpt assumes a little-endian host");

[[noreturn]] void fail(ErrorCode code, std::string message, const NpyLocation& where, uint64_t offset_in_npy) {
  ErrorContext context{.path = where.path, .entry = where.entry};
  if (where.file_offset) {
    context.offset = *where.file_offset + offset_in_npy;
  } else {
    message += " (at byte " + std::to_string(offset_in_npy) + " of the inflated entry)";
  }
  throw Error(code, std::move(message), std::move(context));
}

// Quotes header text for a message, cut to a readable length.
std::string quoted(std::string_view text) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  for (char c : text.substr(0, kMax)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F) {
      out.push_back(c);
    } else {
      out += "\\x" + detail::hex_digits(byte, 2);
    }
  }
  out += text.size() > kMax ? "'..." : "'";
  return out;
}

struct DescrInfo {
  DType dtype;
  bool big_endian;
};

// Maps a numpy type string ("<f4", "|b1", ">c16") to a dtype. `fail_at`
// reports at the descr's position.
template <class Fail>
DescrInfo parse_descr(std::string_view descr, const Fail& fail_at) {
  const std::string shown = quoted(descr);
  std::string_view rest = descr;
  char order = '=';
  if (!rest.empty() && (rest[0] == '<' || rest[0] == '>' || rest[0] == '|' || rest[0] == '=')) {
    order = rest[0];
    rest.remove_prefix(1);
  }
  if (rest.empty()) fail_at(ErrorCode::kCorrupt, "descr " + shown + " is not a numpy type string");
  const char kind = rest[0];
  const std::string_view digits = rest.substr(1);
  const bool numeric_size = !digits.empty() && digits.size() <= 4 &&
                            digits.find_first_not_of("0123456789") == std::string_view::npos;
  const int size = numeric_size ? std::stoi(std::string(digits)) : -1;

  struct Known {
    char kind;
    int size;
    DType dtype;
  };
  static constexpr Known kKnown[] = {
      {'b', 1, DType::kBool},      {'i', 1, DType::kInt8},     {'i', 2, DType::kInt16},
      {'i', 4, DType::kInt32},     {'i', 8, DType::kInt64},    {'u', 1, DType::kUInt8},
      {'u', 2, DType::kUInt16},    {'u', 4, DType::kUInt32},   {'u', 8, DType::kUInt64},
      {'f', 2, DType::kFloat16},   {'f', 4, DType::kFloat32},  {'f', 8, DType::kFloat64},
      {'c', 8, DType::kComplex64}, {'c', 16, DType::kComplex128},
  };
  for (const Known& known : kKnown) {
    if (known.kind == kind && known.size == size) {
      return {known.dtype, order == '>' && size > 1};
    }
  }
  // Valid numpy types that ckpt has no dtype for.
  if (kind == 'V' && numeric_size) {
    fail_at(ErrorCode::kUnsupported,
            "descr " + shown + " is a raw void type: ckpt cannot know what it holds (np.save writes ml_dtypes "
            "bfloat16 and float8 arrays this way, losing their type)");
  }
  if ((kind == 'f' && (size == 12 || size == 16)) || (kind == 'c' && (size == 24 || size == 32))) {
    fail_at(ErrorCode::kUnsupported, "descr " + shown + " is numpy's long double, which ckpt does not support");
  }
  if ((kind == 'S' || kind == 'U' || kind == 'a') && numeric_size) {
    fail_at(ErrorCode::kUnsupported, "descr " + shown + " is a string type, which ckpt does not support");
  }
  if (kind == 'O' && (digits.empty() || size == 4 || size == 8)) {
    fail_at(ErrorCode::kUnsupported, "descr " + shown + " holds Python objects (pickled), which ckpt does not read");
  }
  if ((kind == 'M' || kind == 'm') && digits.substr(0, 1) == "8") {
    fail_at(ErrorCode::kUnsupported, "descr " + shown + " is a datetime type, which ckpt does not support");
  }
  fail_at(ErrorCode::kCorrupt, "descr " + shown + " is not a numpy type string");
  throw Error(ErrorCode::kCorrupt, "unreachable");  // fail_at throws
}

// Parses the header text (the dict literal, its padding and final newline).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, uint64_t text_offset, bool python2_longs, const NpyLocation& where)
      : text_(text), text_offset_(text_offset), python2_longs_(python2_longs), where_(where) {}

  void parse(NpyHeader& header) {
    skip_space();
    if (peek() != '{') fail(ErrorCode::kCorrupt, "header is not a dict literal (it does not start with '{')");
    ++pos_;
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_space();
    while (peek() != '}') {
      const size_t key_at = pos_;
      if (peek() != '\'' && peek() != '"') fail(ErrorCode::kCorrupt, "expected a string key in the header dict");
      const std::string_view key = string_literal();
      skip_space();
      if (peek() != ':') fail(ErrorCode::kCorrupt, "expected ':' after key " + quoted(key));
      ++pos_;
      skip_space();
      bool* seen = key == "descr"           ? &have_descr
                   : key == "fortran_order" ? &have_fortran
                   : key == "shape"         ? &have_shape
                                            : nullptr;
      if (seen == nullptr) {
        pos_ = key_at;
        fail(ErrorCode::kCorrupt, "unexpected key " + quoted(key) +
                                      " (the header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      if (*seen) {
        pos_ = key_at;
        fail(ErrorCode::kCorrupt, "duplicate key " + quoted(key) + " in the header");
      }
      *seen = true;
      if (key == "descr") {
        descr_value(header);
      } else if (key == "fortran_order") {
        header.fortran_order = boolean_value();
      } else {
        header.shape = shape_value();
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        fail(ErrorCode::kCorrupt, "expected ',' or '}' after the value of " + quoted(key));
      }
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) fail(ErrorCode::kCorrupt, "unexpected text after the header dict");
    if (!have_descr) fail(ErrorCode::kCorrupt, "header lacks the key 'descr'");
    if (!have_fortran) fail(ErrorCode::kCorrupt, "header lacks the key 'fortran_order'");
    if (!have_shape) fail(ErrorCode::kCorrupt, "header lacks the key 'shape'");
  }

  // Fails at the current position.
  [[noreturn]] void fail(ErrorCode code, std::string message) const {
    numpy_detail::fail(code, std::move(message), where_, text_offset_ + pos_);
  }

 private:
  // The next character; fails at the end of the text (an unclosed dict).
  char peek() const {
    if (pos_ >= text_.size()) fail(ErrorCode::kCorrupt, "header ends inside the dict (unterminated)");
    const auto byte = static_cast<unsigned char>(text_[pos_]);
    if (byte >= 0x80) fail(ErrorCode::kCorrupt, "non-ASCII byte outside a string in the header");
    if (byte < 0x20 && byte != '\n' && byte != '\t' && byte != '\r' && byte != '\f') {
      fail(ErrorCode::kCorrupt, "control character in the header");
    }
    return text_[pos_];
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' || text_[pos_] == '\r' ||
            text_[pos_] == '\f')) {
      ++pos_;
    }
  }

  static bool is_identifier_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }

  // A '...' or "..." literal without escapes; returns its contents.
  std::string_view string_literal() {
    const char quote = text_[pos_++];
    const size_t start = pos_;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n' || text_[pos_] == '\r') {
        fail(ErrorCode::kCorrupt, "unterminated string in the header");
      }
      const char c = text_[pos_];
      if (c == quote) break;
      if (c == '\\') fail(ErrorCode::kCorrupt, "escape sequences are not allowed in header strings");
      if (static_cast<unsigned char>(c) < 0x20) fail(ErrorCode::kCorrupt, "control character in a header string");
      ++pos_;
    }
    const std::string_view contents = text_.substr(start, pos_ - start);
    ++pos_;
    return contents;
  }

  void descr_value(NpyHeader& header) {
    const char c = peek();
    if (c == '[') fail(ErrorCode::kUnsupported, "structured dtypes (a list descr) are not supported");
    if (c == '(') fail(ErrorCode::kUnsupported, "subarray dtypes (a tuple descr) are not supported");
    if (c != '\'' && c != '"') fail(ErrorCode::kCorrupt, "descr is not a string");
    const size_t at = pos_;
    const std::string_view descr = string_literal();
    const auto fail_at = [&](ErrorCode code, std::string message) {
      pos_ = at;
      fail(code, std::move(message));
    };
    const DescrInfo info = parse_descr(descr, fail_at);
    header.dtype = info.dtype;
    header.big_endian = info.big_endian;
  }

  bool boolean_value() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_identifier_char(text_[pos_])) ++pos_;
    const std::string_view word = text_.substr(start, pos_ - start);
    if (word == "True") return true;
    if (word == "False") return false;
    const size_t end = text_.find_first_of(",}", start);
    pos_ = start;
    fail(ErrorCode::kCorrupt, "fortran_order is not a bool: " +
                                  quoted(text_.substr(start, end == std::string_view::npos ? 16 : end - start)));
  }

  Shape shape_value() {
    if (peek() != '(') fail(ErrorCode::kCorrupt, "shape is not a tuple");
    ++pos_;
    Shape shape;
    bool trailing_comma = false;
    skip_space();
    while (peek() != ')') {
      if (shape.size() == kMaxDimensions) {
        fail(ErrorCode::kUnsupported, "shape has more than 64 dimensions (numpy's limit)");
      }
      shape.push_back(dimension());
      trailing_comma = false;
      skip_space();
      if (peek() == ',') {
        ++pos_;
        trailing_comma = true;
        skip_space();
      } else if (peek() != ')') {
        fail(ErrorCode::kCorrupt, "expected ',' or ')' in the shape tuple");
      }
    }
    if (shape.size() == 1 && !trailing_comma) {
      fail(ErrorCode::kCorrupt, "shape is a parenthesized integer, not a tuple (a 1-tuple needs a comma)");
    }
    ++pos_;
    return shape;
  }

  int64_t dimension() {
    const size_t start = pos_;
    const bool negative = peek() == '-';
    if (negative) ++pos_;
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
      pos_ = start;
      fail(ErrorCode::kCorrupt, "shape holds something other than an integer");
    }
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9') {
      fail(ErrorCode::kCorrupt, "shape holds an integer with a leading zero");
    }
    uint64_t value = 0;
    bool overflow = false;
    for (; pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; ++pos_) {
      const auto digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (value > (static_cast<uint64_t>(INT64_MAX) - digit) / 10) overflow = true;
      if (!overflow) value = value * 10 + digit;
    }
    // Python 2 wrote longs as "3L"; numpy still reads them in 1.0 and 2.0 files.
    if (python2_longs_ && pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    if (pos_ < text_.size() && is_identifier_char(text_[pos_])) {
      pos_ = start;
      fail(ErrorCode::kCorrupt, "shape holds something other than an integer");
    }
    if (negative && value != 0) {
      pos_ = start;
      fail(ErrorCode::kCorrupt, "shape holds a negative dimension");
    }
    if (overflow) {
      pos_ = start;
      fail(ErrorCode::kCorrupt, "shape holds a dimension beyond 2^63 - 1");
    }
    return static_cast<int64_t>(value);
  }

  std::string_view text_;
  uint64_t text_offset_;
  bool python2_longs_;
  const NpyLocation& where_;
  size_t pos_ = 0;
};

// Bytes per unit of byte order: complex numbers are two floats.
size_t swap_width(DType dtype) {
  const size_t size = dtype_size(dtype);
  return (dtype == DType::kComplex64 || dtype == DType::kComplex128) ? size / 2 : size;
}

void byte_swap(std::span<std::byte> bytes, size_t width) {
  if (width <= 1) return;
  for (size_t at = 0; at + width <= bytes.size(); at += width) {
    std::reverse(bytes.begin() + static_cast<ptrdiff_t>(at), bytes.begin() + static_cast<ptrdiff_t>(at + width));
  }
}

// Copies column-major `src` into row-major `dst` for `shape`.
template <size_t kSize>
void fortran_to_c(const std::byte* src, std::byte* dst, const Shape& shape) {
  const size_t ndim = shape.size();
  std::vector<uint64_t> stride(ndim);  // column-major strides, in elements
  uint64_t step = 1;
  for (size_t k = 0; k < ndim; ++k) {
    stride[k] = step;
    step *= static_cast<uint64_t>(shape[k]);
  }
  const auto inner = static_cast<uint64_t>(shape[ndim - 1]);
  const uint64_t inner_stride = stride[ndim - 1];
  std::vector<int64_t> index(ndim, 0);
  uint64_t base = 0;  // column-major offset of index[0 .. ndim-2]
  while (true) {
    for (uint64_t j = 0; j < inner; ++j) {
      std::memcpy(dst, src + (base + j * inner_stride) * kSize, kSize);
      dst += kSize;
    }
    // Advance the outer axes like an odometer, last axis fastest.
    bool done = true;
    for (size_t axis = ndim - 1; axis-- > 0;) {
      if (++index[axis] < shape[axis]) {
        base += stride[axis];
        done = false;
        break;
      }
      base -= stride[axis] * static_cast<uint64_t>(shape[axis] - 1);
      index[axis] = 0;
    }
    if (done) return;
  }
}

void fortran_to_c(std::span<const std::byte> src, std::span<std::byte> dst, const Shape& shape, size_t size) {
  switch (size) {
    case 1: return fortran_to_c<1>(src.data(), dst.data(), shape);
    case 2: return fortran_to_c<2>(src.data(), dst.data(), shape);
    case 4: return fortran_to_c<4>(src.data(), dst.data(), shape);
    case 8: return fortran_to_c<8>(src.data(), dst.data(), shape);
    case 16: return fortran_to_c<16>(src.data(), dst.data(), shape);
    default: throw Error(ErrorCode::kInvalidArgument, "unexpected element size " + std::to_string(size));
  }
}

// Adds the comment's aliases to `contents.tree`, after the members: each a
// Tensor over its stored member's Buffer.
void add_aliases(const zip_detail::ZipReader& zip, Contents& contents) {
  std::unordered_map<std::string_view, size_t> members;
  members.reserve(contents.entries.size());
  for (size_t i = 0; i < contents.entries.size(); ++i) members.emplace(contents.entries[i].name, i);
  const std::optional<std::vector<NpzAlias>> aliases =
      read_npz_comment(zip.comment(), zip.path(), zip.comment_offset(), members);
  if (!aliases) return;
  contents.format_version = static_cast<int>(kNpzCommentVersion);
  for (const NpzAlias& alias : *aliases) {
    const Tensor stored = contents.tree.find(contents.entries[alias.stored].name)->tensor();
    contents.tree.set(alias.name, Tree(stored));
  }
}

}  // namespace

NpyHeader parse_npy_header(std::span<const std::byte> bytes, const NpyLocation& where) {
  const size_t magic_checked = std::min(bytes.size(), kMagicSize);
  if (magic_checked == 0 || std::memcmp(bytes.data(), kMagic.data(), magic_checked) != 0) {
    fail(ErrorCode::kCorrupt, "not an .npy file: it does not start with the magic \"\\x93NUMPY\"", where, 0);
  }
  if (bytes.size() < kPrefixSizeV1) {
    fail(ErrorCode::kCorrupt, "truncated .npy prefix (" + std::to_string(bytes.size()) + " bytes)", where, 0);
  }
  NpyHeader header;
  header.major = std::to_integer<uint8_t>(bytes[kVersionOffset]);
  header.minor = std::to_integer<uint8_t>(bytes[kVersionOffset + 1]);
  if (header.minor != 0 || header.major < 1 || header.major > 3) {
    fail(ErrorCode::kUnsupported, ".npy format version " + std::to_string(header.major) + "." +
                                      std::to_string(header.minor) + " is not supported (known: 1.0, 2.0, 3.0)",
         where, kVersionOffset);
  }
  const size_t prefix = header.major == 1 ? kPrefixSizeV1 : kPrefixSizeV2;
  if (bytes.size() < prefix) {
    fail(ErrorCode::kCorrupt, "truncated .npy prefix (" + std::to_string(bytes.size()) + " bytes)", where, 0);
  }
  const uint64_t header_length = header.major == 1 ? zip_detail::load_u16(bytes.data() + kHeaderLengthOffset)
                                                   : zip_detail::load_u32(bytes.data() + kHeaderLengthOffset);
  if (header_length > bytes.size() - prefix) {
    fail(ErrorCode::kCorrupt, "header length " + std::to_string(header_length) + " extends past the end (" +
                                  std::to_string(bytes.size()) + " bytes)", where, kHeaderLengthOffset);
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + prefix),
                              static_cast<size_t>(header_length));
  if (text.empty() || text.back() != '\n') {
    fail(ErrorCode::kCorrupt, "header is not terminated by a newline", where, prefix + header_length);
  }
  HeaderParser parser(text, prefix, header.major <= 2, where);
  parser.parse(header);
  header.data_offset = prefix + header_length;

  uint64_t size = dtype_size(header.dtype);
  for (int64_t dimension : header.shape) {
    if (__builtin_mul_overflow(size, static_cast<uint64_t>(dimension), &size)) {
      fail(ErrorCode::kCorrupt, "shape " + shape_repr(header.shape) + " times " +
                                    std::to_string(dtype_size(header.dtype)) + " bytes overflows 64 bits",
           where, prefix);
    }
  }
  header.data_size = size;
  return header;
}

Tensor npy_tensor(const NpyHeader& header, const Buffer& npy, const NpyLocation& where) {
  const uint64_t available = npy.size() - header.data_offset;
  if (available < header.data_size) {
    fail(ErrorCode::kCorrupt, "array data is " + std::to_string(available) + " bytes, the header declares " +
                                  std::to_string(header.data_size), where, header.data_offset);
  }
  if (available > header.data_size) {
    const uint64_t end = header.data_offset + header.data_size;
    const auto rest = npy.bytes().subspan(end);
    if (rest.size() >= kMagicSize && std::memcmp(rest.data(), kMagic.data(), kMagicSize) == 0) {
      fail(ErrorCode::kUnsupported, "another array follows the first (several np.save calls into one file); "
                                    "ckpt reads one array per .npy", where, end);
    }
    fail(ErrorCode::kCorrupt, std::to_string(rest.size()) + " unexpected bytes after the array data", where, end);
  }
  Buffer data = npy.slice(header.data_offset, header.data_size);
  const size_t element = dtype_size(header.dtype);
  size_t long_axes = 0;
  for (int64_t dimension : header.shape) long_axes += dimension > 1 ? 1 : 0;
  // Column-major and row-major bytes coincide when at most one axis is longer than 1.
  const bool transpose = header.fortran_order && long_axes > 1 && header.data_size > 0;
  const size_t alignment = swap_width(header.dtype);
  const bool aligned = reinterpret_cast<uintptr_t>(data.data()) % alignment == 0;
  if (!header.big_endian && !transpose && aligned) return Tensor(header.dtype, header.shape, std::move(data));

  Buffer copy = Buffer::allocate(static_cast<size_t>(header.data_size));
  if (transpose) {
    fortran_to_c(data.bytes(), copy.mutable_bytes(), header.shape, element);
  } else {
    data.copy_to(copy.mutable_bytes());
  }
  if (header.big_endian) byte_swap(copy.mutable_bytes(), swap_width(header.dtype));
  return Tensor(header.dtype, header.shape, std::move(copy));
}

bool detect_npy(std::span<const std::byte> head) {
  return head.size() >= kMagicSize && std::memcmp(head.data(), kMagic.data(), kMagicSize) == 0;
}

bool detect_npz(std::span<const std::byte> head, uint64_t file_size) {
  const std::string_view first = zip_detail::first_entry_name(head);
  if (!first.empty()) return first.ends_with(kMemberSuffix);
  return head.size() >= 4 && zip_detail::load_u32(head.data()) == zip_detail::kEndRecordSignature &&
         zip_detail::detect_zip(head, file_size);
}

Contents read_npy(const std::filesystem::path& path, const LoadOptions& options) {
  std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(path);
  const Buffer npy = file->slice(0, file->size());
  const NpyLocation where{.path = path};
  const NpyHeader header = parse_npy_header(npy.bytes(), where);
  Tensor tensor = npy_tensor(header, npy, where);
  Contents contents;
  contents.format = "npy";
  contents.entries.push_back({
      .name = "",
      .dtype = tensor.dtype(),
      .shape = tensor.shape(),
      .offset = header.data_offset,
      .nbytes = tensor.nbytes(),
  });
  contents.tree = Tree(std::move(tensor));
  return contents;
}

Contents read_npz(const std::filesystem::path& path, const LoadOptions& options) {
  std::shared_ptr<const detail::MappedFile> file = detail::MappedFile::open(path);
  const zip_detail::ZipReader zip(file);
  Contents contents;
  contents.format = "npz";
  contents.tree = Tree::map();
  contents.entries.reserve(zip.entries().size());
  for (const zip_detail::ZipEntry& member : zip.entries()) {
    const std::string_view name = member.name;
    if (name.size() < kMemberSuffix.size() || !name.ends_with(kMemberSuffix)) {
      throw Error(ErrorCode::kUnsupported,
                  "member is not an .npy file (an .npz holds only \"<key>.npy\" members)",
                  {.path = path, .entry = member.name, .offset = member.local_header_offset});
    }
    std::string key(name.substr(0, name.size() - kMemberSuffix.size()));
    const bool stored = member.method == zip_detail::kMethodStored;
    const NpyLocation where{
        .path = path,
        .entry = member.name,
        .file_offset = stored ? std::optional<uint64_t>(member.data_offset) : std::nullopt,
    };
    const Buffer npy = zip.read(member, {.verify_crc = options.verify});
    const NpyHeader header = parse_npy_header(npy.bytes(), where);
    Tensor tensor = npy_tensor(header, npy, where);
    contents.entries.push_back({
        .name = key,
        .dtype = tensor.dtype(),
        .shape = tensor.shape(),
        .offset = stored ? member.data_offset + header.data_offset : 0,
        .nbytes = tensor.nbytes(),
    });
    contents.tree.set(std::move(key), Tree(std::move(tensor)));
  }
  add_aliases(zip, contents);
  return contents;
}

}  // namespace ckpt::numpy_detail
