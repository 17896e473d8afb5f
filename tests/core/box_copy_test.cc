#include "core/box_copy.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ckpt/error.h"

namespace ckpt::detail {
namespace {

// int32 elements numbered 0, 1, 2, ... in C order, as bytes.
std::vector<int32_t> numbered(size_t count, int32_t first = 0) {
  std::vector<int32_t> values(count);
  std::iota(values.begin(), values.end(), first);
  return values;
}

std::span<std::byte> bytes(std::vector<int32_t>& values) { return std::as_writable_bytes(std::span(values)); }
std::span<const std::byte> cbytes(const std::vector<int32_t>& values) { return std::as_bytes(std::span(values)); }

TEST(BoxCopyTest, SliceIntoTheWholeArray) {
  // A [2, 3] slice at (1, 2) of a [4, 6] array, as TF stores sliced entries.
  std::vector<int32_t> full(24, -1);
  const std::vector<int32_t> part = numbered(6, 100);
  const std::vector<int64_t> shape = {4, 6}, start = {1, 2}, lengths = {2, 3};
  copy_box({.element_size = 4, .extent = lengths, .to = bytes(full), .to_shape = shape, .to_origin = start,
            .from = cbytes(part), .from_shape = lengths});
  std::vector<int32_t> expected(24, -1);
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) expected[(1 + r) * 6 + 2 + c] = 100 + r * 3 + c;
  }
  EXPECT_EQ(full, expected);
}

TEST(BoxCopyTest, EdgeChunkIntoItsArray) {
  // The [2, 2] part at the edge of a [2, 4] chunk at grid (1, 1) of a
  // [4, 6] array whose chunks are [2, 4], as zarr stores it.
  std::vector<int32_t> out(24, -1);
  const std::vector<int32_t> chunk = numbered(8);
  const std::vector<int64_t> shape = {4, 6}, chunks = {2, 4}, origin = {2, 4}, extent = {2, 2};
  copy_box({.element_size = 4, .extent = extent, .to = bytes(out), .to_shape = shape, .to_origin = origin,
            .from = cbytes(chunk), .from_shape = chunks});
  std::vector<int32_t> expected(24, -1);
  expected[2 * 6 + 4] = 0, expected[2 * 6 + 5] = 1, expected[3 * 6 + 4] = 4, expected[3 * 6 + 5] = 5;
  EXPECT_EQ(out, expected);
}

TEST(BoxCopyTest, BoxBetweenTwoOffsetsInThreeDimensions) {
  // From the middle of one array into the middle of another of another shape.
  const std::vector<int64_t> from_shape = {3, 4, 5}, to_shape = {4, 3, 6};
  const std::vector<int64_t> from_origin = {1, 1, 2}, to_origin = {2, 0, 1}, extent = {2, 3, 3};
  const std::vector<int32_t> from = numbered(60);
  std::vector<int32_t> to(72, -1);
  copy_box({.element_size = 4, .extent = extent, .to = bytes(to), .to_shape = to_shape, .to_origin = to_origin,
            .from = cbytes(from), .from_shape = from_shape, .from_origin = from_origin});
  std::vector<int32_t> expected(72, -1);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 3; ++k) {
        expected[((2 + i) * 3 + j) * 6 + 1 + k] = from[((1 + i) * 4 + 1 + j) * 5 + 2 + k];
      }
    }
  }
  EXPECT_EQ(to, expected);
}

TEST(BoxCopyTest, WholeTrailingDimensionsAndDegenerateBoxes) {
  // Rows 1..2 of a [4, 2, 3] array whose trailing dimensions are whole: one run.
  const std::vector<int32_t> from = numbered(24);
  std::vector<int32_t> to(12, -1);
  const std::vector<int64_t> from_shape = {4, 2, 3}, to_shape = {2, 2, 3}, origin = {1, 0, 0}, extent = {2, 2, 3};
  copy_box({.element_size = 4, .extent = extent, .to = bytes(to), .to_shape = to_shape, .from = cbytes(from),
            .from_shape = from_shape, .from_origin = origin});
  EXPECT_EQ(to, numbered(12, 6));
  // Rank 0: one element.
  std::vector<int32_t> scalar = {-1};
  const std::vector<int32_t> seven = {7};
  copy_box({.element_size = 4, .to = bytes(scalar), .from = cbytes(seven)});
  EXPECT_EQ(scalar, seven);
  // A box with a dimension of 0 copies nothing (and its origin may sit at the end).
  std::vector<int32_t> untouched(6, -1);
  const std::vector<int64_t> small = {2, 3}, at_end = {2, 0}, empty = {0, 3};
  copy_box({.element_size = 4, .extent = empty, .to = bytes(untouched), .to_shape = small, .to_origin = at_end,
            .from = cbytes(from), .from_shape = small});
  EXPECT_EQ(untouched, std::vector<int32_t>(6, -1));
}

TEST(BoxCopyTest, BoxesOutsideTheirArraysAreInvalidArguments) {
  const std::vector<int32_t> from = numbered(6);
  std::vector<int32_t> to(6, -1);
  const std::vector<int64_t> shape = {2, 3}, extent = {2, 3}, past = {0, 1}, negative = {-1, 0}, rank1 = {6};
  const std::vector<int64_t> too_big = {3, 3};
  auto expect_invalid = [&](const BoxCopy& copy) {
    try {
      copy_box(copy);
      ADD_FAILURE() << "copied";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
    }
    EXPECT_EQ(to, std::vector<int32_t>(6, -1)) << "nothing copied";
  };
  expect_invalid({.element_size = 4, .extent = extent, .to = bytes(to), .to_shape = shape, .to_origin = past,
                  .from = cbytes(from), .from_shape = shape});
  expect_invalid({.element_size = 4, .extent = extent, .to = bytes(to), .to_shape = shape, .from = cbytes(from),
                  .from_shape = shape, .from_origin = negative});
  expect_invalid({.element_size = 4, .extent = extent, .to = bytes(to), .to_shape = rank1, .from = cbytes(from),
                  .from_shape = shape});
  expect_invalid({.element_size = 4, .extent = too_big, .to = bytes(to), .to_shape = too_big, .from = cbytes(from),
                  .from_shape = too_big});  // the arrays' bytes are shorter than [3, 3]
}

}  // namespace
}  // namespace ckpt::detail
