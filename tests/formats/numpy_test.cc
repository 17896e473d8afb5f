// The npy and npz formats: headers byte-identical to np.save, every dtype,
// byte order and memory order numpy writes, round trips, tree shapes and
// detection. Files are built from bytes here; tests/interop runs real numpy.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "ckpt/error.h"
#include "formats/numpy/format.h"
#include "formats/numpy/layout.h"
#include "formats/numpy/writer.h"
#include "formats/zip/reader.h"
#include "formats/zip_test_builder.h"
#include "io/mapped_file.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::read_file;
using testing::write_file;

// An .npy with `dict` as header text, padded as numpy pads it.
std::string npy_bytes(std::string_view dict, std::string_view data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  const size_t text = dict.size() + 1;
  const size_t padding = 64 - (prefix + text) % 64;
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  if (major == 1) {
    testing::add_u16(out, static_cast<uint16_t>(text + padding));
  } else {
    testing::add_u32(out, static_cast<uint32_t>(text + padding));
  }
  out += dict;
  out.append(padding, ' ');
  out += '\n';
  out += data;
  return out;
}

std::string dict_of(std::string_view descr, std::string_view shape, bool fortran = false) {
  return "{'descr': '" + std::string(descr) + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + std::string(shape) + ", }";
}

std::string random_bytes(size_t size, uint32_t seed, bool boolean = false) {
  std::mt19937 random(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(boolean ? random() & 1 : random());
  return out;
}

std::string bytes_of(const Tensor& tensor) {
  return std::string(reinterpret_cast<const char*>(tensor.bytes().data()), tensor.nbytes());
}

Tensor tensor_of(DType dtype, Shape shape, uint32_t seed) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  const std::string bytes = random_bytes(tensor.nbytes(), seed, dtype == DType::kBool);
  if (!bytes.empty()) std::memcpy(tensor.mutable_bytes().data(), bytes.data(), bytes.size());
  return tensor;
}

// Every dtype with a numpy type, with the descr numpy writes for it.
struct NumpyType {
  DType dtype;
  const char* descr;
};
constexpr NumpyType kNumpyTypes[] = {
    {DType::kBool, "|b1"},      {DType::kInt8, "|i1"},       {DType::kInt16, "<i2"},
    {DType::kInt32, "<i4"},     {DType::kInt64, "<i8"},      {DType::kUInt8, "|u1"},
    {DType::kUInt16, "<u2"},    {DType::kUInt32, "<u4"},     {DType::kUInt64, "<u8"},
    {DType::kFloat16, "<f2"},   {DType::kFloat32, "<f4"},    {DType::kFloat64, "<f8"},
    {DType::kComplex64, "<c8"}, {DType::kComplex128, "<c16"},
};

class NumpyTestBase : public ::testing::Test {
 protected:
  std::filesystem::path write(std::string_view bytes, const std::string& name) {
    const auto path = dir_ / name;
    write_file(path, bytes);
    return path;
  }
  Contents read_npy(std::string_view bytes) { return npy_format().read(write(bytes, "t.npy"), {}); }
  ErrorCode write_error(const Format& format, const Tree& tree, const std::string& name) {
    try {
      format.write(dir_ / name, tree, {.fsync = false});
    } catch (const Error& error) {
      return error.code();
    }
    ADD_FAILURE() << "the write succeeded";
    return ErrorCode::kIo;
  }
  testing::TempDir dir_;
};

// ---------------------------------------------------------------- npy

class NpyTest : public NumpyTestBase {};

TEST_F(NpyTest, HeaderIsByteIdenticalToNpSave) {
  // Header text and padding from numpy 2.3.5's np.save for these arrays.
  struct Case {
    DType dtype;
    Shape shape;
    const char* dict;
    size_t spaces;
    size_t total;
  };
  const Case cases[] = {
      {DType::kFloat32, {2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 58, 128},
      {DType::kFloat32, {}, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 62, 128},
      {DType::kBool, {3}, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", 60, 128},
      {DType::kComplex128, {0}, "{'descr': '<c16', 'fortran_order': False, 'shape': (0,), }", 59, 128},
      {DType::kUInt8, {1000000000000, 0},
       "{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000, 0), }", 46, 128},
      {DType::kInt64, Shape(40, 1),
       "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
       "1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), }",
       72, 256},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    std::string expected = "\x93NUMPY\x01";
    expected.push_back('\0');
    testing::add_u16(expected, static_cast<uint16_t>(c.total - 10));
    expected += c.dict;
    expected.append(c.spaces, ' ');
    expected += '\n';
    ASSERT_EQ(expected.size(), c.total);
    EXPECT_EQ(numpy_detail::format_npy_header(c.dtype, c.shape), expected);
  }
}

TEST_F(NpyTest, WritesTheFileNpSaveWrites) {
  const float values[] = {0, 1, 2, 3, 4, 5};
  const Tensor tensor = Tensor::from_values<float>(DType::kFloat32, {2, 3}, values);
  npy_format().write(dir_ / "a.npy", Tree(tensor), {.fsync = false});
  std::string expected = "\x93NUMPY\x01";
  expected += std::string("\0\x76\0", 3);
  expected += "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n";
  expected += std::string(reinterpret_cast<const char*>(values), sizeof(values));
  EXPECT_EQ(read_file(dir_ / "a.npy"), expected);
}

TEST_F(NpyTest, ReadsEveryDtypeAsAViewOfTheFile) {
  uint32_t seed = 1;
  for (const NumpyType& type : kNumpyTypes) {
    SCOPED_TRACE(type.descr);
    const size_t size = dtype_size(type.dtype);
    const std::string data = random_bytes(6 * size, seed++, type.dtype == DType::kBool);
    const Contents contents = read_npy(npy_bytes(dict_of(type.descr, "(2, 3)"), data));
    EXPECT_EQ(contents.format, "npy");
    ASSERT_TRUE(contents.tree.is_tensor());
    const Tensor& tensor = contents.tree.tensor();
    EXPECT_EQ(tensor.dtype(), type.dtype);
    EXPECT_EQ(tensor.shape(), (Shape{2, 3}));
    EXPECT_EQ(bytes_of(tensor), data);
    EXPECT_EQ(tensor.buffer().kind(), StorageKind::kMapped);
    ASSERT_EQ(contents.entries.size(), 1u);
    EXPECT_EQ(contents.entries[0].name, "");
    EXPECT_EQ(contents.entries[0].offset, 128u);
    EXPECT_EQ(contents.entries[0].nbytes, data.size());
  }
}

TEST_F(NpyTest, BigEndianDataIsSwappedOnRead) {
  uint32_t seed = 100;
  for (const NumpyType& type : kNumpyTypes) {
    SCOPED_TRACE(type.descr);
    std::string descr = type.descr;
    descr[0] = '>';
    const size_t size = dtype_size(type.dtype);
    const size_t unit = (type.dtype == DType::kComplex64 || type.dtype == DType::kComplex128) ? size / 2 : size;
    const std::string little = random_bytes(5 * size, seed++, type.dtype == DType::kBool);
    std::string big = little;
    for (size_t at = 0; at < big.size(); at += unit) std::reverse(big.begin() + at, big.begin() + at + unit);
    const Contents contents = read_npy(npy_bytes(dict_of(descr, "(5,)"), big));
    EXPECT_EQ(contents.tree.tensor().dtype(), type.dtype);
    EXPECT_EQ(bytes_of(contents.tree.tensor()), little);
  }
}

TEST_F(NpyTest, FortranOrderIsTransposedToCOrder) {
  // C-order value at (i, j, k) is i*100 + j*10 + k; the file lists the
  // elements first index fastest.
  std::vector<double> fortran;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) fortran.push_back(i * 100 + j * 10 + k);
  const Contents contents = read_npy(npy_bytes(
      dict_of("<f8", "(2, 3, 4)", true), std::string(reinterpret_cast<const char*>(fortran.data()), 24 * 8)));
  const Tensor& tensor = contents.tree.tensor();
  ASSERT_EQ(tensor.shape(), (Shape{2, 3, 4}));
  const auto values = tensor.values<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(values[static_cast<size_t>(i * 12 + j * 4 + k)], i * 100 + j * 10 + k);
}

TEST_F(NpyTest, FortranOrderBigEndianAndDegenerateShapes) {
  // 2x3 int16, big-endian, column-major: C order 0 1 2 / 3 4 5.
  const std::string data("\0\0\0\3\0\1\0\4\0\2\0\5", 12);
  const Tensor swapped = read_npy(npy_bytes(dict_of(">i2", "(2, 3)", true), data)).tree.tensor();
  const auto values = swapped.values<int16_t>();
  EXPECT_EQ(std::vector<int16_t>(values.begin(), values.end()), (std::vector<int16_t>{0, 1, 2, 3, 4, 5}));
  // At most one axis longer than 1: both orders coincide, no copy needed.
  const std::string row = random_bytes(20, 3);
  const Tensor view = read_npy(npy_bytes(dict_of("<i4", "(1, 5, 1)", true), row)).tree.tensor();
  EXPECT_EQ(bytes_of(view), row);
  EXPECT_EQ(view.buffer().kind(), StorageKind::kMapped);
  // Zero-size with Fortran order.
  EXPECT_EQ(read_npy(npy_bytes(dict_of("<f4", "(2, 0, 3)", true), "")).tree.tensor().numel(), 0u);
}

TEST_F(NpyTest, Versions2And3AndPython2Longs) {
  const std::string data = random_bytes(24, 9);
  EXPECT_EQ(bytes_of(read_npy(npy_bytes(dict_of("<f4", "(2, 3)"), data, 2)).tree.tensor()), data);
  EXPECT_EQ(bytes_of(read_npy(npy_bytes(dict_of("<f4", "(2, 3)"), data, 3)).tree.tensor()), data);
  EXPECT_EQ(read_npy(npy_bytes(dict_of("<f4", "(2L, 3L)"), data)).tree.tensor().shape(), (Shape{2, 3}));
}

TEST_F(NpyTest, AcceptsEveryValidSpellingOfTheDict) {
  const std::string data = random_bytes(6, 4);
  for (const char* dict : {
           "{\"shape\": (6,), \"descr\": \"|u1\", \"fortran_order\": False}",
           "{ 'descr' : '<u1' ,\n 'fortran_order' : False ,\t'shape' : ( 6 , ) }",
           "{'descr': 'u1', 'fortran_order': False, 'shape': (6,),}",
           "{'descr': '=u1', 'fortran_order': False, 'shape': (6,), }",
       }) {
    SCOPED_TRACE(dict);
    const Tensor tensor = read_npy(npy_bytes(dict, data)).tree.tensor();
    EXPECT_EQ(tensor.dtype(), DType::kUInt8);
    EXPECT_EQ(bytes_of(tensor), data);
  }
}

TEST_F(NpyTest, UnalignedDataIsCopied) {
  // A hand-made header of 75 bytes puts float64 data at offset 85.
  std::string text = dict_of("<f8", "(3,)");
  text.append(75 - 1 - text.size(), ' ');
  text += '\n';
  std::string bytes = "\x93NUMPY\x01";
  bytes.push_back('\0');
  testing::add_u16(bytes, 75);
  const std::string data = random_bytes(24, 5);
  bytes += text + data;
  const Contents contents = read_npy(bytes);
  EXPECT_EQ(contents.entries[0].offset, 85u);
  EXPECT_EQ(bytes_of(contents.tree.tensor()), data);
  EXPECT_EQ(contents.tree.tensor().buffer().kind(), StorageKind::kHeap);
  EXPECT_EQ(contents.tree.tensor().values<double>().size(), 3u);
}

TEST_F(NpyTest, RoundTripsEveryDtypeAndShapeBitExact) {
  uint32_t seed = 1;
  for (const NumpyType& type : kNumpyTypes) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{2, 3}, Shape{1, 1, 1, 7}}) {
      const Tensor tensor = tensor_of(type.dtype, shape, seed++);
      const auto path = dir_ / "rt.npy";
      npy_format().write(path, Tree(tensor), {.fsync = false});
      const Contents contents = npy_format().read(path, {});
      EXPECT_TRUE(contents.tree.tensor().equals(tensor)) << type.descr;
      const std::string first = read_file(path);
      npy_format().write(dir_ / "again.npy", contents.tree, {.fsync = false});
      EXPECT_EQ(read_file(dir_ / "again.npy"), first);
      EXPECT_EQ(first.size() % 64, tensor.nbytes() % 64);  // the header is a multiple of 64
    }
  }
}

TEST_F(NpyTest, WritesExactlyOneTensor) {
  const Tensor tensor = tensor_of(DType::kInt32, {4}, 1);
  Tree single = Tree::map();
  single.set("only", tensor);
  npy_format().write(dir_ / "one.npy", single, {.fsync = false});
  EXPECT_TRUE(npy_format().read(dir_ / "one.npy", {}).tree.tensor().equals(tensor));
  Tree nested = Tree::map();
  nested.set("a", single);
  EXPECT_NO_THROW(npy_format().write(dir_ / "nested.npy", nested, {.fsync = false}));

  Tree two = single;
  two.set("other", tensor);
  EXPECT_EQ(write_error(npy_format(), two, "two.npy"), ErrorCode::kUnsupported);
  Tree mixed = single;
  mixed.set("step", 3);
  EXPECT_EQ(write_error(npy_format(), mixed, "mixed.npy"), ErrorCode::kUnsupported);
  EXPECT_EQ(write_error(npy_format(), Tree(int64_t{3}), "int.npy"), ErrorCode::kUnsupported);
  EXPECT_EQ(write_error(npy_format(), Tree::map(), "empty.npy"), ErrorCode::kUnsupported);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "two.npy"));
}

TEST_F(NpyTest, DtypesWithoutANumpyTypeAreRefused) {
  // np.save writes ml_dtypes arrays as raw void ('<V2'), losing the type.
  for (DType dtype : {DType::kBFloat16, DType::kFloat8E4M3FN, DType::kFloat8E5M2}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    try {
      npy_format().write(dir_ / "x.npy", Tree(tensor_of(dtype, {2}, 1)), {.fsync = false});
      ADD_FAILURE() << "written";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
      EXPECT_NE(error.message().find(std::string(dtype_name(dtype))), std::string::npos) << error.what();
    }
    EXPECT_EQ(write_error(npz_format(), Tree(tensor_of(dtype, {2}, 1)), "x.npz"), ErrorCode::kUnsupported);
  }
  EXPECT_TRUE(dir_.list().empty()) << "no temporary file is left behind";
}

// ---------------------------------------------------------------- npz

class NpzTest : public NumpyTestBase {
 protected:
  Tree every_dtype_tree() {
    Tree tree = Tree::map();
    uint32_t seed = 1;
    for (const NumpyType& type : kNumpyTypes) {
      tree.set(std::string(dtype_name(type.dtype)), tensor_of(type.dtype, {3, 5}, seed++));
    }
    tree.set("scalar", tensor_of(DType::kFloat64, {}, seed++));
    tree.set("empty", tensor_of(DType::kFloat32, {0}, seed++));
    tree.set("zero_size", tensor_of(DType::kInt16, {3, 0, 2}, seed++));
    tree.set("ünïcödé 名前 🙂", tensor_of(DType::kUInt8, {4}, seed++));
    return tree;
  }
};

TEST_F(NpzTest, RoundTripsEveryDtypeAlignedAndMapped) {
  const Tree tree = every_dtype_tree();
  const auto path = dir_ / "all.npz";
  npz_format().write(path, tree, {.fsync = false});
  const Contents contents = npz_format().read(path, {.verify = true});
  EXPECT_EQ(contents.format, "npz");
  EXPECT_TRUE(contents.tree == tree);
  ASSERT_EQ(contents.entries.size(), tree.size());
  for (const EntryInfo& entry : contents.entries) {
    SCOPED_TRACE(entry.name);
    EXPECT_EQ(entry.offset % 64, 0u) << "extras on: every array is 64-byte aligned";
    EXPECT_EQ(contents.tree.at(entry.name).tensor().buffer().kind(), StorageKind::kMapped);
  }
  EXPECT_EQ(contents.entries[0].name, "bool");
  npz_format().write(dir_ / "again.npz", contents.tree, {.fsync = false});
  EXPECT_EQ(read_file(dir_ / "again.npz"), read_file(path));
}

TEST_F(NpzTest, WithoutExtrasTheFileIsWhatNpSavezWrites) {
  // np.savez(f, **{"a": np.arange(3, dtype="<f4"), "b.c": np.array([[1, 2], [3, 4]], dtype="<i2")})
  // with numpy 2.3.5 on Python 3.11.
  const char* hex =
      "504b03042d000000000000002100b68c8653ffffffffffffffff05001400612e6e7079010010008c000000000000008c"
      "00000000000000934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572"
      "273a2046616c73652c20277368617065273a2028332c292c207d20202020202020202020202020202020202020202020"
      "20202020202020202020202020202020202020202020202020202020202020202020202020200a000000000000803f00"
      "000040504b03042d00000000000000210000cadc6dffffffffffffffff07001400622e632e6e70790100100088000000"
      "000000008800000000000000934e554d5059010076007b276465736372273a20273c6932272c2027666f727472616e5f"
      "6f72646572273a2046616c73652c20277368617065273a2028322c2032292c207d202020202020202020202020202020"
      "202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a01000200"
      "03000400504b01022d032d000000000000002100b68c86538c0000008c00000005000000000000000000000080010000"
      "0000612e6e7079504b01022d032d00000000000000210000cadc6d880000008800000007000000000000000000000080"
      "01c3000000622e632e6e7079504b0506000000000200020068000000840100000000";
  std::string expected;
  for (const char* p = hex; *p != '\0'; p += 2) expected.push_back(static_cast<char>(std::stoi(std::string(p, 2), nullptr, 16)));
  const float a[] = {0, 1, 2};
  const int16_t bc[] = {1, 2, 3, 4};
  Tree tree = Tree::map();
  tree.set("a", Tensor::from_values<float>(DType::kFloat32, {3}, a));
  tree.set("b.c", Tensor::from_values<int16_t>(DType::kInt16, {2, 2}, bc));
  npz_format().write(dir_ / "plain.npz", tree, {.extras = false, .fsync = false});
  EXPECT_EQ(read_file(dir_ / "plain.npz"), expected);
  // And ckpt reads numpy's bytes back to the same tree.
  EXPECT_TRUE(npz_format().read(write(expected, "numpy.npz"), {.verify = true}).tree == tree);
}

TEST_F(NpzTest, TheTreeIsAFlatMapOfDottedNames) {
  Tree layers = Tree::list();
  layers.push_back(tensor_of(DType::kFloat32, {2}, 1));
  layers.push_back(tensor_of(DType::kFloat32, {2}, 2));
  Tree model = Tree::map();
  model.set("w", tensor_of(DType::kFloat32, {3}, 3));
  model.set("layers", layers);
  Tree tree = Tree::map();
  tree.set("model", model);
  npz_format().write(dir_ / "nested.npz", tree, {.fsync = false});
  const zip_detail::ZipReader zip(detail::MappedFile::open(dir_ / "nested.npz"));
  ASSERT_EQ(zip.entries().size(), 3u);
  EXPECT_EQ(zip.entries()[0].name, "model.w.npy");
  EXPECT_EQ(zip.entries()[1].name, "model.layers.0.npy");
  EXPECT_EQ(zip.entries()[2].name, "model.layers.1.npy");
  const Tree loaded = npz_format().read(dir_ / "nested.npz", {}).tree;
  ASSERT_TRUE(loaded.is_map());
  EXPECT_EQ(loaded.size(), 3u);
  ASSERT_NE(loaded.find(Key("model.layers.1")), nullptr);
  EXPECT_TRUE(loaded.at("model.layers.1").tensor().equals(layers[1].tensor()));
}

TEST_F(NpzTest, TenThousandTensors) {
  Tree tree = Tree::map();
  for (int i = 0; i < 10000; ++i) {
    tree.set("layers." + std::to_string(i) + ".w", tensor_of(DType::kFloat32, {3}, static_cast<uint32_t>(i)));
  }
  npz_format().write(dir_ / "many.npz", tree, {.fsync = false});
  const Contents contents = npz_format().read(dir_ / "many.npz", {.verify = true});
  EXPECT_EQ(contents.entries.size(), 10000u);
  EXPECT_TRUE(contents.tree == tree);
}

TEST_F(NpzTest, EmptyTreeIsAnEmptyArchive) {
  npz_format().write(dir_ / "empty.npz", Tree::map(), {.fsync = false});
  EXPECT_EQ(read_file(dir_ / "empty.npz"), std::string("PK\x05\x06", 4) + std::string(18, '\0'));
  const Contents contents = npz_format().read(dir_ / "empty.npz", {});
  EXPECT_TRUE(contents.tree.is_map());
  EXPECT_EQ(contents.tree.size(), 0u);
}

TEST_F(NpzTest, ReadsStoredAndDeflatedMembers) {
  // As np.savez_compressed writes them, plus byte-swapped and Fortran members.
  const std::string f4 = random_bytes(24, 1);
  const std::string i8 = random_bytes(800, 2);
  const testing::TestZip zip = testing::build_test_zip({
      {.name = "stored.npy", .data = npy_bytes(dict_of("<f4", "(2, 3)"), f4)},
      {.name = "deflated.npy", .data = npy_bytes(dict_of("<i8", "(100,)"), i8), .method = 8},
      {.name = "swapped.npy", .data = npy_bytes(dict_of(">u2", "(2,)"), std::string("\x01\x02\x03\x04", 4)), .method = 8},
      {.name = "fortran.npy", .data = npy_bytes(dict_of("|u1", "(2, 2)", true), "\x01\x03\x02\x04")},
  });
  const Contents contents = npz_format().read(write(zip.bytes, "mixed.npz"), {.verify = true});
  ASSERT_EQ(contents.entries.size(), 4u);
  EXPECT_EQ(bytes_of(contents.tree.at("stored").tensor()), f4);
  EXPECT_EQ(contents.entries[0].offset, zip.data_offsets[0] + 128);
  EXPECT_EQ(bytes_of(contents.tree.at("deflated").tensor()), i8);
  EXPECT_EQ(contents.tree.at("deflated").tensor().buffer().kind(), StorageKind::kHeap);
  EXPECT_EQ(contents.entries[1].offset, 0u) << "a deflated member has no data offset in the file";
  EXPECT_EQ(bytes_of(contents.tree.at("swapped").tensor()), std::string("\x02\x01\x04\x03", 4));
  EXPECT_EQ(bytes_of(contents.tree.at("fortran").tensor()), std::string("\x01\x02\x03\x04", 4));
}

TEST_F(NpzTest, VerifyChecksTheCrcOfStoredMembers) {
  testing::TestZip zip = testing::build_test_zip(
      {{.name = "a.npy", .data = npy_bytes(dict_of("<f4", "(4,)"), random_bytes(16, 1))}});
  zip.bytes[zip.data_offsets[0] + 130] ^= 0x40;
  const auto path = write(zip.bytes, "flipped.npz");
  EXPECT_NO_THROW(npz_format().read(path, {}));
  try {
    npz_format().read(path, {.verify = true});
    ADD_FAILURE() << "a CRC mismatch passed verification";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().entry, "a.npy");
  }
}

TEST_F(NpzTest, NonTensorLeavesAreRefused) {
  Tree tree = Tree::map();
  tree.set("w", tensor_of(DType::kFloat32, {2}, 1));
  tree.set("step", 7);
  try {
    npz_format().write(dir_ / "mixed.npz", tree, {.fsync = false});
    ADD_FAILURE() << "written";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_EQ(error.context().entry, "step");
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "mixed.npz"));
}

TEST_F(NpzTest, NamesThatAreNotUtf8AreRefused) {
  // Zip readers hold names with the UTF-8 flag to it (and ckpt's comment
  // holds aliases' names as JSON): such a file could not be read back.
  for (const char* name : {"bad\xff", "surrogate\xed\xa0\x80"}) {
    Tree tree = Tree::map();
    tree.set(name, tensor_of(DType::kFloat32, {2}, 1));
    try {
      npz_format().write(dir_ / "bad.npz", tree, {.fsync = false});
      ADD_FAILURE() << "written";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
      EXPECT_EQ(error.context().entry, name);
      EXPECT_NE(error.message().find("not valid UTF-8"), std::string::npos) << error.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir_ / "bad.npz"));
  }
}

// ---------------------------------------------------------------- the plugins

TEST(NumpyFormatTest, DetectsByContent) {
  const auto detect = [](const Format& format, std::string_view bytes, uint64_t size = 0) {
    return format.detect(std::as_bytes(std::span(bytes)), size == 0 ? bytes.size() : size);
  };
  const std::string npy = npy_bytes(dict_of("<f4", "(1,)"), "abcd");
  EXPECT_TRUE(detect(npy_format(), npy));
  EXPECT_FALSE(detect(npz_format(), npy));
  EXPECT_FALSE(detect(npy_format(), "\x93NUMP"));

  const std::string npz = testing::build_test_zip({{.name = "w.npy", .data = npy}}).bytes;
  EXPECT_TRUE(detect(npz_format(), npz));
  EXPECT_FALSE(detect(npy_format(), npz));
  const std::string torch = testing::build_test_zip({{.name = "archive/data.pkl", .data = "\x80\x02}q"}}).bytes;
  EXPECT_FALSE(detect(npz_format(), torch));
  const std::string empty = testing::build_test_zip({}).bytes;
  EXPECT_TRUE(detect(npz_format(), empty));
  EXPECT_FALSE(detect(npz_format(), empty, empty.size() + 100));
  // A first name cut off by the 4096-byte head is not claimed.
  const std::string long_name = testing::build_test_zip({{.name = std::string(5000, 'n') + ".npy", .data = ""}}).bytes;
  EXPECT_FALSE(detect(npz_format(), std::string_view(long_name).substr(0, 4096), long_name.size()));
  EXPECT_FALSE(detect(npz_format(), "{\"__metadata__\":{}}"));
}

TEST(NumpyFormatTest, Descriptions) {
  EXPECT_EQ(npy_format().id(), "npy");
  EXPECT_EQ(npz_format().id(), "npz");
  EXPECT_EQ(npy_format().extensions(), std::vector<std::string_view>{".npy"});
  EXPECT_EQ(npz_format().extensions(), std::vector<std::string_view>{".npz"});
  EXPECT_TRUE(npy_format().capabilities().single_tensor);
  EXPECT_FALSE(npz_format().capabilities().single_tensor);
  EXPECT_FALSE(npz_format().capabilities().nested_tree);
  EXPECT_EQ(npz_format().dtypes().size(), std::size(kNumpyTypes));
  for (const NumpyType& type : kNumpyTypes) EXPECT_EQ(numpy_detail::npy_descr(type.dtype), type.descr);
}

}  // namespace
}  // namespace ckpt
