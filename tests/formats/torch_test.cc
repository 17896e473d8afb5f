// The torch format's own behaviour beyond the conformance suite: views and
// shared storages (read lazily, gathered on use, written back as views of one
// storage), big-endian files, non-lazy loads, and the zip layout torch 2.x
// writes. Files to read are built by hand (torch_test_builder.h); what ckpt
// writes is checked by reading its records back with the zip reader and the
// unpickler. Real torch on both sides: tests/interop/test_torch_interop.py.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "ckpt/checkpoint.h"
#include "ckpt/convert.h"
#include "ckpt/error.h"
#include "core/strided.h"
#include "formats/torch/pickle_reader.h"
#include "formats/torch_test_builder.h"
#include "formats/zip/layout.h"
#include "formats/zip/reader.h"
#include "io/mapped_file.h"
#include "support/files.h"
#include "support/peak_memory.h"
#include "support/temp_dir.h"
#include "support/tool_run.h"

namespace ckpt {
namespace {

using testing::f32_bytes;
using testing::TensorSpec;
using testing::torch_zip;

std::vector<float> floats_of(const Tensor& tensor) {
  std::vector<float> out(tensor.numel());
  tensor.read_into(std::as_writable_bytes(std::span(out)));
  return out;
}

// The pickle ckpt wrote into a torch file, unpickled, and the zip.
struct Written {
  std::shared_ptr<const detail::MappedFile> file;
  std::unique_ptr<zip_detail::ZipReader> zip;
  torch_detail::Pickle pickle;
  Buffer pickle_bytes;
};

Written read_back(const std::filesystem::path& path) {
  Written w;
  w.file = detail::MappedFile::open(path);
  w.zip = std::make_unique<zip_detail::ZipReader>(w.file);
  const std::string prefix = path.stem().string() + "/";
  const zip_detail::ZipEntry* entry = w.zip->find(prefix + "data.pkl");
  EXPECT_NE(entry, nullptr);
  w.pickle_bytes = w.zip->read(*entry);
  w.pickle = torch_detail::unpickle(w.pickle_bytes.bytes());
  return w;
}

class TorchFormatTest : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& name, std::string_view bytes) {
    const auto path = dir_.path() / name;
    testing::write_file(path, bytes);
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(TorchFormatTest, NonContiguousViewIsGatheredOnlyWhenUsed) {
  // Storage of 6 floats; "t" is its transpose as [3, 2] (strides 1, 3) and
  // "row" the second row of the [2, 3] original (offset 3, contiguous).
  const std::string pickle = testing::state_dict_pickle({
      {"t", TensorSpec{.numel = 6, .shape = {3, 2}, .stride = {1, 3}}},
      {"row", TensorSpec{.numel = 6, .offset = 3, .shape = {3}, .stride = {1}}},
  });
  const auto path = write("views.pt", torch_zip(pickle, {{"0", f32_bytes({0, 1, 2, 3, 4, 5})}}).bytes);
  const Tree tree = load(path);
  const Tensor& t = tree.at("t").tensor();
  const Tensor& row = tree.at("row").tensor();
  EXPECT_TRUE(t.buffer().deferred());
  EXPECT_FALSE(row.buffer().deferred());
  EXPECT_EQ(row.buffer().kind(), StorageKind::kMapped);
  EXPECT_EQ(floats_of(row), (std::vector<float>{3, 4, 5}));
  // read_into gathers straight into the caller's memory, still deferred after.
  EXPECT_EQ(floats_of(t), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(t.buffer().deferred());
  // Asking for the address materializes once.
  const std::byte* first = t.bytes().data();
  EXPECT_EQ(first, t.bytes().data());
  EXPECT_EQ(std::memcmp(first, f32_bytes({0, 3, 1, 4, 2, 5}).data(), 24), 0);
}

// The pickle of {"w": torch.zeros(1).expand(*shape)}: one stored element,
// every stride 0.
std::string expanded_pickle(const Shape& shape) {
  return testing::state_dict_pickle(
      {{"w", TensorSpec{.numel = 1, .shape = shape, .stride = std::vector<int64_t>(shape.size(), 0)}}});
}

TEST_F(TorchFormatTest, AnExpandedViewStaysAViewOfItsOneElementStorage) {
  // 27000 × 27000 float32 (2.9 GB gathered) over 4 stored bytes: verify,
  // open and describe keep it a view.
  const auto path = write("expand.pt", torch_zip(expanded_pickle({27000, 27000}), {{"0", f32_bytes({2.5f})}}).bytes);
  const uint64_t before = testing::reset_peak_rss();
  const Contents verified = verify(path);
  const Contents opened = open(path);
  const Tensor& w = opened.tree.at("w").tensor();
  EXPECT_EQ(w.nbytes(), uint64_t{27000} * 27000 * 4);
  EXPECT_EQ(verified.entries.at(0).nbytes, w.nbytes());
  const std::optional<StridedView> view = w.strided_view();
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->storage.size(), 4u);
  EXPECT_EQ(view->storage.kind(), StorageKind::kMapped);
  EXPECT_EQ(view->offset, 0u);
  EXPECT_EQ(view->strides, (std::vector<int64_t>{0, 0}));
  float element = 0;
  std::memcpy(&element, view->storage.data(), 4);
  EXPECT_EQ(element, 2.5f);
  // Written as torch again, it stays a view of one element.
  const auto again = dir_.path() / "again.pt";
  convert(path, again);
  const Written w_again = read_back(again);
  ASSERT_EQ(w_again.pickle.storages.size(), 1u);
  EXPECT_EQ(w_again.pickle.storages[0].numel, 1u);
  EXPECT_EQ(w_again.pickle.tensors.at(0).strides, (std::vector<int64_t>{0, 0}));
  EXPECT_LT(testing::peak_rss_bytes() - before, 200 * testing::kMiB);
}

TEST_F(TorchFormatTest, ViewsWithAStrideZeroGatherAsTheirStorageRepeated) {
  // [3, 4] over a storage of 3: row i is element i repeated (stride 0 inner),
  // and [2, 3] over the same storage as a broadcast row (stride 0 outer).
  const std::string pickle = testing::state_dict_pickle({
      {"rows", TensorSpec{.numel = 3, .shape = {3, 4}, .stride = {1, 0}}},
      {"cols", TensorSpec{.numel = 3, .shape = {2, 3}, .stride = {0, 1}}},
  });
  const auto path = write("repeat.pt", torch_zip(pickle, {{"0", f32_bytes({1, 2, 3})}}).bytes);
  const Tree tree = load(path);
  const Tensor rows = tree.at("rows").tensor();
  const Tensor cols = tree.at("cols").tensor();
  EXPECT_EQ(floats_of(rows.copy()), (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}));
  EXPECT_EQ(floats_of(cols.copy()), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(rows.copy().buffer().kind(), StorageKind::kHeap);
  EXPECT_FALSE(rows.copy().strided_view().has_value());
  // A load into memory gathers them too.
  const Tree loaded = load(path, {.lazy = false});
  EXPECT_FALSE(loaded.at("rows").tensor().strided_view().has_value());
  EXPECT_TRUE(loaded.at("rows").tensor().equals(rows.copy()));
}

TEST_F(TorchFormatTest, GatheringAViewLargerThanTheMachineIsACleanError) {
  // 10^12 float32 elements over one stored float: 4 TB once gathered, more
  // than any machine this runs on. It used to throw std::bad_alloc.
  const auto path = write("huge.pt", torch_zip(expanded_pickle({1000000, 1000000}), {{"0", f32_bytes({1})}}).bytes);
  const Tensor w = load(path).at("w").tensor();
  ASSERT_TRUE(w.strided_view().has_value());
  const auto expect_refused = [](const std::function<void()>& action, const std::string& what) {
    try {
      action();
      ADD_FAILURE() << what << " did not throw";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << what << ": " << error.what();
      EXPECT_NE(error.message().find("cannot allocate 4000000000000 bytes"), std::string::npos) << error.what();
    }
  };
  expect_refused([&] { (void)w.copy(); }, "copy()");
  expect_refused([&] { (void)w.bytes(); }, "bytes()");
  expect_refused([&] { (void)load(path, {.lazy = false}); }, "load(lazy = false)");
  const auto target = dir_.path() / "huge.safetensors";
  expect_refused([&] { convert(path, target); }, "convert to safetensors");
  EXPECT_FALSE(std::filesystem::exists(target));
  // The CLI: one line on stderr, exit 2.
  const testing::ToolRun run = testing::run_tool(dir_.path(), {"convert", "huge.pt", "huge.safetensors"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_NE(run.err.find("cannot allocate"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("huge.safetensors"), std::string::npos) << run.err;
}

TEST_F(TorchFormatTest, ViewsAreWrittenBackAsViewsOfOneStorage) {
  const std::string pickle = testing::state_dict_pickle({
      {"t", TensorSpec{.numel = 6, .shape = {3, 2}, .stride = {1, 3}}},
      {"row", TensorSpec{.numel = 6, .offset = 3, .shape = {3}, .stride = {1}}},
      {"other", TensorSpec{.key = "1", .numel = 2, .shape = {2}, .stride = {1}}},
  });
  const auto in = write("in.pt", torch_zip(pickle, {{"0", f32_bytes({0, 1, 2, 3, 4, 5})}, {"1", f32_bytes({7, 8})}}).bytes);
  const auto out = dir_.path() / "out.pt";
  convert(in, out);

  const Written w = read_back(out);
  ASSERT_EQ(w.pickle.storages.size(), 2u);
  EXPECT_EQ(w.pickle.storages[0].numel, 6u);
  EXPECT_EQ(w.pickle.storages[1].numel, 2u);
  ASSERT_EQ(w.pickle.tensors.size(), 3u);
  const auto& t = w.pickle.tensors[0];
  EXPECT_EQ(t.storage, 0u);
  EXPECT_EQ(t.shape, (Shape{3, 2}));
  EXPECT_EQ(t.strides, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(w.pickle.tensors[1].storage, 0u);
  EXPECT_EQ(w.pickle.tensors[1].offset, 3u);
  EXPECT_EQ(w.pickle.tensors[2].storage, 1u);
  EXPECT_TRUE(load(out) == load(in));
}

TEST_F(TorchFormatTest, TensorsSharingMemoryAreOneStorage) {
  Tensor whole = Tensor::from_values<float>(DType::kFloat32, {4}, std::vector<float>{1, 2, 3, 4});
  Tree tree = Tree::map();
  tree.set("embed", whole);
  tree.set("tied", whole);  // the same bytes (tied weights)
  tree.set("tail", Tensor(DType::kFloat32, {2}, whole.buffer().slice(8, 8)));
  tree.set("own", Tensor::from_values<float>(DType::kFloat32, {1}, std::vector<float>{9}));
  const auto path = dir_.path() / "tied.pt";
  save(path, tree);

  const Written w = read_back(path);
  ASSERT_EQ(w.pickle.storages.size(), 2u);
  ASSERT_EQ(w.pickle.tensors.size(), 4u);
  EXPECT_EQ(w.pickle.tensors[0].storage, 0u);
  EXPECT_EQ(w.pickle.tensors[1].storage, 0u);
  EXPECT_EQ(w.pickle.tensors[2].storage, 0u);
  EXPECT_EQ(w.pickle.tensors[2].offset, 2u);
  EXPECT_EQ(w.pickle.tensors[3].storage, 1u);
  const Tree back = load(path);
  EXPECT_TRUE(back == tree);
  EXPECT_TRUE(back.at("embed").tensor().same_memory(back.at("tied").tensor()));
}

TEST_F(TorchFormatTest, OverlappingTensorsOfDifferentDTypesGetTheirOwnStorages) {
  Tensor floats = Tensor::from_values<float>(DType::kFloat32, {2}, std::vector<float>{1, 2});
  Tree tree = Tree::map();
  tree.set("f", floats);
  tree.set("i", Tensor(DType::kInt32, {2}, floats.buffer()));  // torch cannot share these
  const auto path = dir_.path() / "mixed.pt";
  save(path, tree);
  const Written w = read_back(path);
  EXPECT_EQ(w.pickle.storages.size(), 2u);
  EXPECT_TRUE(load(path) == tree);
}

TEST_F(TorchFormatTest, BigEndianFilesAreSwappedOnRead) {
  std::string big;  // 1.5f and -2.0f, big-endian
  for (float value : {1.5f, -2.0f}) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, 4);
    for (int shift = 24; shift >= 0; shift -= 8) big.push_back(static_cast<char>(bits >> shift));
  }
  const std::string pickle = testing::state_dict_pickle({{"w", TensorSpec{.numel = 2, .shape = {2}}}});
  const auto path = write("big.pt", torch_zip(pickle, {{"0", big}}, "big").bytes);
  EXPECT_EQ(floats_of(load(path).at("w").tensor()), (std::vector<float>{1.5f, -2.0f}));
}

TEST_F(TorchFormatTest, NonLazyLoadDetachesFromTheFileAndKeepsSharing) {
  const std::string pickle = testing::state_dict_pickle({
      {"t", TensorSpec{.numel = 6, .shape = {3, 2}, .stride = {1, 3}}},
      {"a", TensorSpec{.numel = 6, .shape = {6}, .stride = {1}}},
      {"b", TensorSpec{.numel = 6, .offset = 2, .shape = {2}, .stride = {1}}},
  });
  const auto path = write("eager.pt", torch_zip(pickle, {{"0", f32_bytes({0, 1, 2, 3, 4, 5})}}).bytes);
  const Tree lazy = load(path);
  const Tree eager = load(path, {.lazy = false});
  EXPECT_TRUE(eager == lazy);
  for (const Tree::Leaf& leaf : eager.tensor_leaves()) {
    EXPECT_EQ(leaf.value->tensor().buffer().kind(), StorageKind::kHeap) << leaf.name;
  }
  // "b" still lies inside "a" (one heap block per file).
  const std::byte* a = eager.at("a").tensor().bytes().data();
  EXPECT_EQ(eager.at("b").tensor().bytes().data(), a + 8);
  // The file can go: nothing refers to it any more.
  std::filesystem::remove(path);
  EXPECT_EQ(floats_of(eager.at("b").tensor()), (std::vector<float>{2, 3}));
}

TEST_F(TorchFormatTest, ZipLayoutIsTorchs) {
  Tree tree = Tree::map();
  for (int i = 0; i < 12; ++i) tree.set("w" + std::to_string(i), Tensor::zeros(DType::kFloat32, {i}));
  const auto path = dir_.path() / "model.v1.pth";
  save(path, tree);
  const auto file = detail::MappedFile::open(path);
  const zip_detail::ZipReader zip(file);
  std::vector<std::string> names;
  for (const zip_detail::ZipEntry& entry : zip.entries()) {
    names.push_back(entry.name);
    EXPECT_EQ(entry.data_offset % 64, 0u) << entry.name;
    EXPECT_EQ(entry.method, zip_detail::kMethodStored) << entry.name;
    // Data descriptors everywhere but after empty records, as miniz writes them.
    const uint16_t expected_flags = entry.uncompressed_size == 0 ? 0x0800 : 0x0808;
    EXPECT_EQ(entry.flags, expected_flags) << entry.name;
  }
  std::vector<std::string> expected = {"model.v1/data.pkl", "model.v1/.format_version",
                                       "model.v1/.storage_alignment", "model.v1/byteorder"};
  for (int i = 0; i < 12; ++i) expected.push_back("model.v1/data/" + std::to_string(i));  // 0, 1, ..., 11
  expected.push_back("model.v1/version");
  expected.push_back("model.v1/.data/serialization_id");
  EXPECT_EQ(names, expected);
}

}  // namespace
}  // namespace ckpt
