#include "ckpt/tensor.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "ckpt/error.h"

namespace ckpt {
namespace {

TEST(TensorTest, ZeroDimensionalTensorHasOneElement) {
  const float value = 2.5f;
  Tensor t = Tensor::from_values<float>(DType::kFloat32, {}, std::span(&value, 1));
  EXPECT_EQ(t.ndim(), 0u);
  EXPECT_EQ(t.numel(), 1u);
  EXPECT_EQ(t.nbytes(), 4u);
  EXPECT_EQ(t.values<float>()[0], 2.5f);
}

TEST(TensorTest, ZeroSizeDimensionMakesAnEmptyTensor) {
  Tensor t = Tensor::empty(DType::kInt64, {3, 0, 2});
  EXPECT_EQ(t.numel(), 0u);
  EXPECT_EQ(t.nbytes(), 0u);
}

TEST(TensorTest, BufferSizeMustMatchShape) {
  EXPECT_THROW(Tensor(DType::kFloat32, {2, 3}, Buffer::allocate(23)), Error);
  try {
    Tensor(DType::kFloat32, {2, 3}, Buffer::allocate(20));
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(error.what()).find("24 bytes"), std::string::npos) << error.what();
  }
}

TEST(TensorTest, NegativeAndOverflowingShapesAreRejected) {
  EXPECT_THROW(Tensor::empty(DType::kFloat32, {-1}), Error);
  EXPECT_THROW(Tensor::empty(DType::kFloat32, {int64_t{1} << 62, 8}), Error);
  EXPECT_THROW(checked_numel(std::array<int64_t, 2>{int64_t{1} << 31, int64_t{1} << 31}, 8), Error);
  EXPECT_EQ(checked_numel(std::array<int64_t, 3>{2, 3, 4}), 24u);
}

TEST(TensorTest, CopyDetachesFromTheOriginalMemory) {
  std::array<int32_t, 4> values{1, 2, 3, 4};
  Tensor lent(DType::kInt32, {4}, Buffer::lend(std::as_bytes(std::span(values)), {}));
  EXPECT_EQ(lent.buffer().kind(), StorageKind::kLent);
  EXPECT_FALSE(lent.buffer().writable());
  Tensor copy = lent.copy();
  EXPECT_EQ(copy.buffer().kind(), StorageKind::kHeap);
  EXPECT_TRUE(copy.equals(lent));
  EXPECT_FALSE(copy.same_memory(lent));
  values[0] = 99;
  EXPECT_EQ(copy.values<int32_t>()[0], 1);
  EXPECT_EQ(lent.values<int32_t>()[0], 99);
}

TEST(TensorTest, LentMemoryIsReleasedWithTheLastView) {
  int released = 0;
  std::array<std::byte, 8> memory{};
  {
    Tensor t(DType::kUInt8, {8}, Buffer::lend(memory, [&] { ++released; }));
    Tensor view(DType::kUInt8, {4}, t.buffer().slice(4, 4));
    Tensor other = t;
    EXPECT_EQ(released, 0);
    EXPECT_TRUE(other.same_memory(t));
  }
  EXPECT_EQ(released, 1);
}

TEST(TensorTest, MappedOrLentBuffersAreReadOnly) {
  std::array<std::byte, 4> memory{};
  Tensor t(DType::kFloat32, {}, Buffer::lend(memory, {}));
  EXPECT_THROW(t.mutable_bytes(), Error);
  Tensor heap = Tensor::zeros(DType::kFloat32, {});
  EXPECT_EQ(heap.mutable_bytes().size(), 4u);
}

TEST(TensorTest, TypedAccessChecksTheElementSize) {
  Tensor t = Tensor::zeros(DType::kFloat16, {4});
  EXPECT_THROW(t.values<float>(), Error);
  EXPECT_EQ(t.values<uint16_t>().size(), 4u);
}

TEST(TensorTest, HeapMemoryIs64ByteAligned) {
  for (int i = 1; i < 10; ++i) {
    Tensor t = Tensor::empty(DType::kUInt8, {i * 7});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes().data()) % 64, 0u);
  }
}

TEST(TensorTest, ReadIntoCopiesExactly) {
  std::array<uint16_t, 3> values{1, 0xbeef, 3};
  Tensor t = Tensor::from_values<uint16_t>(DType::kBFloat16, {3}, values);
  std::array<std::byte, 6> out{};
  t.read_into(out);
  EXPECT_EQ(std::memcmp(out.data(), values.data(), 6), 0);
  std::array<std::byte, 5> wrong{};
  EXPECT_THROW(t.read_into(wrong), Error);
}

TEST(BufferTest, SliceOutsideIsRejected) {
  Buffer b = Buffer::allocate(16);
  EXPECT_NO_THROW(b.slice(16, 0));
  EXPECT_THROW(b.slice(8, 9), Error);
  EXPECT_THROW(b.slice(17, 0), Error);
  EXPECT_THROW(b.slice(SIZE_MAX, 2), Error);
}

}  // namespace
}  // namespace ckpt
