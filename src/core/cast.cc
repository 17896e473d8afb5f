// Element-wise dtype conversion (include/ckpt/cast.h).
//
// Every element is first widened, exactly, to one of four forms: int64 (bool
// and signed integers), uint64 (unsigned integers), double (every real
// floating dtype fits a double exactly) or complex<double>; it is then
// narrowed to the target with a single rounding. float32 and float64 targets
// use the hardware conversions (IEEE, round to nearest even); float16,
// bfloat16 and the float8s (SmallFloat) are encoded by round_to() from an exact
// sign × integer × 2^exponent, so float64 and 64-bit integers round to them
// once, never through float32.

#include "ckpt/cast.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ckpt/error.h"
#include "core/parallel.h"

namespace ckpt {
namespace {

// Tensors over this many bytes (input or output) are converted in chunks of
// kChunkElements on several threads.
constexpr size_t kParallelBytes = size_t{4} << 20;
constexpr size_t kChunkElements = size_t{1} << 20;
// Elements widened at a time into scratch memory.
constexpr size_t kBlockElements = 1024;

// A binary floating-point format of at most 16 bits.
struct SmallFloat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  uint32_t max_finite;     // bit pattern of the largest finite value
  uint32_t overflow;       // what a too large value becomes: +inf, or NaN where there is no inf
  uint32_t nan;            // the positive quiet NaN written for any NaN
  bool writes_nan_payload;  // a NaN's top payload bits go along when encoding (float16, as numpy)
  bool reads_nan_payload;   // ... when decoding (not float8, as ml_dtypes)
  bool has_infinity;
  // "fnuz": the pattern of -0 (the sign bit alone) is the only NaN, so there
  // is no negative zero; a negative value that rounds to zero becomes +0.
  bool negative_zero_is_nan = false;
  // float8_e8m0fnu: no sign, no mantissa, no zero: bits b (0..254) are
  // 2^(b - bias), 0xFF is NaN. Encoded by round_to_power_of_two().
  bool power_of_two_only = false;
};

// IEEE 754 binary16.
constexpr SmallFloat kFloat16{
    .exponent_bits = 5, .mantissa_bits = 10, .bias = 15,
    .max_finite = 0x7BFF, .overflow = 0x7C00, .nan = 0x7E00,
    .writes_nan_payload = true, .reads_nan_payload = true, .has_infinity = true};
// bfloat16: the upper half of a binary32; ml_dtypes writes every NaN as ±0x7FC0.
constexpr SmallFloat kBFloat16{
    .exponent_bits = 8, .mantissa_bits = 7, .bias = 127,
    .max_finite = 0x7F7F, .overflow = 0x7F80, .nan = 0x7FC0,
    .writes_nan_payload = false, .reads_nan_payload = true, .has_infinity = true};
// OCP FP8 E4M3 ("fn": finite and NaN only): 0x7E = 448 is the largest, S.1111.111
// is NaN, and a too large value (infinity included) becomes NaN, as in ml_dtypes.
constexpr SmallFloat kFloat8E4M3FN{
    .exponent_bits = 4, .mantissa_bits = 3, .bias = 7,
    .max_finite = 0x7E, .overflow = 0x7F, .nan = 0x7F,
    .writes_nan_payload = false, .reads_nan_payload = false, .has_infinity = false};
// OCP FP8 E5M2: a binary16 without its low byte; ml_dtypes' NaN is 0x7E.
constexpr SmallFloat kFloat8E5M2{
    .exponent_bits = 5, .mantissa_bits = 2, .bias = 15,
    .max_finite = 0x7B, .overflow = 0x7C, .nan = 0x7E,
    .writes_nan_payload = false, .reads_nan_payload = false, .has_infinity = true};
// The "fnuz" float8s of Graphcore / AMD (ml_dtypes float8_e4m3fnuz,
// float8_e5m2fnuz): one more bias than E4M3 / E5M2, every exponent finite
// (0x7F is the largest: 240 and 57344), 0x80 the one NaN; too large values
// and infinities become NaN, as in ml_dtypes.
constexpr SmallFloat kFloat8E4M3FNUZ{
    .exponent_bits = 4, .mantissa_bits = 3, .bias = 8,
    .max_finite = 0x7F, .overflow = 0x80, .nan = 0x80,
    .writes_nan_payload = false, .reads_nan_payload = false, .has_infinity = false, .negative_zero_is_nan = true};
constexpr SmallFloat kFloat8E5M2FNUZ{
    .exponent_bits = 5, .mantissa_bits = 2, .bias = 16,
    .max_finite = 0x7F, .overflow = 0x80, .nan = 0x80,
    .writes_nan_payload = false, .reads_nan_payload = false, .has_infinity = false, .negative_zero_is_nan = true};
// OCP MX E8M0 scale (ml_dtypes float8_e8m0fnu): 2^-127 .. 2^127, 0xFF NaN.
// sign_bit() is 0x100, outside the byte: no pattern has a sign.
constexpr SmallFloat kFloat8E8M0FNU{
    .exponent_bits = 8, .mantissa_bits = 0, .bias = 127,
    .max_finite = 0xFE, .overflow = 0xFF, .nan = 0xFF,
    .writes_nan_payload = false, .reads_nan_payload = false, .has_infinity = false, .power_of_two_only = true};

uint32_t sign_bit(const SmallFloat& format) { return 1u << (format.exponent_bits + format.mantissa_bits); }

// float8_e8m0fnu's bits for (negative ? -1 : 1) × significand × 2^exponent,
// as ml_dtypes 0.5 converts a float32: zero and negative values become NaN;
// from 2^-126 (float32's smallest normal) up, the nearer power of two, ties
// up (ml_dtypes rounds float32's bits with the implicit one as the last kept
// bit, which is odd, so a tie always rounds up); too large is NaN. Below
// 2^-126 it rounds float32's subnormal bits, whose implicit bit is 0: a value
// above 2^-127 becomes 2^-126, any smaller one 2^-127 (it never becomes NaN).
uint32_t round_to_power_of_two(const SmallFloat& format, bool negative, uint64_t significand, int exponent) {
  if (negative || significand == 0) return format.nan;
  const int lead = 63 - std::countl_zero(significand);
  const int top = lead + exponent;  // the value lies in [2^top, 2^(top + 1))
  constexpr int kFloat32MinExponent = -126;
  if (top < kFloat32MinExponent) {
    return top == kFloat32MinExponent - 1 && !std::has_single_bit(significand) ? 1u : 0u;
  }
  const bool half_or_more = lead > 0 && ((significand >> (lead - 1)) & 1) != 0;
  const int bits = top + format.bias + (half_or_more ? 1 : 0);
  return bits > static_cast<int>(format.max_finite) ? format.nan : static_cast<uint32_t>(bits);
}

// The format's bits nearest to (negative ? -1 : 1) × significand × 2^exponent,
// ties to even.
uint32_t round_to(const SmallFloat& format, bool negative, uint64_t significand, int exponent) {
  if (format.power_of_two_only) return round_to_power_of_two(format, negative, significand, exponent);
  // fnuz: zero is always +0 (its sign bit alone is NaN).
  const uint32_t sign = negative ? sign_bit(format) : 0;
  const uint32_t zero = format.negative_zero_is_nan ? 0 : sign;
  if (significand == 0) return zero;
  // The value lies in [2^top, 2^(top + 1)).
  const int top = 63 - std::countl_zero(significand) + exponent;
  const int min_exponent = 1 - format.bias;
  const int max_exponent = (1 << format.exponent_bits) - 1 - format.bias;
  if (top > max_exponent) return sign | format.overflow;
  // The weight of the last mantissa bit, and how many bits of `significand` lie below it.
  const int quantum = std::max(top, min_exponent) - format.mantissa_bits;
  const int shift = quantum - exponent;
  uint64_t units;  // the value in multiples of 2^quantum, rounded
  if (shift <= 0) {
    units = significand << -shift;  // exact; below 2^(mantissa_bits + 1)
  } else if (shift > 64) {
    units = 0;  // below half a unit
  } else {
    units = shift == 64 ? 0 : significand >> shift;
    const uint64_t rest = shift == 64 ? significand : significand & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (units & 1) != 0)) ++units;
  }
  // Subnormals are their units; a normal value adds its biased exponent, and
  // rounding up to the next power of two carries into it.
  const uint64_t bits =
      top < min_exponent ? units : (static_cast<uint64_t>(top + format.bias - 1) << format.mantissa_bits) + units;
  if (bits > format.max_finite) return sign | format.overflow;
  if (bits == 0) return zero;
  return sign | static_cast<uint32_t>(bits);
}

uint32_t encode(const SmallFloat& format, double value) {
  const uint64_t bits = std::bit_cast<uint64_t>(value);
  const bool negative = (bits >> 63) != 0;
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  const uint64_t mantissa = bits & ((uint64_t{1} << 52) - 1);
  if (biased == 0x7FF) {
    if (format.power_of_two_only) return format.nan;  // e8m0 has neither infinity nor sign
    const uint32_t sign = negative ? sign_bit(format) : 0;
    if (mantissa == 0) return sign | format.overflow;  // ±inf
    uint32_t nan = format.nan;
    if (format.writes_nan_payload) {
      nan |= static_cast<uint32_t>(mantissa >> (52 - format.mantissa_bits)) & ((1u << format.mantissa_bits) - 1);
    }
    return sign | nan;
  }
  if (biased == 0) return round_to(format, negative, mantissa, -1074);
  return round_to(format, negative, mantissa | (uint64_t{1} << 52), biased - 1075);
}

uint32_t encode(const SmallFloat& format, int64_t value) {
  const uint64_t magnitude = value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  return round_to(format, value < 0, magnitude, 0);
}

uint32_t encode(const SmallFloat& format, uint64_t value) { return round_to(format, false, value, 0); }

double decode(const SmallFloat& format, uint32_t bits) {
  constexpr double kQuietNaN = std::numeric_limits<double>::quiet_NaN();
  if (format.power_of_two_only) {
    return bits == format.nan ? kQuietNaN : std::ldexp(1.0, static_cast<int>(bits) - format.bias);
  }
  // fnuz NaN: ml_dtypes gives it the sign of its bits, negative.
  if (format.negative_zero_is_nan && bits == sign_bit(format)) return -kQuietNaN;
  const uint32_t body = bits & (sign_bit(format) - 1);
  const bool negative = (bits & sign_bit(format)) != 0;
  const uint32_t exponent = body >> format.mantissa_bits;
  const uint32_t mantissa = body & ((1u << format.mantissa_bits) - 1);
  const uint32_t all_ones = (1u << format.exponent_bits) - 1;
  double magnitude;
  if (format.has_infinity ? exponent == all_ones : body == format.nan) {
    if (format.has_infinity && mantissa == 0) {
      magnitude = std::numeric_limits<double>::infinity();
    } else {  // NaN, quiet, with the payload's bits on top of the double's where kept
      const uint64_t payload = format.reads_nan_payload ? mantissa : 0;
      const uint64_t nan = (negative ? uint64_t{1} << 63 : 0) | 0x7FF8000000000000ull |
                           (payload << (52 - format.mantissa_bits));
      return std::bit_cast<double>(nan);
    }
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - format.bias - format.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa | (1u << format.mantissa_bits)),
                           static_cast<int>(exponent) - format.bias - format.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

const SmallFloat* small_float(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return &kFloat16;
    case DType::kBFloat16: return &kBFloat16;
    case DType::kFloat8E4M3FN: return &kFloat8E4M3FN;
    case DType::kFloat8E5M2: return &kFloat8E5M2;
    case DType::kFloat8E4M3FNUZ: return &kFloat8E4M3FNUZ;
    case DType::kFloat8E5M2FNUZ: return &kFloat8E5M2FNUZ;
    case DType::kFloat8E8M0FNU: return &kFloat8E8M0FNU;
    default: return nullptr;
  }
}

enum class Wide { kSigned, kUnsigned, kReal, kComplex };

Wide wide_form(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64: return Wide::kSigned;
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64: return Wide::kUnsigned;
    case DType::kComplex64:
    case DType::kComplex128: return Wide::kComplex;
    default: return Wide::kReal;
  }
}

// Unaligned little-endian element access (mapped files need not align).
template <class T>
T load_one(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

template <class T>
void store_one(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof value);
}

template <class T, class W>
void widen(const std::byte* src, size_t count, W* out) {
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<W>(load_one<T>(src + i * sizeof(T)));
}

template <class Bits>
void widen_small(const SmallFloat& format, const std::byte* src, size_t count, double* out) {
  for (size_t i = 0; i < count; ++i) out[i] = decode(format, load_one<Bits>(src + i * sizeof(Bits)));
}

void load(DType dtype, const std::byte* src, size_t count, int64_t* out) {
  switch (dtype) {
    case DType::kBool:
      for (size_t i = 0; i < count; ++i) out[i] = src[i] != std::byte{0};
      return;
    case DType::kInt8: return widen<int8_t>(src, count, out);
    case DType::kInt16: return widen<int16_t>(src, count, out);
    case DType::kInt32: return widen<int32_t>(src, count, out);
    default: return widen<int64_t>(src, count, out);
  }
}

void load(DType dtype, const std::byte* src, size_t count, uint64_t* out) {
  switch (dtype) {
    case DType::kUInt8: return widen<uint8_t>(src, count, out);
    case DType::kUInt16: return widen<uint16_t>(src, count, out);
    case DType::kUInt32: return widen<uint32_t>(src, count, out);
    default: return widen<uint64_t>(src, count, out);
  }
}

void load(DType dtype, const std::byte* src, size_t count, double* out) {
  switch (dtype) {
    case DType::kFloat32: return widen<float>(src, count, out);
    case DType::kFloat64: return widen<double>(src, count, out);
    case DType::kFloat16:
    case DType::kBFloat16: return widen_small<uint16_t>(*small_float(dtype), src, count, out);
    default: return widen_small<uint8_t>(*small_float(dtype), src, count, out);
  }
}

void load(DType dtype, const std::byte* src, size_t count, std::complex<double>* out) {
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DType::kComplex64) {
      out[i] = {load_one<float>(src + 8 * i), load_one<float>(src + 8 * i + 4)};
    } else {
      out[i] = {load_one<double>(src + 16 * i), load_one<double>(src + 16 * i + 8)};
    }
  }
}

// Float to integer: truncated toward zero, NaN to 0, saturated at the ends.
template <class T>
T saturate(double value) {
  if (std::isnan(value)) return 0;
  // 2^digits: one past the largest value, exact in a double.
  constexpr double upper = 2.0 * static_cast<double>(uint64_t{1} << (std::numeric_limits<T>::digits - 1));
  if (value >= upper) return std::numeric_limits<T>::max();
  if constexpr (std::is_signed_v<T>) {
    if (value < -upper) return std::numeric_limits<T>::min();
  } else {
    if (value <= -1.0) return 0;
  }
  return static_cast<T>(value);
}

// One element to an integer dtype: wrap-around from integers (C++20
// conversions are modular), saturation from floats.
template <class T, class In>
T to_integer(In value) {
  if constexpr (std::is_same_v<In, double>) {
    return saturate<T>(value);
  } else {
    return static_cast<T>(value);
  }
}

template <class In>
bool nonzero(In value) {
  if constexpr (std::is_same_v<In, std::complex<double>>) {
    return value.real() != 0 || value.imag() != 0;
  } else {
    return value != 0;  // NaN too
  }
}

template <class T, class In>
void narrow_integer(const In* in, size_t count, std::byte* dst) {
  for (size_t i = 0; i < count; ++i) store_one<T>(dst + i * sizeof(T), to_integer<T>(in[i]));
}

template <class Bits, class In>
void narrow_small(const SmallFloat& format, const In* in, size_t count, std::byte* dst) {
  for (size_t i = 0; i < count; ++i) store_one<Bits>(dst + i * sizeof(Bits), static_cast<Bits>(encode(format, in[i])));
}

// Real (or integer) elements to complex, imaginary part 0; complex per component.
template <class Component, class In>
void narrow_complex(const In* in, size_t count, std::byte* dst) {
  for (size_t i = 0; i < count; ++i) {
    std::complex<Component> value;
    if constexpr (std::is_same_v<In, std::complex<double>>) {
      value = {static_cast<Component>(in[i].real()), static_cast<Component>(in[i].imag())};
    } else {
      value = {static_cast<Component>(in[i]), Component{0}};
    }
    std::memcpy(dst + i * sizeof value, &value, sizeof value);
  }
}

// Stores `count` widened elements as `dtype`. Complex input only reaches
// bool and complex targets (the others get its real part).
template <class In>
void store(const In* in, size_t count, DType dtype, std::byte* dst) {
  switch (dtype) {
    case DType::kBool:
      for (size_t i = 0; i < count; ++i) dst[i] = std::byte{nonzero(in[i])};
      return;
    case DType::kComplex64: return narrow_complex<float>(in, count, dst);
    case DType::kComplex128: return narrow_complex<double>(in, count, dst);
    default: break;
  }
  if constexpr (!std::is_same_v<In, std::complex<double>>) {
    switch (dtype) {
      case DType::kInt8: return narrow_integer<int8_t>(in, count, dst);
      case DType::kInt16: return narrow_integer<int16_t>(in, count, dst);
      case DType::kInt32: return narrow_integer<int32_t>(in, count, dst);
      case DType::kInt64: return narrow_integer<int64_t>(in, count, dst);
      case DType::kUInt8: return narrow_integer<uint8_t>(in, count, dst);
      case DType::kUInt16: return narrow_integer<uint16_t>(in, count, dst);
      case DType::kUInt32: return narrow_integer<uint32_t>(in, count, dst);
      case DType::kUInt64: return narrow_integer<uint64_t>(in, count, dst);
      // One IEEE rounding each, also from (u)int64: the compiler converts
      // those directly, not through a double.
      case DType::kFloat32:
        for (size_t i = 0; i < count; ++i) store_one<float>(dst + 4 * i, static_cast<float>(in[i]));
        return;
      case DType::kFloat64:
        for (size_t i = 0; i < count; ++i) store_one<double>(dst + 8 * i, static_cast<double>(in[i]));
        return;
      case DType::kFloat16:
      case DType::kBFloat16: return narrow_small<uint16_t>(*small_float(dtype), in, count, dst);
      default: return narrow_small<uint8_t>(*small_float(dtype), in, count, dst);
    }
  }
}

// The two conversions that dominate in practice, without the detour through double.
void float32_to_bfloat16(const std::byte* src, size_t count, std::byte* dst) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = load_one<uint32_t>(src + 4 * i);
    uint16_t out;
    if ((bits & 0x7FFFFFFF) > 0x7F800000) {
      out = static_cast<uint16_t>(((bits >> 16) & 0x8000) | 0x7FC0);
    } else {  // round to nearest even at bit 16; overflow carries into +-inf
      out = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    }
    store_one<uint16_t>(dst + 2 * i, out);
  }
}

void bfloat16_to_float32(const std::byte* src, size_t count, std::byte* dst) {
  for (size_t i = 0; i < count; ++i) {
    store_one<uint32_t>(dst + 4 * i, static_cast<uint32_t>(load_one<uint16_t>(src + 2 * i)) << 16);
  }
}

template <class Wide>
void convert_blocks(DType from, const std::byte* src, DType to, std::byte* dst, size_t count) {
  const size_t in_size = dtype_size(from);
  const size_t out_size = dtype_size(to);
  constexpr bool kComplex = std::is_same_v<Wide, std::complex<double>>;
  const bool real_part_only = kComplex && to != DType::kBool && to != DType::kComplex64 && to != DType::kComplex128;
  std::vector<Wide> wide(std::min(count, kBlockElements));
  std::vector<double> real(real_part_only ? wide.size() : 0);
  for (size_t done = 0; done < count; done += kBlockElements) {
    const size_t n = std::min(kBlockElements, count - done);
    load(from, src + done * in_size, n, wide.data());
    if constexpr (kComplex) {
      if (real_part_only) {
        for (size_t i = 0; i < n; ++i) real[i] = wide[i].real();
        store(real.data(), n, to, dst + done * out_size);
        continue;
      }
    }
    store(wide.data(), n, to, dst + done * out_size);
  }
}

void convert(DType from, const std::byte* src, DType to, std::byte* dst, size_t count) {
  if (from == DType::kFloat32 && to == DType::kBFloat16) return float32_to_bfloat16(src, count, dst);
  if (from == DType::kBFloat16 && to == DType::kFloat32) return bfloat16_to_float32(src, count, dst);
  switch (wide_form(from)) {
    case Wide::kSigned: return convert_blocks<int64_t>(from, src, to, dst, count);
    case Wide::kUnsigned: return convert_blocks<uint64_t>(from, src, to, dst, count);
    case Wide::kReal: return convert_blocks<double>(from, src, to, dst, count);
    case Wide::kComplex: return convert_blocks<std::complex<double>>(from, src, to, dst, count);
  }
}

// What cast_is_exact needs to know of a real dtype: integers by their value
// bits (int8: 7, uint8: 8); floats by precision (significand bits, the
// implicit one included) and the exponents of their largest and smallest
// (subnormal) powers of two.
struct Range {
  bool floating;
  bool is_signed;
  int digits;
  int max_exponent;
  int min_exponent;
  bool infinity;
  bool negative_zero = false;  // -0 distinct from +0 (IEEE-like floats, not fnuz)
};

Range range_of(DType dtype) {
  switch (dtype) {
    case DType::kInt8: return {false, true, 7, 0, 0, false};
    case DType::kInt16: return {false, true, 15, 0, 0, false};
    case DType::kInt32: return {false, true, 31, 0, 0, false};
    case DType::kInt64: return {false, true, 63, 0, 0, false};
    case DType::kUInt8: return {false, false, 8, 0, 0, false};
    case DType::kUInt16: return {false, false, 16, 0, 0, false};
    case DType::kUInt32: return {false, false, 32, 0, 0, false};
    case DType::kUInt64: return {false, false, 64, 0, 0, false};
    case DType::kFloat16: return {true, true, 11, 15, -24, true, true};
    case DType::kBFloat16: return {true, true, 8, 127, -133, true, true};
    case DType::kFloat32: return {true, true, 24, 127, -149, true, true};
    case DType::kFloat64: return {true, true, 53, 1023, -1074, true, true};
    case DType::kFloat8E4M3FN: return {true, true, 4, 8, -9, false, true};
    case DType::kFloat8E4M3FNUZ: return {true, true, 4, 7, -10, false, false};
    case DType::kFloat8E5M2FNUZ: return {true, true, 3, 15, -17, false, false};
    case DType::kFloat8E8M0FNU: return {true, false, 1, 127, -127, false, false};
    default: return {true, true, 3, 15, -16, true, true};  // float8_e5m2
  }
}

bool is_packed(DType dtype) { return dtype == DType::kFloat4E2M1FNx2; }

bool is_complex(DType dtype) { return dtype == DType::kComplex64 || dtype == DType::kComplex128; }

DType component(DType dtype) { return dtype == DType::kComplex64 ? DType::kFloat32 : DType::kFloat64; }

}  // namespace

Tensor cast(const Tensor& tensor, DType dtype, unsigned threads) {
  if (!tensor.has_data()) {
    throw Error(ErrorCode::kInvalidArgument, "cannot cast a tensor spec (dtype and shape only) to " +
                                                 std::string(dtype_name(dtype)) + ": it has no data");
  }
  if (tensor.dtype() == dtype) return tensor;
  if (is_packed(tensor.dtype()) || is_packed(dtype)) {
    throw Error(ErrorCode::kUnsupported, "cannot cast " + std::string(dtype_name(tensor.dtype())) + " to " +
                                             std::string(dtype_name(dtype)) +
                                             ": ckpt does not convert packed float4 pairs (float4_e2m1fn_x2)");
  }
  const std::span<const std::byte> src = tensor.bytes();
  Tensor out = Tensor::empty(dtype, tensor.shape());
  const std::span<std::byte> dst = out.mutable_bytes();
  const size_t count = static_cast<size_t>(tensor.numel());
  if (count == 0) return out;
  const bool parallel = std::max(src.size(), dst.size()) > kParallelBytes;
  const size_t chunk = parallel ? kChunkElements : count;
  const size_t chunks = (count + chunk - 1) / chunk;
  const size_t in_size = dtype_size(tensor.dtype());
  const size_t out_size = dtype_size(dtype);
  detail::parallel_for(chunks, parallel ? threads : 1, [&](size_t index, unsigned) {
    const size_t begin = index * chunk;
    convert(tensor.dtype(), src.data() + begin * in_size, dtype, dst.data() + begin * out_size,
            std::min(chunk, count - begin));
  });
  return out;
}

bool cast_is_exact(DType from, DType to) {
  if (from == to) return true;
  if (is_packed(from) || is_packed(to)) return false;  // cast() refuses them
  // e8m0 has no zero (false, 0 and 0.0 become NaN) and no negative values.
  if (to == DType::kFloat8E8M0FNU) return false;
  if (from == DType::kBool) return true;
  if (to == DType::kBool) return false;
  if (is_complex(from)) return is_complex(to) && cast_is_exact(component(from), component(to));
  if (is_complex(to)) return cast_is_exact(from, component(to));
  const Range a = range_of(from);
  const Range b = range_of(to);
  if (!a.floating && !b.floating) return b.digits >= a.digits && (b.is_signed || !a.is_signed);
  if (a.floating && !b.floating) return false;
  // An integer's magnitude needs `digits` significand bits and, for the
  // signed minimum -2^digits, that power of two.
  if (!a.floating) return b.digits >= a.digits && b.max_exponent >= a.digits;
  return b.digits >= a.digits && b.max_exponent >= a.max_exponent && b.min_exponent <= a.min_exponent &&
         (b.infinity || !a.infinity) && (b.negative_zero || !a.negative_zero) && (b.is_signed || !a.is_signed);
}

}  // namespace ckpt
