#pragma once
// DType: the element types of tensors, named as numpy / ml_dtypes name them,
// with each format's code for them.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace ckpt {

enum class DType : uint8_t {
  kBool,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kComplex64,
  kComplex128,
  kFloat8E4M3FN,
  kFloat8E5M2,
  // Appended after the rest so that existing values keep their numbers.
  kFloat8E4M3FNUZ,
  kFloat8E5M2FNUZ,
  kFloat8E8M0FNU,
  // torch.float4_e2m1fn_x2: two float4_e2m1fn values packed in one byte; a
  // tensor's shape counts bytes, as torch's does.
  kFloat4E2M1FNx2,
};

// Everything ckpt knows about one dtype. Codes that a format lacks are empty
// strings (or -1 for numeric codes).
struct DTypeInfo {
  DType dtype;
  std::string_view name;         // numpy / ml_dtypes: "float32", "bfloat16", "float8_e4m3fn"
                                 // (and torch's "float4_e2m1fn_x2", which ml_dtypes lacks)
  size_t size;                   // bytes per element
  std::string_view safetensors;  // "F32", "BF16", "F8_E4M3" ("F4" counts values, not bytes:
                                 // its header shape has twice the last dimension)
  std::string_view numpy_descr;  // little-endian descr: "<f4", "|b1"; "" where numpy has none
  std::string_view torch;        // torch dtype attribute: "float32", "bfloat16"
  std::string_view torch_storage;  // legacy typed storage class: "FloatStorage"; "" if untyped only
  int tf_code;                   // tensorflow DataType enum value: FLOAT = 1
};

// All dtypes, in enum order.
std::span<const DTypeInfo> all_dtypes();

const DTypeInfo& dtype_info(DType dtype);
inline std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }
inline size_t dtype_size(DType dtype) { return dtype_info(dtype).size; }

// Looks up a dtype by its numpy / ml_dtypes name ("float32"); nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);
// Looks up a dtype by its safetensors code ("F32"); nullopt if unknown.
std::optional<DType> dtype_from_safetensors(std::string_view code);

}  // namespace ckpt
