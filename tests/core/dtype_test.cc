#include "ckpt/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/dtype_sets.h"

namespace ckpt {
namespace {

TEST(DTypeTest, NamesFollowNumpyAndMlDtypes) {
  EXPECT_EQ(dtype_name(DType::kFloat32), "float32");
  EXPECT_EQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_name(DType::kFloat8E4M3FN), "float8_e4m3fn");
  EXPECT_EQ(dtype_name(DType::kFloat8E5M2), "float8_e5m2");
  EXPECT_EQ(dtype_name(DType::kComplex128), "complex128");
  EXPECT_EQ(dtype_name(DType::kBool), "bool");
  EXPECT_EQ(dtype_name(DType::kFloat8E4M3FNUZ), "float8_e4m3fnuz");
  EXPECT_EQ(dtype_name(DType::kFloat8E5M2FNUZ), "float8_e5m2fnuz");
  EXPECT_EQ(dtype_name(DType::kFloat8E8M0FNU), "float8_e8m0fnu");
  EXPECT_EQ(dtype_name(DType::kFloat4E2M1FNx2), "float4_e2m1fn_x2");  // torch's name: ml_dtypes has no pairs
}

TEST(DTypeTest, NewerDtypesComeAfterTheOriginalSeventeen) {
  // Appended, so the values of the older dtypes stay what they were.
  EXPECT_EQ(static_cast<int>(DType::kFloat8E5M2), 16);
  EXPECT_EQ(static_cast<int>(DType::kFloat8E4M3FNUZ), 17);
  EXPECT_EQ(static_cast<int>(DType::kFloat4E2M1FNx2), 20);
}

TEST(DTypeTest, SizesMatchTheElementWidths) {
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(dtype_size(DType::kInt16), 2u);
  EXPECT_EQ(dtype_size(DType::kUInt32), 4u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kComplex64), 8u);
  EXPECT_EQ(dtype_size(DType::kComplex128), 16u);
  EXPECT_EQ(dtype_size(DType::kFloat8E5M2), 1u);
}

TEST(DTypeTest, TableIsInEnumOrderAndCodesAreUnique) {
  std::set<std::string_view> names, safetensors_codes;
  std::set<int> tf_codes;
  size_t index = 0;
  for (const DTypeInfo& info : all_dtypes()) {
    EXPECT_EQ(static_cast<size_t>(info.dtype), index++);
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    if (!info.safetensors.empty()) {
      EXPECT_TRUE(safetensors_codes.insert(info.safetensors).second) << info.safetensors;
      EXPECT_EQ(dtype_from_safetensors(info.safetensors), info.dtype);
    }
    if (info.tf_code != -1) {
      EXPECT_TRUE(tf_codes.insert(info.tf_code).second) << info.name;
    }
    EXPECT_EQ(dtype_from_name(info.name), info.dtype);
  }
  EXPECT_EQ(index, 21u);
  EXPECT_EQ(dtype_info(DType::kComplex128).safetensors, "") << "safetensors has no complex128";
  EXPECT_FALSE(dtype_from_safetensors("").has_value());
}

TEST(DTypeTest, FormatCodesFromTheirSources) {
  // tensorflow/core/framework/types.proto
  EXPECT_EQ(dtype_info(DType::kFloat32).tf_code, 1);
  EXPECT_EQ(dtype_info(DType::kBFloat16).tf_code, 14);
  EXPECT_EQ(dtype_info(DType::kFloat16).tf_code, 19);
  EXPECT_EQ(dtype_info(DType::kFloat8E4M3FNUZ).tf_code, 26);  // DT_FLOAT8_E4M3FNUZ
  EXPECT_EQ(dtype_info(DType::kFloat8E5M2FNUZ).tf_code, 28);  // DT_FLOAT8_E5M2FNUZ
  EXPECT_EQ(dtype_info(DType::kFloat8E8M0FNU).tf_code, -1);   // no DT_ for it
  EXPECT_EQ(dtype_info(DType::kFloat4E2M1FNx2).tf_code, -1);  // DT_FLOAT4_E2M1FN is unpacked
  // safetensors tensor.rs
  EXPECT_EQ(dtype_info(DType::kFloat8E4M3FN).safetensors, "F8_E4M3");
  EXPECT_EQ(dtype_info(DType::kUInt8).safetensors, "U8");
  EXPECT_EQ(dtype_info(DType::kFloat8E4M3FNUZ).safetensors, "F8_E4M3FNUZ");
  EXPECT_EQ(dtype_info(DType::kFloat8E5M2FNUZ).safetensors, "F8_E5M2FNUZ");
  EXPECT_EQ(dtype_info(DType::kFloat8E8M0FNU).safetensors, "F8_E8M0");
  EXPECT_EQ(dtype_info(DType::kFloat4E2M1FNx2).safetensors, "F4");
  // torch attributes; no legacy typed storage classes for any of them
  EXPECT_EQ(dtype_info(DType::kFloat8E8M0FNU).torch, "float8_e8m0fnu");
  EXPECT_EQ(dtype_info(DType::kFloat4E2M1FNx2).torch, "float4_e2m1fn_x2");
  EXPECT_EQ(dtype_info(DType::kFloat8E4M3FNUZ).torch_storage, "");
  // numpy descr
  EXPECT_EQ(dtype_info(DType::kFloat64).numpy_descr, "<f8");
  EXPECT_EQ(dtype_info(DType::kBool).numpy_descr, "|b1");
}

TEST(DTypeTest, UnknownNamesAreNullopt) {
  EXPECT_FALSE(dtype_from_name("float31").has_value());
  EXPECT_FALSE(dtype_from_safetensors("F6_E2M3").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
}

TEST(DTypeTest, NumpyAndMlDtypesAreAllButThePackedFloat4Pairs) {
  const std::vector<DType> dtypes = detail::numpy_and_ml_dtypes();
  EXPECT_EQ(dtypes.size(), all_dtypes().size() - 1);
  EXPECT_EQ(std::count(dtypes.begin(), dtypes.end(), DType::kFloat4E2M1FNx2), 0);
  EXPECT_TRUE(std::is_sorted(dtypes.begin(), dtypes.end())) << "enum order";
  for (DType dtype : {DType::kBool, DType::kBFloat16, DType::kComplex128, DType::kFloat8E8M0FNU}) {
    EXPECT_EQ(std::count(dtypes.begin(), dtypes.end(), dtype), 1) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace ckpt
