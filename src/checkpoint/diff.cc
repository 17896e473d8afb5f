// diff(): leaf-by-leaf comparison of two trees. Tensors of equal dtype and
// shape are first compared byte for byte; only when the bytes differ are the
// elements decoded to double and compared by the element rule of diff.h.

#include "ckpt/diff.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ckpt/error.h"

namespace ckpt {
namespace {

// ---- Element decoders: little-endian bytes of one element → double. ----

template <class T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
double decode_float16(uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);  // subnormal: m · 2^(1-15-10)
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// bfloat16: the upper half of an IEEE binary32.
double decode_bfloat16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

// float8_e4m3fn (OCP FP8 E4M3, "fn": finite, no infinities): 1 sign,
// 4 exponent (bias 7), 3 mantissa bits; S.1111.111 is NaN, every other
// pattern is finite (0x7E = 448, the largest).
double decode_float8_e4m3fn(uint8_t bits) {
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -9);  // m/8 · 2^(1-7)
  return sign * std::ldexp(8 + mantissa, exponent - 10);
}

// float8_e5m2 (OCP FP8 E5M2, IEEE-like): 1 sign, 5 exponent (bias 15),
// 2 mantissa bits; exponent 31 holds the infinities and NaNs.
double decode_float8_e5m2(uint8_t bits) {
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int exponent = (bits >> 2) & 0x1f;
  const int mantissa = bits & 0x3;
  if (exponent == 0x1f) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -16);  // m/4 · 2^(1-15)
  return sign * std::ldexp(4 + mantissa, exponent - 17);
}

// float8_e4m3fnuz / float8_e5m2fnuz (Graphcore / AMD "fnuz"): bias 8 / 16,
// every exponent finite, no infinities and no -0: 0x80 is the one NaN.
double decode_float8_fnuz(uint8_t bits, int mantissa_bits, int bias) {
  if (bits == 0x80) return std::numeric_limits<double>::quiet_NaN();
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int exponent = (bits & 0x7f) >> mantissa_bits;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - mantissa_bits);
  return sign * std::ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits);
}
double decode_float8_e4m3fnuz(uint8_t bits) { return decode_float8_fnuz(bits, 3, 8); }
double decode_float8_e5m2fnuz(uint8_t bits) { return decode_float8_fnuz(bits, 2, 16); }

// float8_e8m0fnu (OCP MX scale): 8 exponent bits (bias 127), no sign, no
// mantissa, no zero; 0xFF is NaN.
double decode_float8_e8m0fnu(uint8_t bits) {
  if (bits == 0xff) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, bits - 127);
}

// float4_e2m1fn, one nibble of float4_e2m1fn_x2: 1 sign, 2 exponent (bias 1),
// 1 mantissa bit; all 16 patterns finite (0.5 the subnormal, 6 the largest).
double decode_float4_e2m1fn(uint8_t nibble) {
  const double sign = (nibble & 0x8) ? -1.0 : 1.0;
  const int exponent = (nibble >> 1) & 0x3;
  const int mantissa = nibble & 0x1;
  if (exponent == 0) return sign * 0.5 * mantissa;
  return sign * std::ldexp(2 + mantissa, exponent - 2);
}

// ---- The element rule (diff.h), accumulated over one tensor. ----

class Comparison {
 public:
  explicit Comparison(double atol) : atol_(atol) {}

  void real(double a, double b) {
    double size;
    if (!part_difference(a, b, size)) return mismatch_nan();
    add(size);
  }

  void complex(double a_re, double a_im, double b_re, double b_im) {
    double re, im;
    if (!part_difference(a_re, b_re, re) || !part_difference(a_im, b_im, im)) {
      return mismatch_nan();
    }
    add(std::hypot(re, im));
  }

  // Exact for every 64-bit integer; rounded to double only at the end.
  void integer(__int128 a, __int128 b) {
    if (a == b) return;
    const __int128 difference = a > b ? a - b : b - a;
    add(static_cast<double>(difference));
  }

  double max_abs_diff() const {
    return nan_mismatch_ ? std::numeric_limits<double>::quiet_NaN() : max_;
  }
  uint64_t differing() const { return differing_; }

 private:
  // The size of the difference of one real part, false for NaN against a
  // number. Equal values (infinities included) and two NaNs give 0.
  static bool part_difference(double a, double b, double& size) {
    const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
    if (a_nan || b_nan) {
      size = 0.0;
      return a_nan && b_nan;
    }
    size = (a == b) ? 0.0 : std::fabs(a - b);  // inf - (-inf) = inf, never NaN here
    return true;
  }

  void add(double size) {
    if (size > max_) max_ = size;
    if (!(size <= atol_)) ++differing_;
  }

  void mismatch_nan() {
    nan_mismatch_ = true;
    ++differing_;
  }

  double atol_;
  double max_ = 0.0;
  uint64_t differing_ = 0;
  bool nan_mismatch_ = false;
};

template <class T, class Decode>
void compare_real(const std::byte* a, const std::byte* b, uint64_t n, Comparison& comparison,
                  Decode decode) {
  for (uint64_t i = 0; i < n; ++i) {
    comparison.real(decode(load<T>(a + i * sizeof(T))), decode(load<T>(b + i * sizeof(T))));
  }
}

template <class T>
void compare_integer(const std::byte* a, const std::byte* b, uint64_t n, Comparison& comparison) {
  for (uint64_t i = 0; i < n; ++i) {
    comparison.integer(load<T>(a + i * sizeof(T)), load<T>(b + i * sizeof(T)));
  }
}

template <class Part>
void compare_complex(const std::byte* a, const std::byte* b, uint64_t n, Comparison& comparison) {
  constexpr size_t kElement = 2 * sizeof(Part);
  for (uint64_t i = 0; i < n; ++i) {
    const std::byte* pa = a + i * kElement;
    const std::byte* pb = b + i * kElement;
    comparison.complex(load<Part>(pa), load<Part>(pa + sizeof(Part)), load<Part>(pb),
                       load<Part>(pb + sizeof(Part)));
  }
}

// Compares the elements of two tensors of equal dtype and shape.
void compare_elements(DType dtype, const std::byte* a, const std::byte* b, uint64_t n,
                      Comparison& comparison) {
  auto as_double = [](auto value) { return static_cast<double>(value); };
  switch (dtype) {
    case DType::kBool:
      for (uint64_t i = 0; i < n; ++i) {
        comparison.integer(a[i] != std::byte{0}, b[i] != std::byte{0});
      }
      return;
    case DType::kInt8: return compare_integer<int8_t>(a, b, n, comparison);
    case DType::kInt16: return compare_integer<int16_t>(a, b, n, comparison);
    case DType::kInt32: return compare_integer<int32_t>(a, b, n, comparison);
    case DType::kInt64: return compare_integer<int64_t>(a, b, n, comparison);
    case DType::kUInt8: return compare_integer<uint8_t>(a, b, n, comparison);
    case DType::kUInt16: return compare_integer<uint16_t>(a, b, n, comparison);
    case DType::kUInt32: return compare_integer<uint32_t>(a, b, n, comparison);
    case DType::kUInt64: return compare_integer<uint64_t>(a, b, n, comparison);
    case DType::kFloat16: return compare_real<uint16_t>(a, b, n, comparison, decode_float16);
    case DType::kBFloat16: return compare_real<uint16_t>(a, b, n, comparison, decode_bfloat16);
    case DType::kFloat32: return compare_real<float>(a, b, n, comparison, as_double);
    case DType::kFloat64: return compare_real<double>(a, b, n, comparison, as_double);
    case DType::kComplex64: return compare_complex<float>(a, b, n, comparison);
    case DType::kComplex128: return compare_complex<double>(a, b, n, comparison);
    case DType::kFloat8E4M3FN:
      return compare_real<uint8_t>(a, b, n, comparison, decode_float8_e4m3fn);
    case DType::kFloat8E5M2:
      return compare_real<uint8_t>(a, b, n, comparison, decode_float8_e5m2);
    case DType::kFloat8E4M3FNUZ:
      return compare_real<uint8_t>(a, b, n, comparison, decode_float8_e4m3fnuz);
    case DType::kFloat8E5M2FNUZ:
      return compare_real<uint8_t>(a, b, n, comparison, decode_float8_e5m2fnuz);
    case DType::kFloat8E8M0FNU:
      return compare_real<uint8_t>(a, b, n, comparison, decode_float8_e8m0fnu);
    case DType::kFloat4E2M1FNx2:
      // One element is a packed pair: compared as one, like a complex number's parts.
      for (uint64_t i = 0; i < n; ++i) {
        const auto pa = static_cast<uint8_t>(a[i]), pb = static_cast<uint8_t>(b[i]);
        comparison.complex(decode_float4_e2m1fn(pa & 0xf), decode_float4_e2m1fn(pa >> 4),
                           decode_float4_e2m1fn(pb & 0xf), decode_float4_e2m1fn(pb >> 4));
      }
      return;
  }
  throw Error(ErrorCode::kInvalidArgument, "diff: unknown dtype");
}

void diff_tensors(const std::string& name, const Tensor& a, const Tensor& b, double atol,
                  DiffReport& report) {
  bool mismatched = false;
  if (a.dtype() != b.dtype()) {
    report.dtype_mismatched.push_back({name, a.dtype(), b.dtype()});
    mismatched = true;
  }
  if (a.shape() != b.shape()) {
    report.shape_mismatched.push_back({name, a.shape(), b.shape()});
    mismatched = true;
  }
  if (mismatched) return;

  const auto bytes_a = a.bytes();
  const auto bytes_b = b.bytes();
  if (bytes_a.size() != bytes_b.size()) {
    // Equal dtype and shape imply equal sizes for every valid Tensor.
    throw Error(ErrorCode::kInvalidArgument, "diff: tensor byte sizes disagree").with_entry(name);
  }
  if (bytes_a.empty() || std::memcmp(bytes_a.data(), bytes_b.data(), bytes_a.size()) == 0) return;

  Comparison comparison(atol);
  const uint64_t numel = a.numel();
  compare_elements(a.dtype(), bytes_a.data(), bytes_b.data(), numel, comparison);
  if (comparison.differing() == 0) {
    report.within_tolerance.push_back(name);
  } else {
    report.value_differences.push_back(
        {name, a.dtype(), comparison.max_abs_diff(), comparison.differing(), numel});
  }
}

// Same-kind non-tensor leaves.
bool scalars_equal(const Tree& a, const Tree& b, double atol) {
  Comparison comparison(atol);
  switch (a.kind()) {
    case Tree::Kind::kNone: return true;
    case Tree::Kind::kBool: return a.boolean() == b.boolean();
    case Tree::Kind::kString: return a.string() == b.string();
    case Tree::Kind::kBytes: return a.bytes() == b.bytes();
    case Tree::Kind::kInt: comparison.integer(a.integer(), b.integer()); break;
    case Tree::Kind::kFloat: comparison.real(a.real(), b.real()); break;
    default: return true;  // containers are never leaves
  }
  return comparison.differing() == 0;
}

}  // namespace

bool DiffReport::identical() const {
  return only_in_a.empty() && only_in_b.empty() && kind_mismatched.empty() &&
         dtype_mismatched.empty() && shape_mismatched.empty() && value_differences.empty() &&
         leaf_differences.empty();
}

DiffReport diff(const Tree& a, const Tree& b, const DiffOptions& options) {
  if (!(options.atol >= 0.0)) {
    throw Error(ErrorCode::kInvalidArgument,
                "diff: atol must be a number >= 0, not " + std::to_string(options.atol));
  }
  const std::vector<Tree::Leaf> leaves_a = a.leaves();
  const std::vector<Tree::Leaf> leaves_b = b.leaves();
  std::unordered_map<std::string_view, const Tree*> by_name_b;
  by_name_b.reserve(leaves_b.size());
  for (const Tree::Leaf& leaf : leaves_b) by_name_b.emplace(leaf.name, leaf.value);

  DiffReport report;
  std::unordered_set<std::string_view> names_a;
  names_a.reserve(leaves_a.size());
  for (const Tree::Leaf& leaf : leaves_a) {
    names_a.insert(leaf.name);
    const auto found = by_name_b.find(leaf.name);
    if (found == by_name_b.end()) {
      report.only_in_a.push_back(leaf.name);
      continue;
    }
    ++report.compared;
    const Tree& value_a = *leaf.value;
    const Tree& value_b = *found->second;
    if (value_a.kind() != value_b.kind()) {
      report.kind_mismatched.push_back({leaf.name, value_a.kind(), value_b.kind()});
    } else if (value_a.is_tensor()) {
      diff_tensors(leaf.name, value_a.tensor(), value_b.tensor(), options.atol, report);
    } else if (!scalars_equal(value_a, value_b, options.atol)) {
      report.leaf_differences.push_back({leaf.name, value_a, value_b});
    }
  }
  for (const Tree::Leaf& leaf : leaves_b) {
    if (!names_a.contains(leaf.name)) report.only_in_b.push_back(leaf.name);
  }
  return report;
}


}  // namespace ckpt
