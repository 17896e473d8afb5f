#include "ckpt/dtype.h"

#include <array>

#include "ckpt/error.h"
#include "core/dtype_sets.h"

namespace ckpt {
namespace {

// Codes: safetensors from tensor.rs's Dtype (which has no complex128); numpy descrs from
// numpy/lib/format.py (little-endian); torch names from torch/_tensor_str and
// storage classes from torch/storage.py; TensorFlow codes from
// tensorflow/core/framework/types.proto (TF 2.21: FLOAT8_E4M3FNUZ = 26,
// FLOAT8_E5M2FNUZ = 28; it has no E8M0, and its FLOAT4_E2M1FN = 33 holds one
// value per byte, not torch's packed pairs). The fnuz, e8m0 and float4 rows
// were added later, at the end, with torch 2.13 / safetensors 0.8 names.
constexpr std::array<DTypeInfo, 21> kDTypes = {{
    {DType::kBool, "bool", 1, "BOOL", "|b1", "bool", "BoolStorage", 10},
    {DType::kInt8, "int8", 1, "I8", "|i1", "int8", "CharStorage", 6},
    {DType::kInt16, "int16", 2, "I16", "<i2", "int16", "ShortStorage", 5},
    {DType::kInt32, "int32", 4, "I32", "<i4", "int32", "IntStorage", 3},
    {DType::kInt64, "int64", 8, "I64", "<i8", "int64", "LongStorage", 9},
    {DType::kUInt8, "uint8", 1, "U8", "|u1", "uint8", "ByteStorage", 4},
    {DType::kUInt16, "uint16", 2, "U16", "<u2", "uint16", "", 17},
    {DType::kUInt32, "uint32", 4, "U32", "<u4", "uint32", "", 22},
    {DType::kUInt64, "uint64", 8, "U64", "<u8", "uint64", "", 23},
    {DType::kFloat16, "float16", 2, "F16", "<f2", "float16", "HalfStorage", 19},
    {DType::kBFloat16, "bfloat16", 2, "BF16", "", "bfloat16", "BFloat16Storage", 14},
    {DType::kFloat32, "float32", 4, "F32", "<f4", "float32", "FloatStorage", 1},
    {DType::kFloat64, "float64", 8, "F64", "<f8", "float64", "DoubleStorage", 2},
    {DType::kComplex64, "complex64", 8, "C64", "<c8", "complex64", "ComplexFloatStorage", 8},
    {DType::kComplex128, "complex128", 16, "", "<c16", "complex128", "ComplexDoubleStorage", 18},
    {DType::kFloat8E4M3FN, "float8_e4m3fn", 1, "F8_E4M3", "", "float8_e4m3fn", "", 25},
    {DType::kFloat8E5M2, "float8_e5m2", 1, "F8_E5M2", "", "float8_e5m2", "", 24},
    {DType::kFloat8E4M3FNUZ, "float8_e4m3fnuz", 1, "F8_E4M3FNUZ", "", "float8_e4m3fnuz", "", 26},
    {DType::kFloat8E5M2FNUZ, "float8_e5m2fnuz", 1, "F8_E5M2FNUZ", "", "float8_e5m2fnuz", "", 28},
    {DType::kFloat8E8M0FNU, "float8_e8m0fnu", 1, "F8_E8M0", "", "float8_e8m0fnu", "", -1},
    {DType::kFloat4E2M1FNx2, "float4_e2m1fn_x2", 1, "F4", "", "float4_e2m1fn_x2", "", -1},
}};

// dtype_info() indexes the table by enum value.
constexpr bool in_enum_order() {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(in_enum_order(), "kDTypes must list the dtypes in enum order");

}  // namespace

std::span<const DTypeInfo> all_dtypes() { return kDTypes; }

const DTypeInfo& dtype_info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  if (index >= kDTypes.size()) {
    throw Error(ErrorCode::kInvalidArgument, "invalid dtype value " + std::to_string(index));
  }
  return kDTypes[index];
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view code) {
  if (code.empty()) return std::nullopt;
  for (const DTypeInfo& info : kDTypes) {
    if (info.safetensors == code) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace ckpt

namespace ckpt::detail {

std::vector<DType> numpy_and_ml_dtypes() {
  std::vector<DType> result;
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype != DType::kFloat4E2M1FNx2) result.push_back(info.dtype);
  }
  return result;
}

}  // namespace ckpt::detail
