#include "ckpt/diff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ckpt/error.h"

namespace ckpt {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <class T>
Tensor tensor_of(DType dtype, Shape shape, std::vector<T> values) {
  return Tensor::from_values<T>(dtype, std::move(shape), values);
}

Tensor floats(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return tensor_of<float>(DType::kFloat32, {n}, std::move(values));
}

Tree one_leaf(Tree value) {
  Tree tree = Tree::map();
  tree.set("x", std::move(value));
  return tree;
}

// Diffs two one-element tensors of `dtype` given by their raw encodings and
// returns the report.
template <class Bits>
DiffReport diff_encodings(DType dtype, Bits a, Bits b, DiffOptions options = {}) {
  return diff(one_leaf(tensor_of<Bits>(dtype, {1}, {a})), one_leaf(tensor_of<Bits>(dtype, {1}, {b})),
              options);
}

// The max abs diff of two single-element encodings; expects them to differ.
template <class Bits>
double distance(DType dtype, Bits a, Bits b) {
  const DiffReport report = diff_encodings(dtype, a, b);
  EXPECT_EQ(report.value_differences.size(), 1u) << "encodings " << +a << " and " << +b;
  if (report.value_differences.size() != 1) return -1.0;
  EXPECT_EQ(report.value_differences[0].differing_elements, 1u);
  return report.value_differences[0].max_abs_diff;
}

// True if the two encodings count as equal elements (bytes may differ).
template <class Bits>
bool equal_elements(DType dtype, Bits a, Bits b) {
  const DiffReport report = diff_encodings(dtype, a, b);
  return report.identical();
}

// ---- Trees and names ----

TEST(DiffTest, IdenticalTreesAreIdentical) {
  Tree a = Tree::map();
  a.set("w", floats({1, 2, 3}));
  a.set("epoch", int64_t{3});
  a.set("name", "run");
  a.set("nothing", Tree(nullptr));
  const DiffReport report = diff(a, a);
  EXPECT_TRUE(report.identical());
  EXPECT_EQ(report.compared, 4u);
  EXPECT_TRUE(report.within_tolerance.empty());
}

TEST(DiffTest, NamesOnlyInOneTree) {
  Tree a = Tree::map();
  a.set("shared", floats({1}));
  a.set("only_a", floats({1}));
  Tree b = Tree::map();
  b.set("shared", floats({1}));
  b.set("only_b", int64_t{1});
  const DiffReport report = diff(a, b);
  EXPECT_FALSE(report.identical());
  EXPECT_EQ(report.only_in_a, std::vector<std::string>{"only_a"});
  EXPECT_EQ(report.only_in_b, std::vector<std::string>{"only_b"});
  EXPECT_EQ(report.compared, 1u);
}

TEST(DiffTest, ComparesByDottedNameNotByNesting) {
  Tree flat = Tree::map();
  flat.set("layer.weight", floats({1, 2}));
  Tree layer = Tree::map();
  layer.set("weight", floats({1, 2}));
  Tree nested = Tree::map();
  nested.set("layer", layer);
  EXPECT_TRUE(diff(flat, nested).identical());
}

TEST(DiffTest, IntegerKeysAndListPositionsAreNames) {
  Tree slot = Tree::map();
  slot.set("step", int64_t{5});
  Tree state = Tree::map();
  state.set(int64_t{0}, slot);
  Tree a = Tree::map();
  a.set("state", state);
  Tree b = Tree::map();
  Tree list = Tree::list();
  Tree slot_b = Tree::map();
  slot_b.set("step", int64_t{6});
  list.push_back(slot_b);
  b.set("state", list);
  const DiffReport report = diff(a, b);
  ASSERT_EQ(report.leaf_differences.size(), 1u);
  EXPECT_EQ(report.leaf_differences[0].name, "state.0.step");
  EXPECT_EQ(report.leaf_differences[0].a.integer(), 5);
  EXPECT_EQ(report.leaf_differences[0].b.integer(), 6);
}

TEST(DiffTest, DTypeAndShapeMismatches) {
  Tree a = Tree::map();
  a.set("dtype", floats({1, 2}));
  a.set("shape", tensor_of<float>(DType::kFloat32, {2, 3}, std::vector<float>(6, 0)));
  a.set("both", floats({1, 2}));
  Tree b = Tree::map();
  b.set("dtype", tensor_of<int32_t>(DType::kInt32, {2}, {1, 2}));
  b.set("shape", tensor_of<float>(DType::kFloat32, {3, 2}, std::vector<float>(6, 0)));
  b.set("both", tensor_of<double>(DType::kFloat64, {1}, {1}));
  const DiffReport report = diff(a, b);
  ASSERT_EQ(report.dtype_mismatched.size(), 2u);
  EXPECT_EQ(report.dtype_mismatched[0].name, "dtype");
  EXPECT_EQ(report.dtype_mismatched[0].a, DType::kFloat32);
  EXPECT_EQ(report.dtype_mismatched[0].b, DType::kInt32);
  EXPECT_EQ(report.dtype_mismatched[1].name, "both");
  ASSERT_EQ(report.shape_mismatched.size(), 2u);
  EXPECT_EQ(report.shape_mismatched[0].name, "shape");
  EXPECT_EQ(report.shape_mismatched[0].a, (Shape{2, 3}));
  EXPECT_EQ(report.shape_mismatched[0].b, (Shape{3, 2}));
  EXPECT_EQ(report.shape_mismatched[1].name, "both");
  EXPECT_TRUE(report.value_differences.empty());
  EXPECT_FALSE(report.identical());
}

TEST(DiffTest, KindMismatches) {
  Tree a = Tree::map();
  a.set("t", floats({1}));
  a.set("i", int64_t{1});
  Tree b = Tree::map();
  b.set("t", int64_t{1});
  b.set("i", 1.0);
  const DiffReport report = diff(a, b);
  ASSERT_EQ(report.kind_mismatched.size(), 2u);
  EXPECT_EQ(report.kind_mismatched[0].name, "t");
  EXPECT_EQ(report.kind_mismatched[0].a, Tree::Kind::kTensor);
  EXPECT_EQ(report.kind_mismatched[0].b, Tree::Kind::kInt);
  EXPECT_EQ(report.kind_mismatched[1].a, Tree::Kind::kInt);
  EXPECT_EQ(report.kind_mismatched[1].b, Tree::Kind::kFloat);
  EXPECT_FALSE(report.identical());
}

TEST(DiffTest, NonTensorLeafDifferences) {
  Tree a = Tree::map();
  Tree b = Tree::map();
  a.set("bool", true);
  b.set("bool", false);
  a.set("int", int64_t{3});
  b.set("int", int64_t{4});
  a.set("float", 0.5);
  b.set("float", 0.25);
  a.set("string", "x");
  b.set("string", "y");
  a.set("bytes", Bytes{"\x01"});
  b.set("bytes", Bytes{"\x02"});
  a.set("none", Tree(nullptr));
  b.set("none", Tree(nullptr));
  a.set("same", "s");
  b.set("same", "s");
  const DiffReport report = diff(a, b);
  std::vector<std::string> names;
  for (const auto& difference : report.leaf_differences) names.push_back(difference.name);
  EXPECT_EQ(names, (std::vector<std::string>{"bool", "int", "float", "string", "bytes"}));
  EXPECT_EQ(report.leaf_differences[2].a.real(), 0.5);
  EXPECT_EQ(report.leaf_differences[2].b.real(), 0.25);
}

TEST(DiffTest, FloatLeavesFollowTheElementRule) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(diff(one_leaf(nan), one_leaf(-nan)).identical());
  EXPECT_FALSE(diff(one_leaf(nan), one_leaf(1.0)).identical());
  EXPECT_TRUE(diff(one_leaf(1.0), one_leaf(1.05), {.atol = 0.1}).identical());
  EXPECT_FALSE(diff(one_leaf(int64_t{1}), one_leaf(int64_t{3}), {.atol = 1.0}).identical());
}

// ---- Tensor values ----

TEST(DiffTest, CountsDifferingElementsAndMaxAbsDiff) {
  const DiffReport report = diff(one_leaf(floats({1, 2, 3, 4})), one_leaf(floats({1, 2.5, 3, 5})));
  ASSERT_EQ(report.value_differences.size(), 1u);
  const TensorDifference& difference = report.value_differences[0];
  EXPECT_EQ(difference.name, "x");
  EXPECT_EQ(difference.dtype, DType::kFloat32);
  EXPECT_EQ(difference.max_abs_diff, 1.0);
  EXPECT_EQ(difference.differing_elements, 2u);
  EXPECT_EQ(difference.numel, 4u);
}

TEST(DiffTest, AtolMakesSmallDifferencesEqual) {
  const Tree a = one_leaf(floats({1, 2, 3}));
  const Tree b = one_leaf(floats({1, 2.25, 3}));
  const DiffReport loose = diff(a, b, {.atol = 0.5});
  EXPECT_TRUE(loose.identical());
  EXPECT_EQ(loose.within_tolerance, std::vector<std::string>{"x"});
  const DiffReport tight = diff(a, b, {.atol = 0.125});
  ASSERT_EQ(tight.value_differences.size(), 1u);
  EXPECT_EQ(tight.value_differences[0].max_abs_diff, 0.25);
  EXPECT_EQ(tight.value_differences[0].differing_elements, 1u);
}

TEST(DiffTest, RejectsNegativeOrNanAtol) {
  const Tree a = one_leaf(floats({1}));
  for (double atol : {-1.0, std::numeric_limits<double>::quiet_NaN()}) {
    try {
      diff(a, a, {.atol = atol});
      ADD_FAILURE() << "atol " << atol << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    }
  }
}

TEST(DiffTest, NanAgainstNanIsEqualNanAgainstNumberDiffers) {
  // float32 quiet NaN 0x7FC00000, another payload 0x7FC00001, negative 0xFFC00000.
  EXPECT_TRUE(equal_elements<uint32_t>(DType::kFloat32, 0x7FC00000u, 0x7FC00001u));
  EXPECT_TRUE(equal_elements<uint32_t>(DType::kFloat32, 0x7FC00000u, 0xFFC00000u));
  const DiffReport report = diff_encodings<uint32_t>(DType::kFloat32, 0x7FC00000u, 0x3F800000u);
  ASSERT_EQ(report.value_differences.size(), 1u);
  EXPECT_TRUE(std::isnan(report.value_differences[0].max_abs_diff));
  EXPECT_EQ(report.value_differences[0].differing_elements, 1u);
  // A NaN mismatch stays a difference whatever the tolerance.
  EXPECT_FALSE(diff_encodings<uint32_t>(DType::kFloat32, 0x7FC00000u, 0x3F800000u, {.atol = 1e300})
                   .identical());
}

TEST(DiffTest, NanPayloadDifferenceIsReportedWithinTolerance) {
  const DiffReport report = diff_encodings<uint32_t>(DType::kFloat32, 0x7FC00000u, 0x7FC00001u);
  EXPECT_TRUE(report.identical());
  EXPECT_EQ(report.within_tolerance, std::vector<std::string>{"x"});
}

TEST(DiffTest, SignedZerosAreEqual) {
  EXPECT_TRUE(equal_elements<uint32_t>(DType::kFloat32, 0x00000000u, 0x80000000u));
}

TEST(DiffTest, Infinities) {
  // float32 +inf 0x7F800000, -inf 0xFF800000, 1.0 0x3F800000.
  EXPECT_TRUE(equal_elements<uint32_t>(DType::kFloat32, 0x7F800000u, 0x7F800000u));
  EXPECT_EQ(distance<uint32_t>(DType::kFloat32, 0x7F800000u, 0x3F800000u), kInf);
  EXPECT_EQ(distance<uint32_t>(DType::kFloat32, 0x7F800000u, 0xFF800000u), kInf);
}

TEST(DiffTest, Float64) {
  EXPECT_EQ(distance<double>(DType::kFloat64, 1.5, -2.0), 3.5);
}

// bfloat16: the top 16 bits of a float32. 0x3F80 = 1.0, 0xC000 = -2.0,
// 0x7F80 = +inf, 0x7FC0 = NaN.
TEST(DiffTest, BFloat16Decoding) {
  EXPECT_EQ(distance<uint16_t>(DType::kBFloat16, 0x3F80, 0x0000), 1.0);
  EXPECT_EQ(distance<uint16_t>(DType::kBFloat16, 0xC000, 0x0000), 2.0);
  EXPECT_EQ(distance<uint16_t>(DType::kBFloat16, 0x3F80, 0xC000), 3.0);
  EXPECT_EQ(distance<uint16_t>(DType::kBFloat16, 0x7F80, 0x3F80), kInf);
  EXPECT_TRUE(std::isnan(distance<uint16_t>(DType::kBFloat16, 0x7FC0, 0x3F80)));
  EXPECT_TRUE(equal_elements<uint16_t>(DType::kBFloat16, 0x7FC0, 0xFFC1));
}

// IEEE binary16: 0x3C00 = 1.0, 0x7BFF = 65504 (largest), 0x0001 = 2^-24
// (smallest subnormal), 0x0400 = 2^-14 (smallest normal), 0x7C00 = +inf,
// 0x7E00 and 0x7C01 = NaN.
TEST(DiffTest, Float16Decoding) {
  EXPECT_EQ(distance<uint16_t>(DType::kFloat16, 0x3C00, 0x0000), 1.0);
  EXPECT_EQ(distance<uint16_t>(DType::kFloat16, 0xBC00, 0x3C00), 2.0);
  EXPECT_EQ(distance<uint16_t>(DType::kFloat16, 0x7BFF, 0x0000), 65504.0);
  EXPECT_EQ(distance<uint16_t>(DType::kFloat16, 0x0001, 0x0000), std::ldexp(1.0, -24));
  EXPECT_EQ(distance<uint16_t>(DType::kFloat16, 0x0400, 0x0000), std::ldexp(1.0, -14));
  EXPECT_EQ(distance<uint16_t>(DType::kFloat16, 0x3555, 0x0000), 0.333251953125);
  EXPECT_EQ(distance<uint16_t>(DType::kFloat16, 0x7C00, 0x7BFF), kInf);
  EXPECT_TRUE(std::isnan(distance<uint16_t>(DType::kFloat16, 0x7E00, 0x0000)));
  EXPECT_TRUE(std::isnan(distance<uint16_t>(DType::kFloat16, 0x7C01, 0x0000)));
  EXPECT_TRUE(equal_elements<uint16_t>(DType::kFloat16, 0x7E00, 0x7C01));
}

// OCP FP8 E4M3FN: bias 7, no infinities; 0x38 = 1.0, 0x7E = 448 (largest),
// 0x78 = 256 (exponent 15 is finite), 0x01 = 2^-9 (smallest subnormal),
// 0x08 = 2^-6 (smallest normal), S.1111.111 (0x7F, 0xFF) = NaN.
TEST(DiffTest, Float8E4M3FNDecoding) {
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FN, 0x38, 0x00), 1.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FN, 0xB8, 0x38), 2.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FN, 0x7E, 0x00), 448.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FN, 0x78, 0x00), 256.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FN, 0x7C, 0x00), 384.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FN, 0x01, 0x00), std::ldexp(1.0, -9));
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FN, 0x08, 0x00), std::ldexp(1.0, -6));
  EXPECT_TRUE(std::isnan(distance<uint8_t>(DType::kFloat8E4M3FN, 0x7F, 0x00)));
  EXPECT_TRUE(std::isnan(distance<uint8_t>(DType::kFloat8E4M3FN, 0xFF, 0x38)));
  EXPECT_TRUE(equal_elements<uint8_t>(DType::kFloat8E4M3FN, 0x7F, 0xFF));
  EXPECT_TRUE(equal_elements<uint8_t>(DType::kFloat8E4M3FN, 0x00, 0x80));  // ±0
}

// OCP FP8 E5M2: bias 15, IEEE-like; 0x3C = 1.0, 0x7B = 57344 (largest),
// 0x01 = 2^-16 (smallest subnormal), 0x7C = +inf, 0xFC = -inf,
// 0x7D..0x7F = NaN.
TEST(DiffTest, Float8E5M2Decoding) {
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2, 0x3C, 0x00), 1.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2, 0xBC, 0x3C), 2.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2, 0x7B, 0x00), 57344.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2, 0x01, 0x00), std::ldexp(1.0, -16));
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2, 0x3D, 0x3C), 0.25);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2, 0x7C, 0x7B), kInf);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2, 0x7C, 0xFC), kInf);
  EXPECT_TRUE(equal_elements<uint8_t>(DType::kFloat8E5M2, 0xFC, 0xFC));
  EXPECT_TRUE(std::isnan(distance<uint8_t>(DType::kFloat8E5M2, 0x7D, 0x00)));
  EXPECT_TRUE(std::isnan(distance<uint8_t>(DType::kFloat8E5M2, 0x7F, 0x3C)));
  EXPECT_TRUE(equal_elements<uint8_t>(DType::kFloat8E5M2, 0x7D, 0xFE));
}

// Values per ml_dtypes 0.5.4 (astype(float32) of each bit pattern).
TEST(DiffTest, FnuzAndE8M0Decoding) {
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FNUZ, 0x40, 0x00), 1.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FNUZ, 0x7F, 0x00), 240.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FNUZ, 0xC0, 0x40), 2.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E4M3FNUZ, 0x01, 0x00), std::ldexp(1.0, -10));
  EXPECT_TRUE(std::isnan(distance<uint8_t>(DType::kFloat8E4M3FNUZ, 0x80, 0x00)));  // 0x80: NaN, not -0
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2FNUZ, 0x7F, 0x00), 57344.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E5M2FNUZ, 0x01, 0x00), std::ldexp(1.0, -17));
  EXPECT_TRUE(equal_elements<uint8_t>(DType::kFloat8E5M2FNUZ, 0x80, 0x80));
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E8M0FNU, 0x80, 0x7F), 1.0);  // 2 - 1
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E8M0FNU, 0x01, 0x00), std::ldexp(1.0, -127));
  EXPECT_EQ(distance<uint8_t>(DType::kFloat8E8M0FNU, 0xFE, 0x00), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(distance<uint8_t>(DType::kFloat8E8M0FNU, 0xFF, 0x7F)));
}

TEST(DiffTest, PackedFloat4PairsDifferByTheModulus) {
  // Nibbles (ml_dtypes float4_e2m1fn): 0x2 = 1, 0x1 = 0.5, 0x7 = 6, 0xF = -6.
  // 0x12 against 0x00: the pair (1, 0.5) against (0, 0).
  EXPECT_EQ(distance<uint8_t>(DType::kFloat4E2M1FNx2, 0x12, 0x00), std::hypot(1.0, 0.5));
  EXPECT_EQ(distance<uint8_t>(DType::kFloat4E2M1FNx2, 0x07, 0x0F), 12.0);
  EXPECT_EQ(distance<uint8_t>(DType::kFloat4E2M1FNx2, 0x70, 0x00), 6.0);
  EXPECT_TRUE(equal_elements<uint8_t>(DType::kFloat4E2M1FNx2, 0x08, 0x00));  // -0 and +0
}

TEST(DiffTest, IntegersAreComparedExactly) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  // Adjacent values beyond 2^53 are one apart, not zero apart.
  EXPECT_EQ(distance<int64_t>(DType::kInt64, kMax, kMax - 1), 1.0);
  EXPECT_EQ(distance<int64_t>(DType::kInt64, kMax, kMin), 18446744073709551615.0);
  EXPECT_EQ(distance<uint64_t>(DType::kUInt64, ~uint64_t{0}, ~uint64_t{0} - 1), 1.0);
  EXPECT_EQ(distance<uint64_t>(DType::kUInt64, ~uint64_t{0}, 0), 18446744073709551615.0);
  EXPECT_EQ(distance<int8_t>(DType::kInt8, -128, 127), 255.0);
  EXPECT_EQ(distance<uint8_t>(DType::kUInt8, 0, 255), 255.0);
  EXPECT_EQ(distance<int16_t>(DType::kInt16, -3, 4), 7.0);
  EXPECT_EQ(distance<uint16_t>(DType::kUInt16, 65535, 0), 65535.0);
  EXPECT_EQ(distance<int32_t>(DType::kInt32, -2147483647 - 1, 2147483647), 4294967295.0);
  EXPECT_EQ(distance<uint32_t>(DType::kUInt32, 7, 2), 5.0);
}

TEST(DiffTest, Bools) {
  EXPECT_EQ(distance<uint8_t>(DType::kBool, 1, 0), 1.0);
  const DiffReport report = diff(one_leaf(tensor_of<uint8_t>(DType::kBool, {4}, {1, 0, 1, 0})),
                                 one_leaf(tensor_of<uint8_t>(DType::kBool, {4}, {0, 0, 1, 1})));
  ASSERT_EQ(report.value_differences.size(), 1u);
  EXPECT_EQ(report.value_differences[0].differing_elements, 2u);
}

TEST(DiffTest, ComplexDifferenceIsTheModulus) {
  // complex64 (3 + 4i) - (0 + 0i): |3 + 4i| = 5.
  const Tree a = one_leaf(tensor_of<float>(DType::kComplex64, {1}, {3, 4}));
  const Tree b = one_leaf(tensor_of<float>(DType::kComplex64, {1}, {0, 0}));
  const DiffReport report = diff(a, b);
  ASSERT_EQ(report.value_differences.size(), 1u);
  EXPECT_EQ(report.value_differences[0].max_abs_diff, 5.0);
  EXPECT_EQ(report.value_differences[0].differing_elements, 1u);
  EXPECT_EQ(report.value_differences[0].numel, 1u);

  const Tree c = one_leaf(tensor_of<double>(DType::kComplex128, {2}, {1, 1, 5, -12}));
  const Tree d = one_leaf(tensor_of<double>(DType::kComplex128, {2}, {1, 1, 0, 0}));
  const DiffReport wide = diff(c, d);
  ASSERT_EQ(wide.value_differences.size(), 1u);
  EXPECT_EQ(wide.value_differences[0].max_abs_diff, 13.0);
  EXPECT_EQ(wide.value_differences[0].differing_elements, 1u);
}

TEST(DiffTest, ComplexNanParts) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // NaN in the same part on both sides is equal (even with another payload).
  float other_nan;
  const uint32_t other_bits = 0x7FC00005u;
  std::memcpy(&other_nan, &other_bits, sizeof other_nan);
  EXPECT_TRUE(diff(one_leaf(tensor_of<float>(DType::kComplex64, {1}, {nan, 2})),
                   one_leaf(tensor_of<float>(DType::kComplex64, {1}, {other_nan, 2})))
                  .identical());
  const DiffReport report = diff(one_leaf(tensor_of<float>(DType::kComplex64, {1}, {1, nan})),
                                 one_leaf(tensor_of<float>(DType::kComplex64, {1}, {1, 2})));
  ASSERT_EQ(report.value_differences.size(), 1u);
  EXPECT_TRUE(std::isnan(report.value_differences[0].max_abs_diff));
}

TEST(DiffTest, EmptyAndZeroDimTensors) {
  const Tree a = one_leaf(Tensor::zeros(DType::kFloat32, {0, 4}));
  EXPECT_TRUE(diff(a, one_leaf(Tensor::zeros(DType::kFloat32, {0, 4}))).identical());
  const DiffReport shapes = diff(a, one_leaf(Tensor::zeros(DType::kFloat32, {4, 0})));
  EXPECT_EQ(shapes.shape_mismatched.size(), 1u);
  const float one = 1.0f, two = 3.0f;
  const DiffReport scalar =
      diff(one_leaf(Tensor::from_values<float>(DType::kFloat32, {}, std::span(&one, 1))),
           one_leaf(Tensor::from_values<float>(DType::kFloat32, {}, std::span(&two, 1))));
  ASSERT_EQ(scalar.value_differences.size(), 1u);
  EXPECT_EQ(scalar.value_differences[0].max_abs_diff, 2.0);
  EXPECT_EQ(scalar.value_differences[0].numel, 1u);
}

TEST(DiffTest, LargeTensorCountsEveryDifferingElement) {
  std::vector<float> a(100000, 1.0f), b(100000, 1.0f);
  for (size_t i = 0; i < b.size(); i += 10) b[i] = 1.5f;
  b[99999] = -1.0f;
  const DiffReport report = diff(one_leaf(floats(a)), one_leaf(floats(b)));
  ASSERT_EQ(report.value_differences.size(), 1u);
  EXPECT_EQ(report.value_differences[0].differing_elements, 10001u);
  EXPECT_EQ(report.value_differences[0].max_abs_diff, 2.0);
}

TEST(DiffTest, KindNames) {
  EXPECT_EQ(tree_kind_name(Tree::Kind::kTensor), "tensor");
  EXPECT_EQ(tree_kind_name(Tree::Kind::kInt), "int");
  EXPECT_EQ(tree_kind_name(Tree::Kind::kFloat), "float");
  EXPECT_EQ(tree_kind_name(Tree::Kind::kNone), "none");
  EXPECT_EQ(tree_kind_name(Tree::Kind::kBytes), "bytes");
}

}  // namespace
}  // namespace ckpt
