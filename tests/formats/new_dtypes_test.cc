// The dtypes added with torch 2.13 / safetensors 0.8 (float8_e4m3fnuz,
// float8_e5m2fnuz, float8_e8m0fnu, float4_e2m1fn_x2) in the formats that hold
// them: safetensors headers written by hand and by ckpt (F4's shape counts
// values, ckpt's counts bytes), and torch pickles (untyped storages with the
// torch dtype, as torch.save writes them). Real torch and safetensors on both
// sides: tests/interop/test_new_dtypes_interop.py.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/torch/pickle_reader.h"
#include "formats/torch_test_builder.h"
#include "formats/zip/reader.h"
#include "io/mapped_file.h"
#include "support/files.h"
#include "support/safetensors_bytes.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::Pkl;
using testing::TempDir;

const DType kNewDTypes[] = {DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2FNUZ, DType::kFloat8E8M0FNU,
                            DType::kFloat4E2M1FNx2};

using testing::le64;

// A safetensors file of `header` (padded to 8 bytes with spaces) and `data`.
std::string safetensors_file(std::string header, std::string_view data) {
  while (header.size() % 8 != 0) header += ' ';
  return le64(header.size()) + header + std::string(data);
}

using testing::header_of;

std::string bytes_of(const Tensor& tensor) {
  return {reinterpret_cast<const char*>(tensor.bytes().data()), tensor.nbytes()};
}

Tensor tensor_of_bytes(DType dtype, Shape shape, std::string_view bytes) {
  return Tensor::from_bytes(dtype, std::move(shape), std::as_bytes(std::span(bytes)));
}

// Every tensor of `expected` is in `got` under its name, with its dtype,
// shape and bytes (plain safetensors files come back in file order).
void expect_same_tensors(const Tree& got, const Tree& expected) {
  EXPECT_EQ(got.size(), expected.size());
  for (const TreeEntry& entry : expected.entries()) {
    const std::string name = key_to_string(entry.key);
    const Tensor& want = entry.value.tensor();
    const Tensor& have = got.at(name).tensor();
    EXPECT_EQ(have.dtype(), want.dtype()) << name;
    EXPECT_EQ(have.shape(), want.shape()) << name;
    EXPECT_EQ(bytes_of(have), bytes_of(want)) << name;
  }
}

// ---- safetensors ----

TEST(SafetensorsNewDTypesTest, ReadsAHandWrittenHeaderOfEachNewCode) {
  TempDir dir;
  // F4's shape [2, 4] is eight 4-bit values: 4 bytes, ckpt shape [2, 2].
  const std::string header =
      R"({"fnuz43":{"dtype":"F8_E4M3FNUZ","shape":[3],"data_offsets":[0,3]},)"
      R"("fnuz52":{"dtype":"F8_E5M2FNUZ","shape":[1,2],"data_offsets":[3,5]},)"
      R"("scale":{"dtype":"F8_E8M0","shape":[],"data_offsets":[5,6]},)"
      R"("packed":{"dtype":"F4","shape":[2,4],"data_offsets":[6,10]}})";
  const std::string data = "\x80\x40\xC0" "\x7F\x01" "\xFF" "\x21\x43\x65\x87";
  const auto path = dir / "new.safetensors";
  testing::write_file(path, safetensors_file(header, data));
  const Contents contents = ckpt::open(path);
  ASSERT_EQ(contents.entries.size(), 4u);
  const std::vector<std::tuple<std::string, DType, Shape, std::string>> expected = {
      {"fnuz43", DType::kFloat8E4M3FNUZ, {3}, "\x80\x40\xC0"},
      {"fnuz52", DType::kFloat8E5M2FNUZ, {1, 2}, "\x7F\x01"},
      {"scale", DType::kFloat8E8M0FNU, {}, "\xFF"},
      {"packed", DType::kFloat4E2M1FNx2, {2, 2}, "\x21\x43\x65\x87"},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, dtype, shape, bytes] = expected[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(contents.entries[i].name, name);
    EXPECT_EQ(contents.entries[i].dtype, dtype);
    EXPECT_EQ(contents.entries[i].shape, shape);
    EXPECT_EQ(contents.entries[i].nbytes, bytes.size());
    const Tensor& tensor = contents.tree.at(name).tensor();
    EXPECT_EQ(tensor.dtype(), dtype);
    EXPECT_EQ(tensor.shape(), shape);
    EXPECT_EQ(bytes_of(tensor), bytes);
  }
}

TEST(SafetensorsNewDTypesTest, WritesTheReferenceCodesOrderAndF4Shape) {
  // tensor.rs Dtype order: F4 < F8_E8M0 < F8_E4M3FNUZ < F8_E5M2FNUZ, written
  // descending; F4's last dimension doubles (3 bytes = 6 values).
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("a_f4", tensor_of_bytes(DType::kFloat4E2M1FNx2, {1, 3}, "\x12\x34\x56"));
  tree.set("b_e8m0", tensor_of_bytes(DType::kFloat8E8M0FNU, {2}, "\x7F\x80"));
  tree.set("c_e4m3fnuz", tensor_of_bytes(DType::kFloat8E4M3FNUZ, {1}, "\x40"));
  tree.set("d_e5m2fnuz", tensor_of_bytes(DType::kFloat8E5M2FNUZ, {1}, "\x80"));
  const auto path = dir / "out.safetensors";
  save(path, tree, {.extras = false, .fsync = false});
  const std::string file = testing::read_file(path);
  EXPECT_EQ(header_of(file),
            R"({"d_e5m2fnuz":{"dtype":"F8_E5M2FNUZ","shape":[1],"data_offsets":[0,1]},)"
            R"("c_e4m3fnuz":{"dtype":"F8_E4M3FNUZ","shape":[1],"data_offsets":[1,2]},)"
            R"("b_e8m0":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[2,4]},)"
            R"("a_f4":{"dtype":"F4","shape":[1,6],"data_offsets":[4,7]}})");
  EXPECT_EQ(file.substr(file.size() - 7), std::string("\x80\x40\x7F\x80\x12\x34\x56", 7));
  // Read back: halved again, the same tensors.
  expect_same_tensors(load(path), tree);
}

TEST(SafetensorsNewDTypesTest, EveryNewDtypeRoundTripsWithAndWithoutExtras) {
  TempDir dir;
  for (const bool extras : {false, true}) {
    Tree tree = Tree::map();
    for (DType dtype : kNewDTypes) {
      const std::string name(dtype_name(dtype));
      std::string bytes(2 * 4, '\0');
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(0x80 + 17 * i);
      tree.set(name, tensor_of_bytes(dtype, {2, 4}, bytes));
      tree.set(name + ".empty", tensor_of_bytes(dtype, {3, 0}, ""));
      tree.set(name + ".zero_rows", tensor_of_bytes(dtype, {0, 2}, ""));
      if (dtype != DType::kFloat4E2M1FNx2) tree.set(name + ".scalar", tensor_of_bytes(dtype, {}, "\x80"));
    }
    const auto path = dir / (extras ? "extras.safetensors" : "plain.safetensors");
    save(path, tree, {.extras = extras, .fsync = false});
    const Tree back = load(path);
    SCOPED_TRACE(extras ? "with extras" : "plain");
    expect_same_tensors(back, tree);
    if (extras) {
      EXPECT_TRUE(back == tree);
    }
    const std::string header = header_of(testing::read_file(path));
    EXPECT_NE(header.find(R"("float4_e2m1fn_x2":{"dtype":"F4","shape":[2,8],)"), std::string::npos) << header;
    EXPECT_NE(header.find(R"("float4_e2m1fn_x2.empty":{"dtype":"F4","shape":[3,0],)"), std::string::npos);
    EXPECT_NE(header.find(R"("float4_e2m1fn_x2.zero_rows":{"dtype":"F4","shape":[0,4],)"), std::string::npos);
  }
}

// Reading `header` + `data` throws `code`, naming entry "w" and saying `words`.
void expect_read_error(const std::string& header, std::string_view data, ErrorCode code, std::string_view words) {
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  testing::write_file(path, safetensors_file(header, data));
  try {
    load(path);
    ADD_FAILURE() << header << " was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), code) << error.what();
    EXPECT_EQ(error.context().entry, "w") << error.what();
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(SafetensorsNewDTypesTest, F4WithAnOddLastDimensionIsUnsupported) {
  // Valid to the reference (6 values, 3 bytes), but no whole packed bytes
  // along the last dimension; torch refuses it too.
  expect_read_error(R"({"w":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}})", "\x01\x02\x03",
                    ErrorCode::kUnsupported, "odd last dimension");
  expect_read_error(R"({"w":{"dtype":"F4","shape":[4,1],"data_offsets":[0,2]}})", "\x01\x02",
                    ErrorCode::kUnsupported, "odd last dimension");
}

TEST(SafetensorsNewDTypesTest, F4ThatDoesNotFillWholeBytesIsCorrupt) {
  // 4 bits (a 0-d tensor) or 12 bits: the reference refuses them as
  // misaligned slices.
  expect_read_error(R"({"w":{"dtype":"F4","shape":[],"data_offsets":[0,1]}})", "\x01", ErrorCode::kCorrupt,
                    "byte boundary");
  expect_read_error(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "\x01\x02", ErrorCode::kCorrupt,
                    "byte boundary");
  // The byte count follows the values, not the packed shape: [2, 4] is 4 bytes.
  expect_read_error(R"({"w":{"dtype":"F4","shape":[2,4],"data_offsets":[0,8]}})", std::string(8, '\0'),
                    ErrorCode::kCorrupt, "hold 8 bytes, but F4");
}

TEST(SafetensorsNewDTypesTest, ZeroDimensionalFloat4PairsCannotBeWritten) {
  TempDir dir;
  Tree tree = Tree::map();
  tree.set("w", tensor_of_bytes(DType::kFloat4E2M1FNx2, {}, "\x12"));
  for (const bool extras : {false, true}) {
    try {
      save(dir / "scalar.safetensors", tree, {.extras = extras, .fsync = false});
      ADD_FAILURE() << "a 0-d float4_e2m1fn_x2 tensor was written";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
      EXPECT_EQ(error.context().entry, "w");
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "scalar.safetensors"));
}

// ---- torch ----

// The value of one tensor as torch 2.13 pickles a dtype without a legacy
// storage class: _rebuild_tensor_v3(storage, offset, size, stride, False,
// OrderedDict(), torch.<dtype>[, metadata]) over the persistent id
// ('storage', torch.storage.UntypedStorage, key, 'cpu', bytes).
Pkl& untyped_tensor(Pkl& p, std::string_view torch_dtype, std::string_view key, int64_t nbytes,
                    const std::vector<int64_t>& shape, bool neg = false) {
  p.global("torch._utils", "_rebuild_tensor_v3").mark();
  p.mark().str("storage").global("torch.storage", "UntypedStorage").str(key).str("cpu").integer(nbytes);
  p.tuple().binpersid();
  std::vector<int64_t> stride(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) stride[i - 1] = stride[i] * shape[i];
  p.integer(0).int_tuple(shape).int_tuple(stride).boolean(false);
  p.global("collections", "OrderedDict").empty_tuple().reduce();
  p.global("torch", torch_dtype);
  if (neg) p.empty_dict().str("neg").boolean(true).setitem();
  return p.tuple().reduce();
}

TEST(TorchNewDTypesTest, ReadsUntypedStoragesOfEachNewDtype) {
  TempDir dir;
  Pkl p(2);
  p.empty_dict().mark();
  p.str("e4m3fnuz");
  untyped_tensor(p, "float8_e4m3fnuz", "0", 3, {3});
  p.str("e5m2fnuz");
  untyped_tensor(p, "float8_e5m2fnuz", "1", 2, {2});
  p.str("e8m0");
  untyped_tensor(p, "float8_e8m0fnu", "2", 1, {});
  p.str("f4");
  untyped_tensor(p, "float4_e2m1fn_x2", "3", 4, {2, 2});
  p.setitems().stop();
  const auto path = dir / "archive.pt";
  testing::write_file(path, testing::torch_zip(p.bytes(), {{"0", "\x80\x40\xC0"},
                                                            {"1", "\x7F\x01"},
                                                            {"2", "\xFF"},
                                                            {"3", "\x21\x43\x65\x87"}})
                                .bytes);
  const Tree tree = load(path);
  const std::vector<std::tuple<std::string, DType, Shape, std::string>> expected = {
      {"e4m3fnuz", DType::kFloat8E4M3FNUZ, {3}, "\x80\x40\xC0"},
      {"e5m2fnuz", DType::kFloat8E5M2FNUZ, {2}, "\x7F\x01"},
      {"e8m0", DType::kFloat8E8M0FNU, {}, "\xFF"},
      {"f4", DType::kFloat4E2M1FNx2, {2, 2}, "\x21\x43\x65\x87"},
  };
  for (const auto& [name, dtype, shape, bytes] : expected) {
    SCOPED_TRACE(name);
    const Tensor& tensor = tree.at(name).tensor();
    EXPECT_EQ(tensor.dtype(), dtype);
    EXPECT_EQ(tensor.shape(), shape);
    EXPECT_EQ(bytes_of(tensor), bytes);
  }
}

TEST(TorchNewDTypesTest, NegativeViewsFlipSignsWhereTheDtypeHasThem) {
  TempDir dir;
  // fnuz: zero (0x00) and NaN (0x80) keep their bits, the others flip.
  Pkl p(2);
  p.empty_dict().str("w");
  untyped_tensor(p, "float8_e4m3fnuz", "0", 4, {4}, /*neg=*/true);
  p.setitem().stop();
  const auto path = dir / "archive.pt";
  testing::write_file(path, testing::torch_zip(p.bytes(), {{"0", std::string("\x00\x80\x40\xC1", 4)}}).bytes);
  EXPECT_EQ(bytes_of(load(path).at("w").tensor()), std::string("\x00\x80\xC0\x41", 4));
  // e8m0 has no sign: a negative view of it cannot be resolved.
  Pkl q(2);
  q.empty_dict().str("w");
  untyped_tensor(q, "float8_e8m0fnu", "0", 1, {1}, /*neg=*/true);
  q.setitem().stop();
  testing::write_file(path, testing::torch_zip(q.bytes(), {{"0", "\x7F"}}).bytes);
  try {
    load(path).at("w").tensor().bytes();
    ADD_FAILURE() << "negative e8m0 view accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
  }
}

TEST(TorchNewDTypesTest, WritesUntypedStoragesWithTheTorchDtypeAndReadsThemBack) {
  TempDir dir;
  Tree tree = Tree::map();
  for (DType dtype : kNewDTypes) {
    tree.set(std::string(dtype_name(dtype)), tensor_of_bytes(dtype, {2, 3}, std::string("\x00\x7F\x80\xFF\x01\xFE", 6)));
    tree.set(std::string(dtype_name(dtype)) + ".scalar", tensor_of_bytes(dtype, {}, "\x80"));
  }
  const auto path = dir / "out.pt";
  save(path, tree, {.fsync = false});
  EXPECT_TRUE(load(path) == tree);

  auto file = detail::MappedFile::open(path);
  zip_detail::ZipReader zip(file);
  const zip_detail::ZipEntry* entry = zip.find("out/data.pkl");
  ASSERT_NE(entry, nullptr);
  const Buffer pickle_bytes = zip.read(*entry);
  const std::string pickle(reinterpret_cast<const char*>(pickle_bytes.bytes().data()), pickle_bytes.size());
  for (DType dtype : kNewDTypes) {
    const std::string global = "torch\n" + std::string(dtype_info(dtype).torch) + "\n";
    EXPECT_NE(pickle.find(global), std::string::npos) << dtype_name(dtype) << " has no GLOBAL torch." << dtype_info(dtype).torch;
  }
  const torch_detail::Pickle unpickled = torch_detail::unpickle(pickle_bytes.bytes());
  ASSERT_EQ(unpickled.tensors.size(), 8u);
  for (const torch_detail::StorageRef& storage : unpickled.storages) {
    EXPECT_FALSE(storage.dtype.has_value()) << "untyped storages only, no legacy typed storage class";
  }
  for (const torch_detail::TensorRef& tensor : unpickled.tensors) {
    EXPECT_NE(std::find(std::begin(kNewDTypes), std::end(kNewDTypes), tensor.dtype), std::end(kNewDTypes));
  }
}

// ---- formats without them ----

TEST(NewDTypesSaveTest, FormatsWithoutTheDtypeRefuseItNamingTheEntry) {
  // TensorFlow has no DataType for e8m0 or packed float4 (writing its -1
  // would give a bundle TensorFlow aborts on); numpy has none of the four.
  const std::pair<std::string, DType> refused[] = {
      {"tf", DType::kFloat8E8M0FNU}, {"tf", DType::kFloat4E2M1FNx2},
      {"npz", DType::kFloat8E4M3FNUZ}, {"npz", DType::kFloat4E2M1FNx2}};
  TempDir dir;
  for (const auto& [format, dtype] : refused) {
    SCOPED_TRACE(format + " " + std::string(dtype_name(dtype)));
    Tree tree = Tree::map();
    tree.set("ok", Tensor::zeros(DType::kFloat32, {2}));
    tree.set("w", tensor_of_bytes(dtype, {2}, "\x01\x02"));
    const auto path = dir / ("out_" + format);
    try {
      save(path, tree, {.format = format, .fsync = false});
      ADD_FAILURE() << "written";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
      EXPECT_EQ(error.context().entry, "w") << error.what();
      EXPECT_NE(std::string(error.what()).find(dtype_name(dtype)), std::string::npos) << error.what();
    }
    EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "nothing is written";
  }
  // The fnuz float8s do have TensorFlow codes (26, 28).
  Tree tree = Tree::map();
  tree.set("w", tensor_of_bytes(DType::kFloat8E5M2FNUZ, {2}, "\x01\x80"));
  save(dir / "bundle", tree, {.format = "tf", .fsync = false});
  expect_same_tensors(load(dir / "bundle", {.format = "tf"}), tree);
}

}  // namespace
}  // namespace ckpt
