// ckpt::cast and cast_is_exact. Expected bit patterns are derived by hand
// (the comments say how) or come from numpy 2.3.5 / ml_dtypes 0.5.4
// `astype`, pasted as literals. Whole-format tables of the fnuz and e8m0
// float8s: cast_float8_tables_test.cc.

#include "ckpt/cast.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ckpt/error.h"

namespace ckpt {
namespace {

// A 1-d tensor of `values` (two per element for complex dtypes).
template <class T>
Tensor tensor_of(DType dtype, const std::vector<T>& values) {
  return Tensor::from_values<T>(dtype, {static_cast<int64_t>(values.size() * sizeof(T) / dtype_size(dtype))}, values);
}

template <class T>
std::vector<T> values_of(const Tensor& tensor) {
  std::vector<T> values(tensor.nbytes() / sizeof(T));
  std::memcpy(values.data(), tensor.bytes().data(), tensor.nbytes());
  return values;
}

// Casts `values` (as raw element type In of dtype `from`) to `to` and returns
// the result as raw element type Out.
template <class Out, class In>
std::vector<Out> cast_values(DType from, const std::vector<In>& values, DType to, unsigned threads = 1) {
  const Tensor out = cast(tensor_of<In>(from, values), to, threads);
  EXPECT_EQ(out.dtype(), to);
  return values_of<Out>(out);
}

float f32(uint32_t bits) { return std::bit_cast<float>(bits); }

// ---- float to float ----

// float32 bits, then what ml_dtypes 0.5.4 / numpy 2.3.5 astype gives for
// float16, bfloat16, float8_e4m3fn, float8_e5m2.
struct NarrowRow {
  uint32_t input;
  uint16_t f16, bf16;
  uint8_t e4m3, e5m2;
};
constexpr NarrowRow kNarrowFromFloat32[] = {
    {0x3F800000, 0x3C00, 0x3F80, 0x38, 0x3C},  // 1.0
    {0x3F808000, 0x3C04, 0x3F80, 0x38, 0x3C},  // 1 + 2^-8: bfloat16 tie, to even
    {0x3F818000, 0x3C0C, 0x3F82, 0x38, 0x3C},  // 1 + 3*2^-8: bfloat16 tie, up to even
    {0x3F808001, 0x3C04, 0x3F81, 0x38, 0x3C},  // just above the tie
    {0x7F7FFFFF, 0x7C00, 0x7F80, 0x7F, 0x7C},  // float32 max: overflows all
    {0x477FF000, 0x7C00, 0x4780, 0x7F, 0x7C},  // 65520: float16 tie past its max, to inf
    {0x477FE000, 0x7BFF, 0x4780, 0x7F, 0x7C},  // 65504: float16 max
    {0x33800000, 0x0001, 0x3380, 0x00, 0x00},  // 2^-24: float16's smallest subnormal
    {0x33000000, 0x0000, 0x3300, 0x00, 0x00},  // 2^-25: tie, to zero
    {0x33C00000, 0x0002, 0x33C0, 0x00, 0x00},  // 1.5 * 2^-24: tie, to even
    {0x34400000, 0x0003, 0x3440, 0x00, 0x00},  // 3 * 2^-24
    {0x38800000, 0x0400, 0x3880, 0x00, 0x04},  // 2^-14: float16's smallest normal
    {0x43E00000, 0x5F00, 0x43E0, 0x7E, 0x5F},  // 448: e4m3fn max
    {0x43E80000, 0x5F40, 0x43E8, 0x7E, 0x5F},  // 464: e4m3fn tie, to even (448)
    {0x43E80001, 0x5F40, 0x43E8, 0x7F, 0x5F},  // just above: e4m3fn overflows to NaN
    {0x47600000, 0x7B00, 0x4760, 0x7F, 0x7B},  // 57344: e5m2 max
    {0x47700000, 0x7B80, 0x4770, 0x7F, 0x7C},  // 61440: e5m2 tie past its max, to inf
    {0x476FFFFF, 0x7B80, 0x4770, 0x7F, 0x7B},  // just below
    {0x3A800000, 0x1400, 0x3A80, 0x00, 0x14},  // 2^-10
    {0x3A000000, 0x1000, 0x3A00, 0x00, 0x10},  // 2^-11: below half of e4m3fn's 2^-9
    {0x37800000, 0x0100, 0x3780, 0x00, 0x01},  // 2^-16: e5m2's smallest subnormal
    {0x37000000, 0x0080, 0x3700, 0x00, 0x00},  // 2^-17: e5m2 tie, to zero
    {0xC0490FDB, 0xC248, 0xC049, 0xC5, 0xC2},  // -pi
    {0x3EAAAAAB, 0x3555, 0x3EAB, 0x2B, 0x35},  // 1/3
    {0x7F800000, 0x7C00, 0x7F80, 0x7F, 0x7C},  // inf (e4m3fn: NaN)
    {0xFF800000, 0xFC00, 0xFF80, 0xFF, 0xFC},  // -inf
    {0x7FC00000, 0x7E00, 0x7FC0, 0x7F, 0x7E},  // NaN
    {0xFFC00000, 0xFE00, 0xFFC0, 0xFF, 0xFE},  // -NaN
    {0x80000000, 0x8000, 0x8000, 0x80, 0x80},  // -0.0
    {0x00000001, 0x0000, 0x0000, 0x00, 0x00},  // float32's smallest subnormal
    {0x00010000, 0x0000, 0x0001, 0x00, 0x00},  // bfloat16's smallest subnormal
};

TEST(CastTest, Float32ToSmallFloatsMatchesMlDtypes) {
  std::vector<uint32_t> input;
  for (const NarrowRow& row : kNarrowFromFloat32) input.push_back(row.input);
  // Through float64 as well: the same single rounding.
  std::vector<double> wide;
  for (uint32_t bits : input) wide.push_back(f32(bits));
  for (int from64 = 0; from64 < 2; ++from64) {
    const auto f16 = from64 ? cast_values<uint16_t>(DType::kFloat64, wide, DType::kFloat16)
                            : cast_values<uint16_t>(DType::kFloat32, input, DType::kFloat16);
    const auto bf16 = from64 ? cast_values<uint16_t>(DType::kFloat64, wide, DType::kBFloat16)
                             : cast_values<uint16_t>(DType::kFloat32, input, DType::kBFloat16);
    const auto e4m3 = from64 ? cast_values<uint8_t>(DType::kFloat64, wide, DType::kFloat8E4M3FN)
                             : cast_values<uint8_t>(DType::kFloat32, input, DType::kFloat8E4M3FN);
    const auto e5m2 = from64 ? cast_values<uint8_t>(DType::kFloat64, wide, DType::kFloat8E5M2)
                             : cast_values<uint8_t>(DType::kFloat32, input, DType::kFloat8E5M2);
    for (size_t i = 0; i < input.size(); ++i) {
      SCOPED_TRACE(testing::Message() << std::hex << "input 0x" << input[i] << (from64 ? " as float64" : ""));
      EXPECT_EQ(f16[i], kNarrowFromFloat32[i].f16);
      EXPECT_EQ(bf16[i], kNarrowFromFloat32[i].bf16);
      EXPECT_EQ(e4m3[i], kNarrowFromFloat32[i].e4m3);
      EXPECT_EQ(e5m2[i], kNarrowFromFloat32[i].e5m2);
    }
  }
}

// Bits of a small float, then its float32 bits per ml_dtypes 0.5.4 astype.
struct WidenRow {
  uint16_t bits;
  uint32_t f32;
};

void expect_widened(DType dtype, const std::vector<WidenRow>& rows) {
  for (const WidenRow& row : rows) {
    SCOPED_TRACE(testing::Message() << dtype_name(dtype) << std::hex << " 0x" << row.bits);
    const Tensor in = dtype_size(dtype) == 1 ? tensor_of<uint8_t>(dtype, {static_cast<uint8_t>(row.bits)})
                                             : tensor_of<uint16_t>(dtype, {row.bits});
    const uint32_t got = values_of<uint32_t>(cast(in, DType::kFloat32))[0];
    const double wide = values_of<double>(cast(in, DType::kFloat64))[0];
    if (std::isnan(f32(row.f32))) {  // payloads aside: NaN with its sign
      EXPECT_TRUE(std::isnan(f32(got)));
      EXPECT_EQ(got >> 31, row.f32 >> 31);
      EXPECT_TRUE(std::isnan(wide));
      EXPECT_EQ(std::signbit(wide), (row.f32 >> 31) != 0);
    } else {
      EXPECT_EQ(got, row.f32);
      EXPECT_EQ(wide, static_cast<double>(f32(row.f32)));
    }
  }
}

TEST(CastTest, SmallFloatsWidenAsMlDtypes) {
  expect_widened(DType::kFloat8E4M3FN, {{0x00, 0x00000000}, {0x01, 0x3B000000}, {0x07, 0x3C600000},
                                        {0x08, 0x3C800000}, {0x38, 0x3F800000}, {0x3F, 0x3FF00000},
                                        {0x7E, 0x43E00000}, {0x7F, 0x7FC00000}, {0x80, 0x80000000},
                                        {0x81, 0xBB000000}, {0xFE, 0xC3E00000}, {0xFF, 0xFFC00000}});
  expect_widened(DType::kFloat8E5M2, {{0x00, 0x00000000}, {0x01, 0x37800000}, {0x03, 0x38400000},
                                      {0x04, 0x38800000}, {0x3C, 0x3F800000}, {0x7B, 0x47600000},
                                      {0x7C, 0x7F800000}, {0x7D, 0x7FC00000}, {0x7E, 0x7FC00000},
                                      {0x7F, 0x7FC00000}, {0x80, 0x80000000}, {0xFB, 0xC7600000},
                                      {0xFC, 0xFF800000}, {0xFE, 0xFFC00000}});
  expect_widened(DType::kFloat16, {{0x0000, 0x00000000}, {0x0001, 0x33800000}, {0x03FF, 0x387FC000},
                                   {0x0400, 0x38800000}, {0x3C00, 0x3F800000}, {0x3C01, 0x3F802000},
                                   {0x7BFF, 0x477FE000}, {0x7C00, 0x7F800000}, {0x7E00, 0x7FC00000},
                                   {0x7C01, 0x7F802000}, {0x8001, 0xB3800000}, {0xFC00, 0xFF800000},
                                   {0xC000, 0xC0000000}});
  // bfloat16 is the upper half of a float32.
  expect_widened(DType::kBFloat16, {{0x3F80, 0x3F800000}, {0x0001, 0x00010000}, {0x7F7F, 0x7F7F0000},
                                    {0xFF80, 0xFF800000}, {0x7FC0, 0x7FC00000}, {0x8000, 0x80000000}});
}

TEST(CastTest, EveryBitPatternOfASmallFloatSurvivesARoundTrip) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat8E5M2,
                      DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2FNUZ, DType::kFloat8E8M0FNU}) {
    const size_t size = dtype_size(dtype);
    const size_t count = size_t{1} << (8 * size);
    std::vector<std::byte> bytes(count * size);
    for (size_t i = 0; i < count; ++i) std::memcpy(&bytes[i * size], &i, size);  // little-endian
    const Tensor all = Tensor::from_bytes(dtype, {static_cast<int64_t>(count)}, bytes);
    const std::vector<double> values = values_of<double>(cast(all, DType::kFloat64));
    for (DType wide : {DType::kFloat32, DType::kFloat64}) {
      const Tensor back = cast(cast(all, wide), dtype);
      for (size_t i = 0; i < count; ++i) {
        uint32_t got = 0;
        std::memcpy(&got, back.bytes().data() + i * size, size);
        if (std::isnan(values[i])) {
          EXPECT_EQ(got >> (8 * size - 1), i >> (8 * size - 1)) << dtype_name(dtype) << " NaN sign " << i;
        } else {
          ASSERT_EQ(got, i) << dtype_name(dtype) << " via " << dtype_name(wide);
        }
      }
    }
  }
}

TEST(CastTest, Float64RoundsOnceToSmallFloats) {
  // Each value lies just above a tie of the target, and exactly on a tie of
  // float32: rounding through float32 would go to even, rounding once goes up.
  const double above_f16_tie = 1 + std::ldexp(1, -11) + std::ldexp(1, -40);   // f16 ulp at 1 is 2^-10
  const double above_bf16_tie = 1 + std::ldexp(1, -8) + std::ldexp(1, -40);   // bf16 ulp 2^-7
  const double above_e4m3_tie = 1 + std::ldexp(1, -4) + std::ldexp(1, -40);   // e4m3 ulp 2^-3
  const double above_e5m2_tie = 1 + std::ldexp(1, -3) + std::ldexp(1, -40);   // e5m2 ulp 2^-2
  const std::vector<double> values = {above_f16_tie, above_bf16_tie, above_e4m3_tie, above_e5m2_tie};
  EXPECT_EQ(cast_values<uint16_t>(DType::kFloat64, values, DType::kFloat16)[0], 0x3C01);
  EXPECT_EQ(cast_values<uint16_t>(DType::kFloat64, values, DType::kBFloat16)[1], 0x3F81);  // ml_dtypes: 0x3F80
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64, values, DType::kFloat8E4M3FN)[2], 0x39);  // ml_dtypes: 0x38
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64, values, DType::kFloat8E5M2)[3], 0x3D);
  // Exact ties from float64, and values far outside the target's range.
  const std::vector<double> more = {1 + std::ldexp(1, -11), 1 + 3 * std::ldexp(1, -11), std::ldexp(1, -25) + std::ldexp(1, -60),
                                    1e-320, -1e300, std::numeric_limits<double>::max()};
  EXPECT_EQ(cast_values<uint16_t>(DType::kFloat64, more, DType::kFloat16),
            (std::vector<uint16_t>{0x3C00, 0x3C02, 0x0001, 0x0000, 0xFC00, 0x7C00}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64, more, DType::kFloat8E4M3FN),
            (std::vector<uint8_t>{0x38, 0x38, 0x00, 0x00, 0xFF, 0x7F}));
  // float32 by the hardware, also once: 1 + 2^-24 (a tie) + 2^-40 goes up.
  EXPECT_EQ(cast_values<uint32_t>(DType::kFloat64, std::vector<double>{1 + std::ldexp(1, -24) + std::ldexp(1, -40)},
                                  DType::kFloat32)[0],
            0x3F800001u);
}

TEST(CastTest, Float64RoundsOnceToTheNewFloat8s) {
  // Just above a tie of the target (ulp at 1: 2^-3 for e4m3fnuz, 2^-2 for
  // e5m2fnuz), on a tie of float32: rounding once goes up.
  const double values[] = {1 + std::ldexp(1, -4) + std::ldexp(1, -40), 1 + std::ldexp(1, -3) + std::ldexp(1, -40)};
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64, std::vector<double>{values[0]}, DType::kFloat8E4M3FNUZ)[0], 0x41);
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64, std::vector<double>{values[1]}, DType::kFloat8E5M2FNUZ)[0], 0x41);
  // e8m0: 1.5 - 2^-40 is below the tie (1); through float32 it would be the
  // tie 1.5 and round up (ml_dtypes: 0x80). 2^-200 is the smallest, 2^-127
  // (through float32 it would be 0, NaN in e8m0); 1e300 overflows to NaN.
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64,
                                 std::vector<double>{1.5 - std::ldexp(1, -40), 1.5, std::ldexp(1, -200), 1e300, -0.0},
                                 DType::kFloat8E8M0FNU),
            (std::vector<uint8_t>{0x7F, 0x80, 0x00, 0xFF, 0xFF}));
  // fnuz: -0.0 and negative values that round to zero are +0; -inf is NaN.
  const std::vector<double> negatives = {-0.0, -1e-30, -std::numeric_limits<double>::infinity(), -1e300};
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64, negatives, DType::kFloat8E4M3FNUZ),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x80}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64, negatives, DType::kFloat8E5M2FNUZ),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x80}));
}

// ---- integers ----

TEST(CastTest, IntegersToFloatsRoundOnce) {
  // int64 2^60 + 2^36 + 1: float32's ulp there is 2^37, so it rounds up to
  // 2^60 + 2^37 (0x5D800001; numpy agrees). Through a double it would first
  // become the tie 2^60 + 2^36, then 2^60.
  EXPECT_EQ(cast_values<uint32_t>(DType::kInt64, std::vector<int64_t>{(int64_t{1} << 60) + (int64_t{1} << 36) + 1},
                                  DType::kFloat32)[0],
            0x5D800001u);
  // uint64 2^63 + 2^39 + 1 likewise: 2^63 + 2^40.
  EXPECT_EQ(cast_values<uint32_t>(DType::kUInt64, std::vector<uint64_t>{(uint64_t{1} << 63) + (uint64_t{1} << 39) + 1},
                                  DType::kFloat32)[0],
            0x5F000001u);
  // bfloat16: 2^60 + 2^52 + 1 -> 2^60 + 2^53 (ml_dtypes, through float32: 0x5D80).
  EXPECT_EQ(cast_values<uint16_t>(DType::kInt64, std::vector<int64_t>{(int64_t{1} << 60) + (int64_t{1} << 52) + 1},
                                  DType::kBFloat16)[0],
            0x5D81);
  // float16 ties at 2049 (-> 2048) and 2051 (-> 2052); the int64 extremes overflow.
  const std::vector<int64_t> ints = {2049, 2051, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), -3};
  EXPECT_EQ(cast_values<uint16_t>(DType::kInt64, ints, DType::kFloat16),
            (std::vector<uint16_t>{0x6800, 0x6802, 0x7C00, 0xFC00, 0xC200}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kInt64, ints, DType::kFloat8E4M3FN),
            (std::vector<uint8_t>{0x7F, 0x7F, 0x7F, 0xFF, 0xC4}));
  // uint8 255 in e4m3fn: between 240 (0x77) and 256 (0x78), nearer 256.
  EXPECT_EQ(cast_values<uint8_t>(DType::kUInt8, std::vector<uint8_t>{255, 17}, DType::kFloat8E4M3FN),
            (std::vector<uint8_t>{0x78, 0x58}));  // 17 is a tie between 16 (0x58) and 18 (0x59)
  // e8m0 (ml_dtypes 0.5.4 astype): 0 and negatives are NaN; ties round up
  // (3 -> 4, 6 -> 8, 2^62 + 2^61 -> 2^63), others to the nearer power of two.
  EXPECT_EQ(cast_values<uint8_t>(DType::kInt64,
                                 std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7, -1, 255, (int64_t{1} << 62) + (int64_t{1} << 61)},
                                 DType::kFloat8E8M0FNU),
            (std::vector<uint8_t>{0xFF, 0x7F, 0x80, 0x81, 0x81, 0x82, 0x82, 0xFF, 0x87, 0xBE}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kUInt8, std::vector<uint8_t>{0, 1, 3, 255}, DType::kFloat8E8M0FNU),
            (std::vector<uint8_t>{0xFF, 0x7F, 0x81, 0x87}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kBool, std::vector<uint8_t>{0, 1}, DType::kFloat8E8M0FNU),
            (std::vector<uint8_t>{0xFF, 0x7F}));
  // float64 around 2^53: 2^53 + 1 is a tie (-> 2^53), 2^53 + 3 too (-> 2^53 + 4).
  EXPECT_EQ(cast_values<uint64_t>(DType::kInt64, std::vector<int64_t>{(int64_t{1} << 53) + 1, (int64_t{1} << 53) + 3},
                                  DType::kFloat64),
            (std::vector<uint64_t>{0x4340000000000000, 0x4340000000000002}));
}

TEST(CastTest, FloatToIntegerTruncatesSaturatesAndMapsNaNToZero) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {nan, -nan, inf, -inf, 1e300, -1e300, 2.9, -2.9, -0.5, 127.9, 128.0, -128.9, -129.0};
  EXPECT_EQ(cast_values<int8_t>(DType::kFloat64, values, DType::kInt8),
            (std::vector<int8_t>{0, 0, 127, -128, 127, -128, 2, -2, 0, 127, 127, -128, -128}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat64, values, DType::kUInt8),
            (std::vector<uint8_t>{0, 0, 255, 0, 255, 0, 2, 0, 0, 127, 128, 0, 0}));
  const double two63 = std::ldexp(1, 63);
  EXPECT_EQ(cast_values<int64_t>(DType::kFloat64, std::vector<double>{two63, -two63, 9.2e18, -9.2e18}, DType::kInt64),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                  9200000000000000000, -9200000000000000000}));
  EXPECT_EQ(cast_values<uint64_t>(DType::kFloat64, std::vector<double>{2 * two63, 1.8e19, -1.0, nan}, DType::kUInt64),
            (std::vector<uint64_t>{std::numeric_limits<uint64_t>::max(), 18000000000000000000u, 0, 0}));
  EXPECT_EQ(cast_values<int32_t>(DType::kFloat32, std::vector<float>{2147483648.0f, -2147483648.0f, 2147483520.0f, -0.0f},
                                 DType::kInt32),
            (std::vector<int32_t>{2147483647, -2147483647 - 1, 2147483520, 0}));
  // From the small floats and complex too.
  EXPECT_EQ(cast_values<int8_t>(DType::kFloat16, std::vector<uint16_t>{0x7C00, 0xFC00, 0x7E00, 0xC248}, DType::kInt8),
            (std::vector<int8_t>{127, -128, 0, -3}));
  EXPECT_EQ(cast_values<int16_t>(DType::kBFloat16, std::vector<uint16_t>{0x7FC0, 0x4780}, DType::kInt16),
            (std::vector<int16_t>{0, 32767}));  // NaN, 65536
  EXPECT_EQ(cast_values<int32_t>(DType::kComplex64, std::vector<float>{1e10f, 5.0f}, DType::kInt32),
            (std::vector<int32_t>{2147483647}));
}

TEST(CastTest, IntegersWrapAround) {
  EXPECT_EQ(cast_values<int8_t>(DType::kInt64, std::vector<int64_t>{300, -1, -129, (int64_t{1} << 40) + 5}, DType::kInt8),
            (std::vector<int8_t>{44, -1, 127, 5}));
  EXPECT_EQ(cast_values<uint16_t>(DType::kInt64, std::vector<int64_t>{-1, 65537}, DType::kUInt16),
            (std::vector<uint16_t>{0xFFFF, 1}));
  const std::vector<uint64_t> big = {std::numeric_limits<uint64_t>::max(), uint64_t{1} << 63};
  EXPECT_EQ(cast_values<int64_t>(DType::kUInt64, big, DType::kInt64),
            (std::vector<int64_t>{-1, std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(cast_values<int32_t>(DType::kUInt64, big, DType::kInt32), (std::vector<int32_t>{-1, 0}));
  EXPECT_EQ(cast_values<int32_t>(DType::kUInt32, std::vector<uint32_t>{0x80000000u}, DType::kInt32),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kInt16, std::vector<int16_t>{-32768, 511}, DType::kUInt8),
            (std::vector<uint8_t>{0, 255}));
  EXPECT_EQ(cast_values<int16_t>(DType::kUInt16, std::vector<uint16_t>{65535}, DType::kInt16), (std::vector<int16_t>{-1}));
  EXPECT_EQ(cast_values<uint64_t>(DType::kInt8, std::vector<int8_t>{-1}, DType::kUInt64),
            (std::vector<uint64_t>{std::numeric_limits<uint64_t>::max()}));
}

TEST(CastTest, BoolIsNonzeroAndZeroOrOne) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cast_values<uint8_t>(DType::kFloat32, std::vector<float>{0.0f, -0.0f, 0.5f, nan, -1e-45f}, DType::kBool),
            (std::vector<uint8_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kInt16, std::vector<int16_t>{0, 256, -1}, DType::kBool),
            (std::vector<uint8_t>{0, 1, 1}));  // 256 is true, not wrapped to 0
  EXPECT_EQ(cast_values<uint8_t>(DType::kComplex64, std::vector<float>{0, 0, 0, 1, 0, -0.0f}, DType::kBool),
            (std::vector<uint8_t>{0, 1, 0}));
  const std::vector<uint8_t> flags = {0, 1, 2};  // any nonzero byte reads as true
  EXPECT_EQ(cast_values<int32_t>(DType::kBool, flags, DType::kInt32), (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(cast_values<uint16_t>(DType::kBool, flags, DType::kFloat16), (std::vector<uint16_t>{0, 0x3C00, 0x3C00}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kBool, flags, DType::kFloat8E4M3FN), (std::vector<uint8_t>{0, 0x38, 0x38}));
}

TEST(CastTest, ComplexTakesTheRealPartAndGivesZeroImaginary) {
  const std::vector<float> c64 = {1.5f, -2.0f, 300.5f, 7.0f};
  EXPECT_EQ(cast_values<float>(DType::kComplex64, c64, DType::kFloat32), (std::vector<float>{1.5f, 300.5f}));
  EXPECT_EQ(cast_values<int32_t>(DType::kComplex64, c64, DType::kInt32), (std::vector<int32_t>{1, 300}));
  EXPECT_EQ(cast_values<uint8_t>(DType::kComplex64, c64, DType::kUInt8), (std::vector<uint8_t>{1, 255}));
  EXPECT_EQ(cast_values<uint16_t>(DType::kComplex64, c64, DType::kFloat16), (std::vector<uint16_t>{0x3E00, 0x5CB2}));
  EXPECT_EQ(cast_values<double>(DType::kComplex64, c64, DType::kComplex128), (std::vector<double>{1.5, -2, 300.5, 7}));
  EXPECT_EQ(cast_values<float>(DType::kComplex128, std::vector<double>{1e300, 1.0}, DType::kComplex64),
            (std::vector<float>{std::numeric_limits<float>::infinity(), 1.0f}));
  EXPECT_EQ(cast_values<float>(DType::kFloat64, std::vector<double>{2.5}, DType::kComplex64), (std::vector<float>{2.5f, 0}));
  EXPECT_EQ(cast_values<double>(DType::kInt64, std::vector<int64_t>{-3}, DType::kComplex128), (std::vector<double>{-3, 0}));
  EXPECT_EQ(cast_values<float>(DType::kBFloat16, std::vector<uint16_t>{0xC040}, DType::kComplex64),
            (std::vector<float>{-3.0f, 0}));
}

// ---- every pair ----

// The little-endian bits of 0, 1 and -1 in each dtype (hand-derived: 1.0 is
// a biased exponent with a zero mantissa: float16 15 << 10, bfloat16 127 << 7,
// e4m3fn 7 << 3, e5m2 15 << 2); complex types hold the real part in the low
// bits. -1 in bool is true; in an unsigned type, all ones.
struct Bits {
  uint64_t low = 0, high = 0;
};
Bits bits_of(DType dtype, int value) {
  const uint64_t all_ones = dtype_size(dtype) >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * dtype_size(dtype))) - 1;
  // e8m0 (2^(b - 127)): 1.0 is 127; it has no zero and no sign: 0 and -1 are NaN.
  if (dtype == DType::kFloat8E8M0FNU) return {value == 1 ? 0x7Fu : 0xFFu};
  if (value == 0) return {};
  const bool negative = value < 0;
  switch (dtype) {
    case DType::kBool: return {1};
    case DType::kFloat16: return {negative ? 0xBC00u : 0x3C00u};
    case DType::kBFloat16: return {negative ? 0xBF80u : 0x3F80u};
    case DType::kFloat32:
    case DType::kComplex64: return {negative ? 0xBF800000u : 0x3F800000u};
    case DType::kFloat64:
    case DType::kComplex128: return {negative ? 0xBFF0000000000000u : 0x3FF0000000000000u};
    case DType::kFloat8E4M3FN: return {negative ? 0xB8u : 0x38u};
    case DType::kFloat8E5M2: return {negative ? 0xBCu : 0x3Cu};
    // fnuz: bias 8 / 16, so 1.0 is 8 << 3 and 16 << 2, both 0x40.
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2FNUZ: return {negative ? 0xC0u : 0x40u};
    default: return {negative ? all_ones : 1};  // integers
  }
}

Tensor tensor_of_bits(DType dtype, const std::vector<Bits>& values) {
  const size_t size = dtype_size(dtype);
  std::vector<std::byte> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    std::memcpy(&bytes[i * size], &values[i].low, std::min<size_t>(size, 8));
    if (size == 16) std::memcpy(&bytes[i * size + 8], &values[i].high, 8);
  }
  return Tensor::from_bytes(dtype, {static_cast<int64_t>(values.size())}, bytes);
}

bool is_unsigned(DType dtype) {
  return dtype == DType::kUInt8 || dtype == DType::kUInt16 || dtype == DType::kUInt32 || dtype == DType::kUInt64;
}
bool is_integer(DType dtype) {
  return is_unsigned(dtype) || dtype == DType::kInt8 || dtype == DType::kInt16 || dtype == DType::kInt32 ||
         dtype == DType::kInt64;
}

// Every dtype but the packed float4 pairs, which cast() refuses (see
// PackedFloat4PairsAreNotConverted).
TEST(CastTest, EveryPairOfDtypesOnZeroOneAndMinusOne) {
  for (const DTypeInfo& from : all_dtypes()) {
    if (from.dtype == DType::kFloat4E2M1FNx2) continue;
    std::vector<int> values = {0, 1};
    if (from.dtype == DType::kFloat8E8M0FNU) values = {1};  // no zero, no sign
    if (from.dtype != DType::kBool && from.dtype != DType::kFloat8E8M0FNU && !is_unsigned(from.dtype)) {
      values.push_back(-1);
    }
    std::vector<Bits> source;
    for (int value : values) source.push_back(bits_of(from.dtype, value));
    const Tensor in = tensor_of_bits(from.dtype, source);
    for (const DTypeInfo& to : all_dtypes()) {
      if (to.dtype == DType::kFloat4E2M1FNx2) continue;
      SCOPED_TRACE(std::string(from.name) + " -> " + std::string(to.name));
      std::vector<Bits> expected;
      for (int value : values) {
        // -1 from a float saturates at an unsigned type's 0; from an integer it wraps.
        const bool saturates = value < 0 && is_unsigned(to.dtype) && !is_integer(from.dtype);
        expected.push_back(saturates ? Bits{} : bits_of(to.dtype, value));
      }
      const Tensor out = cast(in, to.dtype);
      ASSERT_EQ(out.dtype(), to.dtype);
      ASSERT_EQ(out.shape(), in.shape());
      EXPECT_TRUE(out.equals(tensor_of_bits(to.dtype, expected)));
      if (cast_is_exact(from.dtype, to.dtype)) {
        EXPECT_TRUE(cast(out, from.dtype).equals(in)) << "round trip";
      }
    }
  }
}

TEST(CastTest, IsExactKnowsWhichCastsLoseNothing) {
  const std::pair<DType, DType> exact[] = {
      {DType::kBFloat16, DType::kFloat32},  {DType::kFloat16, DType::kFloat32},   {DType::kInt32, DType::kInt64},
      {DType::kInt32, DType::kFloat64},     {DType::kUInt8, DType::kBFloat16},    {DType::kInt8, DType::kFloat16},
      {DType::kUInt16, DType::kInt32},      {DType::kFloat8E4M3FN, DType::kFloat16}, {DType::kFloat8E5M2, DType::kFloat16},
      {DType::kFloat8E4M3FN, DType::kBFloat16}, {DType::kFloat32, DType::kComplex64}, {DType::kComplex64, DType::kComplex128},
      {DType::kBool, DType::kFloat8E5M2},   {DType::kInt16, DType::kFloat32},     {DType::kFloat64, DType::kFloat64},
      {DType::kFloat8E4M3FNUZ, DType::kFloat16}, {DType::kFloat8E5M2FNUZ, DType::kFloat16},
      {DType::kFloat8E5M2FNUZ, DType::kBFloat16}, {DType::kFloat8E8M0FNU, DType::kFloat32},
      {DType::kFloat8E8M0FNU, DType::kBFloat16}, {DType::kFloat8E8M0FNU, DType::kComplex64},
      {DType::kBool, DType::kFloat8E4M3FNUZ}, {DType::kFloat8E8M0FNU, DType::kFloat8E8M0FNU},
      {DType::kFloat4E2M1FNx2, DType::kFloat4E2M1FNx2}};
  for (const auto& [from, to] : exact) EXPECT_TRUE(cast_is_exact(from, to)) << dtype_name(from) << " -> " << dtype_name(to);
  const std::pair<DType, DType> lossy[] = {
      {DType::kFloat32, DType::kBFloat16},  {DType::kFloat16, DType::kBFloat16},  {DType::kBFloat16, DType::kFloat16},
      {DType::kInt64, DType::kFloat64},     {DType::kInt32, DType::kFloat32},     {DType::kInt16, DType::kFloat16},
      {DType::kInt8, DType::kUInt8},        {DType::kUInt8, DType::kInt8},        {DType::kUInt64, DType::kInt64},
      {DType::kFloat32, DType::kInt64},     {DType::kInt8, DType::kBool},         {DType::kComplex64, DType::kFloat64},
      {DType::kFloat8E4M3FN, DType::kFloat8E5M2}, {DType::kFloat8E5M2, DType::kFloat8E4M3FN},
      {DType::kFloat64, DType::kComplex64}, {DType::kUInt8, DType::kFloat8E4M3FN},
      // -0 and infinities have no fnuz pattern; e8m0 has no zero, no sign,
      // and float16 lacks its range.
      {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ}, {DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ},
      {DType::kFloat8E4M3FNUZ, DType::kFloat8E4M3FN}, {DType::kFloat16, DType::kFloat8E5M2FNUZ},
      {DType::kBool, DType::kFloat8E8M0FNU},  {DType::kFloat8E5M2, DType::kFloat8E8M0FNU},
      {DType::kFloat8E8M0FNU, DType::kFloat16}, {DType::kFloat8E8M0FNU, DType::kFloat8E5M2},
      {DType::kFloat4E2M1FNx2, DType::kUInt8}, {DType::kUInt8, DType::kFloat4E2M1FNx2}};
  for (const auto& [from, to] : lossy) EXPECT_FALSE(cast_is_exact(from, to)) << dtype_name(from) << " -> " << dtype_name(to);
}

TEST(CastTest, PackedFloat4PairsAreNotConverted) {
  const Tensor packed = Tensor::from_values<uint8_t>(DType::kFloat4E2M1FNx2, {2}, std::vector<uint8_t>{0x12, 0xF0});
  EXPECT_TRUE(cast(packed, DType::kFloat4E2M1FNx2).same_memory(packed));
  const Tensor bytes = Tensor::from_values<uint8_t>(DType::kUInt8, {2}, std::vector<uint8_t>{0x12, 0xF0});
  for (DType other : {DType::kUInt8, DType::kFloat32, DType::kFloat8E4M3FN, DType::kBool}) {
    for (const bool from_packed : {true, false}) {
      try {
        from_packed ? cast(packed, other) : cast(other == DType::kUInt8 ? bytes : cast(bytes, other),
                                                 DType::kFloat4E2M1FNx2);
        ADD_FAILURE() << "converted " << dtype_name(other) << (from_packed ? " from" : " to") << " float4 pairs";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
        EXPECT_NE(std::string(error.what()).find("float4_e2m1fn_x2"), std::string::npos) << error.what();
      }
    }
  }
}

// ---- tensors ----

TEST(CastTest, ManyThreadsGiveTheSameBytesAsOne) {
  // 3.2 M float32 (12.8 MB, over the parallel threshold) of assorted bit
  // patterns, NaNs and infinities included.
  const size_t count = 5 * 640001;
  std::vector<uint32_t> bits(count);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (uint32_t& value : bits) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    value = static_cast<uint32_t>(state >> 32);
  }
  const Tensor in = Tensor::from_values<uint32_t>(DType::kFloat32, {static_cast<int64_t>(count / 5), 5}, bits);
  for (DType to : {DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3FN, DType::kInt8, DType::kFloat64}) {
    const Tensor one = cast(in, to, 1);
    const Tensor four = cast(in, to, 4);
    EXPECT_EQ(four.shape(), in.shape());
    EXPECT_TRUE(four.equals(one)) << dtype_name(to);
  }
  // The default thread count too, and back from float64.
  const Tensor wide = cast(in, DType::kFloat64, 0);
  EXPECT_TRUE(cast(wide, DType::kFloat32, 3).equals(cast(wide, DType::kFloat32, 1)));
}

TEST(CastTest, SpecTensorIsAnError) {
  const Tensor spec = Tensor::spec(DType::kFloat32, {2, 3});
  for (DType to : {DType::kBFloat16, DType::kFloat32}) {
    try {
      cast(spec, to);
      ADD_FAILURE() << "no error for " << dtype_name(to);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    }
  }
}

TEST(CastTest, SameDtypeSharesTheMemoryAndShapesAreKept) {
  const Tensor in = Tensor::from_values<float>(DType::kFloat32, {2, 2}, std::vector<float>{1, 2, 3, 4});
  const Tensor same = cast(in, DType::kFloat32);
  EXPECT_TRUE(same.same_memory(in));
  const Tensor other = cast(in, DType::kFloat64);
  EXPECT_FALSE(other.same_memory(in));
  EXPECT_EQ(other.shape(), (Shape{2, 2}));
  EXPECT_TRUE(other.buffer().writable());
  // 0-d and empty tensors.
  const Tensor scalar = cast(Tensor::from_values<int32_t>(DType::kInt32, {}, std::vector<int32_t>{-7}), DType::kFloat16);
  EXPECT_EQ(scalar.shape(), Shape{});
  EXPECT_EQ(values_of<uint16_t>(scalar), (std::vector<uint16_t>{0xC700}));  // -7 = -1.75 * 2^2
  const Tensor empty = cast(Tensor::zeros(DType::kFloat32, {0, 3}), DType::kComplex128);
  EXPECT_EQ(empty.shape(), (Shape{0, 3}));
  EXPECT_EQ(empty.nbytes(), 0u);
}

}  // namespace
}  // namespace ckpt
