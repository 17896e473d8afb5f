#include "ckpt/box.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "ckpt/checkpoint.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::error_of;

// A tensor of `shape` whose element at flat index i is i (int32).
Tensor iota(const Shape& shape) {
  Tensor tensor = Tensor::empty(DType::kInt32, shape);
  auto values = tensor.mutable_bytes();
  for (size_t i = 0; i < values.size() / 4; ++i) {
    const int32_t v = static_cast<int32_t>(i);
    std::memcpy(values.data() + 4 * i, &v, 4);
  }
  return tensor;
}

int32_t at(const Tensor& tensor, size_t flat) {
  int32_t v;
  std::memcpy(&v, tensor.bytes().data() + 4 * flat, 4);
  return v;
}

// The flat index in `shape` of each element of `box`, in the box's C order,
// computed element by element (the reference the box copies are held to).
std::vector<size_t> flat_indices(const Shape& shape, const Box& box) {
  std::vector<size_t> out;
  std::vector<int64_t> index(shape.size());
  std::function<void(size_t)> walk = [&](size_t d) {
    if (d == shape.size()) {
      size_t flat = 0;
      for (size_t k = 0; k < shape.size(); ++k) flat = flat * static_cast<size_t>(shape[k]) + static_cast<size_t>(index[k]);
      out.push_back(flat);
      return;
    }
    for (int64_t i = 0; i < box.sizes[d]; ++i) {
      index[d] = box.offsets[d] + i;
      walk(d + 1);
    }
  };
  walk(0);
  return out;
}

void expect_region(const Tensor& region, const Shape& shape, const Box& box) {
  ASSERT_EQ(region.shape(), box.sizes);
  const std::vector<size_t> expected = flat_indices(shape, box);
  ASSERT_EQ(region.numel(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(at(region, i), static_cast<int32_t>(expected[i])) << i;
}

// The piece of iota(shape) that `box` holds, as a tensor of its own.
Piece piece_of(const Shape& shape, const Box& box) { return {.box = box, .data = read_box(iota(shape), box)}; }

TEST(BoxTest, IntersectFindsTheCommonPartOrNone) {
  const Box a{{0, 2}, {4, 4}};
  const Box b{{3, 5}, {4, 4}};
  EXPECT_EQ(intersect(a, b), (Box{{3, 5}, {1, 1}}));
  EXPECT_EQ(intersect(a, Box{{4, 0}, {2, 8}}), std::nullopt);        // touching, not overlapping
  EXPECT_EQ(intersect(a, Box{{1, 3}, {0, 1}}), std::nullopt);        // empty
  EXPECT_EQ(intersect(Box{}, Box{}), (Box{}));                       // rank 0: the one element
  EXPECT_THROW(intersect(a, Box{{0}, {1}}), Error);
}

TEST(BoxTest, CheckBoxRefusesEachDefect) {
  const Shape shape{4, 6};
  EXPECT_NO_THROW(check_box({{0, 0}, {4, 6}}, shape));
  EXPECT_NO_THROW(check_box({{4, 6}, {0, 0}}, shape));
  for (const Box& bad : {Box{{0}, {4}}, Box{{0, -1}, {4, 1}}, Box{{0, 0}, {5, 1}}, Box{{3, 0}, {2, 1}},
                         Box{{0, 0}, {1, -1}}}) {
    const Error error = error_of([&] { check_box(bad, shape, {.entry = "w"}); });
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << box_text(bad);
    EXPECT_EQ(error.context().entry, "w");
  }
}

TEST(BoxTest, ReadBoxOfAPlainTensorCopiesExactlyTheRegion) {
  const Shape shape{3, 5, 7};
  const Tensor tensor = iota(shape);
  for (const Box& box : {Box{{0, 0, 0}, {3, 5, 7}}, Box{{1, 2, 3}, {2, 2, 4}}, Box{{0, 4, 0}, {3, 1, 7}},
                         Box{{2, 0, 6}, {1, 5, 1}}, Box{{1, 1, 1}, {0, 2, 2}}}) {
    SCOPED_TRACE(box_text(box));
    expect_region(read_box(tensor, box), shape, box);
  }
  const Tensor scalar = iota({});
  expect_region(read_box(scalar, Box{}), {}, Box{});
  EXPECT_THROW(read_box(tensor, Box{{0, 0, 0}, {4, 1, 1}}), Error);
}

TEST(BoxTest, PiecedTensorAssemblesAndReadsOnlyOverlappingPieces) {
  const Shape shape{6, 10};
  // Uneven pieces: two row blocks, the second split by columns.
  std::vector<Piece> pieces{piece_of(shape, {{0, 0}, {2, 10}}), piece_of(shape, {{2, 0}, {4, 3}}),
                            piece_of(shape, {{2, 3}, {4, 7}})};
  const Tensor whole = pieced_tensor(DType::kInt32, shape, pieces, {.entry = "w"});
  ASSERT_EQ(whole.shape(), shape);
  EXPECT_TRUE(whole.buffer().deferred());
  EXPECT_EQ(pieces_of(whole).size(), 3u);
  for (const Box& box : {Box{{1, 2}, {3, 5}}, Box{{0, 0}, {6, 10}}, Box{{3, 3}, {2, 7}}, Box{{0, 9}, {6, 1}}}) {
    SCOPED_TRACE(box_text(box));
    expect_region(read_box(whole, box), shape, box);
  }
  EXPECT_TRUE(whole.buffer().deferred());  // read_box never assembles the whole
  expect_region(whole.copy(), shape, whole_box(shape));
  EXPECT_TRUE(whole.equals(iota(shape)));
}

TEST(BoxTest, OnePieceCoveringTheTensorIsTheTensorItself) {
  const Shape shape{2, 3};
  const Piece piece = piece_of(shape, whole_box(shape));
  const Tensor whole = pieced_tensor(DType::kInt32, shape, {piece});
  EXPECT_TRUE(whole.same_memory(piece.data));
}

TEST(BoxTest, PiecedTensorRefusesEachDefect) {
  const Shape shape{4, 4};
  const Piece top = piece_of(shape, {{0, 0}, {2, 4}});
  const Piece bottom = piece_of(shape, {{2, 0}, {2, 4}});
  Piece wrong_dtype = bottom;
  wrong_dtype.data = Tensor::empty(DType::kFloat32, {2, 4});
  Piece wrong_shape = bottom;
  wrong_shape.data = read_box(iota(shape), {{2, 0}, {2, 2}});
  const std::vector<std::pair<std::string, std::vector<Piece>>> defects{
      {"uncovered", {top}},
      {"overlap", {top, bottom, piece_of(shape, {{1, 1}, {1, 1}})}},
      {"outside", {top, piece_of({5, 4}, {{2, 0}, {3, 4}})}},
      {"rank", {top, piece_of({16}, {{8}, {8}})}},
      {"dtype", {top, wrong_dtype}},
      {"shape", {top, wrong_shape}},
  };
  for (const auto& defect : defects) {  // not a structured binding: clang 14's lambdas cannot capture one
    SCOPED_TRACE(defect.first);
    const Error error = error_of([&] { pieced_tensor(DType::kInt32, shape, defect.second, {.entry = "w"}); });
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().entry, "w");
  }
  EXPECT_NO_THROW(pieced_tensor(DType::kInt32, shape, {bottom, top}));
}

TEST(BoxTest, CheckTilingNeedsNoDataAndNamesEachDefect) {
  const Shape shape{4, 6};
  EXPECT_NO_THROW(check_tiling(shape, {{{0, 0}, {4, 3}}, {{0, 3}, {4, 3}}}));
  EXPECT_NO_THROW(check_tiling(shape, {{{0, 0}, {4, 6}}, {{2, 2}, {0, 3}}}));  // an empty box overlaps nothing
  const std::vector<std::pair<std::string, std::vector<Box>>> defects{
      {"uncovered", {{{0, 0}, {4, 3}}}},
      {"overlap", {{{0, 0}, {4, 4}}, {{0, 3}, {4, 3}}}},
      {"outside", {{{0, 0}, {4, 3}}, {{0, 3}, {4, 4}}}},
      {"rank", {{{0}, {24}}}},
  };
  for (const auto& defect : defects) {
    SCOPED_TRACE(defect.first);
    const Error error =
        error_of([&] { check_tiling(shape, defect.second, ErrorCode::kInvalidArgument, {.entry = "w"}); });
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(error.context().entry, "w");
    EXPECT_NE(error.message().find(defect.first), std::string::npos) << error.message();
  }
}

// Load options asking for `boxes` (set by assignment: GCC 12 warns of the
// designated initializers' skipped members).
LoadOptions with_boxes(std::map<std::string, Box> boxes, bool lazy = true) {
  LoadOptions options;
  options.lazy = lazy;
  options.boxes = std::move(boxes);
  return options;
}

TEST(BoxTest, LoadWithBoxesReturnsOnlyThoseBoxes) {
  testing::TempDir dir;
  const std::filesystem::path path = dir.path() / "m.safetensors";
  Tree state = Tree::map();
  state.set("a", iota({8, 16}));
  state.set("b", iota({5}));
  state.set("big", iota({4, 64, 4096}));  // runs of 40 rows of 16 KiB: read with positioned reads
  save(path, state);
  const Box box{{2, 4}, {3, 8}};
  const Tree loaded = load(path, with_boxes({{"a", box}}));
  expect_region(loaded.at("a").tensor(), {8, 16}, box);
  const Box rows{{1, 8, 0}, {2, 40, 4096}};
  expect_region(load(path, with_boxes({{"big", rows}})).at("big").tensor(), {4, 64, 4096}, rows);
  const Box whole_rows{{1, 0, 0}, {3, 64, 4096}};  // one run across dimension 0
  expect_region(load(path, with_boxes({{"big", whole_rows}})).at("big").tensor(), {4, 64, 4096}, whole_rows);
  const Box nearly_whole_rows{{1, 2, 0}, {2, 60, 4096}};  // its rows read alone, then the box copied out
  expect_region(load(path, with_boxes({{"big", nearly_whole_rows}})).at("big").tensor(), {4, 64, 4096},
                nearly_whole_rows);
  EXPECT_EQ(loaded.at("a").tensor().buffer().kind(), StorageKind::kHeap);
  EXPECT_TRUE(loaded.at("b").tensor().equals(iota({5})));
  EXPECT_TRUE(load(path, with_boxes({{"a", box}}, false)).at("a").tensor().equals(loaded.at("a").tensor()));
  const Error absent = error_of([&] { load(path, with_boxes({{"c", Box{{0}, {1}}}})); });
  EXPECT_EQ(absent.code(), ErrorCode::kNotFound);
  EXPECT_EQ(absent.context().entry, "c");
  const Error outside = error_of([&] { load(path, with_boxes({{"b", Box{{3}, {3}}}})); });
  EXPECT_EQ(outside.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(outside.context().entry, "b");
  EXPECT_EQ(outside.context().path, path);
}

// The pages of `path` in the page cache (mincore over a mapping of it).
size_t resident_pages(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const size_t size = std::filesystem::file_size(path);
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  const int status = ::mincore(address, size, resident.data());
  ::munmap(address, size);
  EXPECT_EQ(status, 0);
  return static_cast<size_t>(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }));
}

// A box of rows of a file not in the page cache brings in those rows (and
// the header) only: no readahead window around the header or past the
// rows, whatever the disk's read_ahead_kb (8 MiB on this project's VM).
TEST(BoxTest, BoxOfAFileNotInThePageCacheReadsOnlyItsRows) {
  testing::TempDir dir;
  const std::filesystem::path path = dir.path() / "rows.safetensors";
  Tree state = Tree::map();
  state.set("w", iota({2048, 4096}));  // 32 MiB, rows of 16 KiB
  save(path, state, {.fsync = true});
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (resident_pages(path) > 2) GTEST_SKIP() << "the file system keeps the file in memory (tmpfs?)";
  const Box rows{{1000, 0}, {64, 4096}};  // 1 MiB in the middle of the file
  const Tree loaded = load(path, with_boxes({{"w", rows}}));
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t needed = 64 * 4096 * 4 / page;
  EXPECT_LE(resident_pages(path), needed + 8);  // the header's pages, the rows' unaligned ends (8 MiB of readahead: +2048)
  expect_region(loaded.at("w").tensor(), {2048, 4096}, rows);
}

}  // namespace
}  // namespace ckpt
