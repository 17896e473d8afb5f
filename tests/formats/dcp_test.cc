// PyTorch DCP directories: a checkpoint built by hand (its .metadata pickle
// written opcode by opcode as torch 2.13 writes it, its items torch.save
// archives from torch_test_builder.h) reads back; ckpt's writer round-trips;
// and malformed checkpoints, one defect at a time, each give the expected
// ckpt::Error (a .metadata that would run code is refused naming the global).
// Real torch's files are in tests/interop/test_dcp.py.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <cstring>
#include <optional>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/text.h"
#include "formats/torch_test_builder.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::f32_bytes;
using testing::Pkl;

constexpr std::string_view kMeta = "torch.distributed.checkpoint.metadata";

// The hand-built checkpoint's knobs: one tensor item "model.w" (float32 [4],
// one chunk) and one bytes item "epoch" (the int 7), both in __0_0.distcp.
struct Spec {
  std::string dtype = "float32";            // properties' torch dtype
  std::vector<int64_t> size = {4};           // the tensor's global size
  std::vector<int64_t> chunk_offsets = {0};
  std::vector<int64_t> chunk_sizes = {4};
  std::vector<int64_t> index_offsets = {0};  // MetadataIndex.offset of the chunk's storage entry
  std::string relative_path = "__0_0.distcp";
  std::optional<int64_t> tensor_offset;      // default: where the archive is
  std::optional<int64_t> tensor_length;
  std::vector<std::string> transforms;       // transform_descriptors of the tensor's storage
  bool bytes_storage = true;                 // storage_data has the bytes item
  std::string duplicate_fqn;                 // a second state_dict_metadata entry of this name
  // A global called in storage_meta.modules (the code-execution payload).
  std::string evil_module, evil_name;
  bool root_is_dict = false;                 // the pickle is a plain dict, not Metadata
  // A second chunk of chunk_sizes at these offsets, stored in the same
  // archive as the first (both hold [1, 2, 3, 4]).
  std::vector<int64_t> second_chunk;
  bool evil_bytes_item = false;  // the bytes item's archive calls os.system
};

Pkl& newobj(Pkl& p, std::string_view module, std::string_view name) {
  return p.stack_global(module, name).empty_tuple().op(0x81);
}
Pkl& size_value(Pkl& p, const std::vector<int64_t>& values) {
  return p.stack_global("torch", "Size").int_tuple(values).tuple1().reduce();
}
Pkl& storage_info(Pkl& p, const std::string& path, int64_t offset, int64_t length,
                  const std::vector<std::string>& transforms = {}) {
  newobj(p, "torch.distributed.checkpoint.filesystem", "_StorageInfo").empty_dict().mark();
  p.str("relative_path").str(path).str("offset").integer(offset).str("length").integer(length);
  if (!transforms.empty()) {
    p.str("transform_descriptors").empty_list().mark();
    for (const std::string& t : transforms) p.str(t);
    p.appends();
  }
  return p.setitems().build();
}

std::string metadata_pickle(const Spec& s, int64_t tensor_offset, int64_t tensor_length, int64_t bytes_offset,
                            int64_t bytes_length) {
  Pkl p(4);
  if (s.root_is_dict) return p.empty_dict().stop();
  newobj(p, kMeta, "Metadata").empty_dict().mark();
  p.str("state_dict_metadata").empty_dict().mark();
  p.str("model.w");
  newobj(p, kMeta, "TensorStorageMetadata").empty_dict().mark();
  p.str("properties");
  newobj(p, kMeta, "TensorProperties").mark();
  p.stack_global("torch", s.dtype);
  p.stack_global("torch.serialization", "_get_layout").str("torch.strided").tuple1().reduce();
  p.boolean(false);
  p.stack_global(kMeta, "_MEM_FORMAT_ENCODING").integer(0).tuple1().reduce();
  p.boolean(false).tuple().build();
  p.str("size");
  size_value(p, s.size);
  p.str("chunks").empty_list();
  newobj(p, kMeta, "ChunkStorageMetadata").empty_dict().mark();
  p.str("offsets");
  size_value(p, s.chunk_offsets);
  p.str("sizes");
  size_value(p, s.chunk_sizes);
  p.setitems().build().append();
  if (!s.second_chunk.empty()) {
    newobj(p, kMeta, "ChunkStorageMetadata").empty_dict().mark();
    p.str("offsets");
    size_value(p, s.second_chunk);
    p.str("sizes");
    size_value(p, s.chunk_sizes);
    p.setitems().build().append();
  }
  p.setitems().build();
  p.str("epoch");
  newobj(p, kMeta, "BytesStorageMetadata");
  if (!s.duplicate_fqn.empty()) {
    p.str(s.duplicate_fqn);
    newobj(p, kMeta, "BytesStorageMetadata");
  }
  p.setitems();

  p.str("planner_data").empty_dict().mark();
  p.str("model.w").str("model").str("w").tuple2();
  p.str("epoch").str("epoch").tuple1();
  p.setitems();

  p.str("storage_data").empty_dict().mark();
  newobj(p, kMeta, "MetadataIndex").empty_dict().mark();
  p.str("fqn").str("model.w").str("offset");
  size_value(p, s.index_offsets);
  p.str("index").integer(0).setitems().build();
  storage_info(p, s.relative_path, tensor_offset, tensor_length, s.transforms);
  if (!s.second_chunk.empty()) {
    newobj(p, kMeta, "MetadataIndex").empty_dict().mark();
    p.str("fqn").str("model.w").str("offset");
    size_value(p, s.second_chunk);
    p.str("index").integer(1).setitems().build();
    storage_info(p, s.relative_path, tensor_offset, tensor_length, s.transforms);
  }
  if (s.bytes_storage) {
    newobj(p, kMeta, "MetadataIndex").empty_dict().mark();
    p.str("fqn").str("epoch").str("offset").none().str("index").none().setitems().build();
    storage_info(p, "__0_0.distcp", bytes_offset, bytes_length);
  }
  p.setitems();

  p.str("storage_meta");
  newobj(p, kMeta, "StorageMeta").empty_dict().mark();
  p.str("checkpoint_id").stack_global("pathlib", "PosixPath").str("/").str("tmp").tuple2().reduce();
  p.str("modules").empty_list();
  if (!s.evil_module.empty()) p.stack_global(s.evil_module, s.evil_name).str("echo pwned").tuple1().reduce().append();
  p.setitems().build();
  p.str("version").str("1.0.0");
  return p.setitems().build().stop();
}

// The archive of the tensor [1, 2, 3, 4] and of the int 7, as torch.save writes them.
std::string tensor_archive() {
  Pkl body;
  testing::tensor_value(body, {});
  return testing::torch_zip(testing::pickle_of(body), {{"0", f32_bytes({1, 2, 3, 4})}}).bytes;
}
std::string int_archive() { return testing::torch_zip(Pkl(2).integer(7).stop().bytes(), {}).bytes; }
std::string evil_archive() {
  return testing::torch_zip(Pkl(2).global("os", "system").str("echo pwned").tuple1().reduce().stop().bytes(), {})
      .bytes;
}

fs::path build(const fs::path& root, const Spec& s = {}) {
  const fs::path dir = root / "dcp";
  fs::create_directories(dir);
  const std::string tensor = tensor_archive();
  const std::string value = s.evil_bytes_item ? evil_archive() : int_archive();
  testing::write_file(dir / "__0_0.distcp", tensor + value);
  const int64_t tensor_length = s.tensor_length.value_or(static_cast<int64_t>(tensor.size()));
  testing::write_file(dir / ".metadata",
                      metadata_pickle(s, s.tensor_offset.value_or(0), tensor_length, static_cast<int64_t>(tensor.size()),
                                      static_cast<int64_t>(value.size())));
  return dir;
}

// Loads the checkpoint `s` describes; returns the error it must throw.
Error load_error(const Spec& s) {
  testing::TempDir temp;
  const fs::path dir = build(temp.path(), s);
  try {
    load(dir);
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "loading did not throw";
  return Error(ErrorCode::kIo, "none");
}

std::string bytes_of(const Tensor& tensor) {
  return std::string(reinterpret_cast<const char*>(tensor.bytes().data()), tensor.nbytes());
}

TEST(DcpTest, ReadsHandBuiltCheckpoint) {
  testing::TempDir temp;
  const fs::path dir = build(temp.path());
  Contents contents = open(dir);
  EXPECT_EQ(contents.format, "dcp");
  const Tensor& w = contents.tree.at("model.w").tensor();
  EXPECT_EQ(w.dtype(), DType::kFloat32);
  EXPECT_EQ(w.shape(), (Shape{4}));
  EXPECT_EQ(bytes_of(w), f32_bytes({1, 2, 3, 4}));
  EXPECT_EQ(contents.tree.at("epoch").integer(), 7);
  // Nested as planner_data says: {"model": {"w": ...}}.
  ASSERT_NE(contents.tree.find("model"), nullptr);
  EXPECT_TRUE(contents.tree.find("model")->is_map());
  ASSERT_EQ(contents.entries.size(), 1u);
  EXPECT_EQ(contents.entries[0].name, "model.w");
}

TEST(DcpTest, ChunksAssembleAndBoxesReadTheirPart) {
  testing::TempDir temp;
  const fs::path dir = build(temp.path(), {.size = {8}, .second_chunk = {4}});
  const Tree whole = load(dir);
  EXPECT_EQ(whole.at("model.w").tensor().shape(), (Shape{8}));
  EXPECT_EQ(bytes_of(whole.at("model.w").tensor()), f32_bytes({1, 2, 3, 4, 1, 2, 3, 4}));
  // A "rank" that asks for elements 2..6 gets them from both chunks.
  const Tree part = load(dir, {.boxes = {{"model.w", Box{{2}, {4}}}}});
  EXPECT_EQ(part.at("model.w").tensor().shape(), (Shape{4}));
  EXPECT_EQ(bytes_of(part.at("model.w").tensor()), f32_bytes({3, 4, 1, 2}));
  EXPECT_EQ(part.at("epoch").integer(), 7);
}

TEST(DcpTest, WriterRoundTrips) {
  testing::TempDir temp;
  Tree tree = Tree::map();
  Tree model = Tree::map();
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 8.0f, 9.0f};
  Buffer buffer = Buffer::allocate(values.size() * 4);
  std::memcpy(buffer.mutable_bytes().data(), values.data(), values.size() * 4);
  model.set("w", Tree(Tensor(DType::kFloat32, {2, 3}, buffer)));
  tree.set("model", std::move(model));
  Tree params = Tree::list();
  params.push_back(Tree(int64_t{0}));
  Tree group = Tree::map();
  group.set("lr", Tree(0.5));
  group.set("params", std::move(params));
  Tree groups = Tree::list();
  groups.push_back(std::move(group));
  tree.set("param_groups", std::move(groups));
  tree.set("epoch", Tree(int64_t{12}));
  tree.set("name", Tree(std::string("run")));
  const fs::path out = temp.path() / "out";
  save(out, tree, {.format = "dcp"});
  EXPECT_TRUE(fs::is_regular_file(out / ".metadata"));
  EXPECT_TRUE(fs::is_regular_file(out / "__0_0.distcp"));
  Tree back = load(out);
  EXPECT_EQ(bytes_of(back.at("model.w").tensor()), bytes_of(tree.at("model.w").tensor()));
  EXPECT_EQ(back.at("model.w").tensor().shape(), (Shape{2, 3}));
  EXPECT_EQ(back.at("epoch").integer(), 12);
  EXPECT_EQ(back.at("name").string(), "run");
  // A list of maps is walked (param_groups.0.lr); a list of ints is one value.
  EXPECT_EQ(back.at("param_groups.0.lr").real(), 0.5);
  ASSERT_TRUE(back.at("param_groups").is_list());
  EXPECT_EQ(back.at("param_groups.0.params").size(), 1u);
}

TEST(DcpTest, CodeExecutionPayloadIsRefusedByName) {
  for (const auto& [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"os", "system"}, {"builtins", "eval"}, {"posix", "system"}, {"subprocess", "Popen"}}) {
    Spec s;
    s.evil_module = module;
    s.evil_name = name;
    const Error error = load_error(s);
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << module;
    EXPECT_NE(error.message().find(module + "." + name), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(".metadata"), std::string::npos) << error.what();
  }
}

TEST(DcpTest, MalformedOneDefectAtATime) {
  struct Case {
    const char* what;
    Spec spec;
    ErrorCode code;
    const char* message;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, auto edit, ErrorCode code, const char* message) {
    Spec s;
    edit(s);
    cases.push_back({what, s, code, message});
  };
  add("root", [](Spec& s) { s.root_is_dict = true; }, ErrorCode::kCorrupt, "is not a");
  add("chunk past size", [](Spec& s) { s.chunk_offsets = {2}; s.index_offsets = {2}; }, ErrorCode::kCorrupt,
      "lies outside the tensor's size");
  add("chunk rank", [](Spec& s) { s.chunk_offsets = {0, 0}; s.chunk_sizes = {4, 1}; }, ErrorCode::kCorrupt,
      "dimensions");
  add("chunk without storage", [](Spec& s) { s.index_offsets = {1}; }, ErrorCode::kCorrupt, "no entry in storage_data");
  add("bytes without storage", [](Spec& s) { s.bytes_storage = false; }, ErrorCode::kCorrupt,
      "no entry in storage_data");
  add("offset past file", [](Spec& s) { s.tensor_offset = 1 << 20; }, ErrorCode::kCorrupt, "extends past the end");
  add("length past file", [](Spec& s) { s.tensor_length = 1 << 20; }, ErrorCode::kCorrupt, "extends past the end");
  add("negative length", [](Spec& s) { s.tensor_length = -1; }, ErrorCode::kCorrupt, "negative");
  add("path leaves directory", [](Spec& s) { s.relative_path = "../__0_0.distcp"; }, ErrorCode::kCorrupt,
      "not a file name");
  add("missing data file", [](Spec& s) { s.relative_path = "__1_0.distcp"; }, ErrorCode::kCorrupt,
      "data file is missing");
  add("dtype disagrees", [](Spec& s) { s.dtype = "float64"; }, ErrorCode::kCorrupt, "where the metadata declares");
  add("shape disagrees", [](Spec& s) { s.size = {5}; s.chunk_sizes = {5}; }, ErrorCode::kCorrupt,
      "where the metadata declares");
  add("archive cut short", [](Spec& s) { s.tensor_length = 100; }, ErrorCode::kCorrupt, "torch.save archive");
  add("transforms", [](Spec& s) { s.transforms = {"zstd"}; }, ErrorCode::kUnsupported, "transforms");
  add("duplicate fqn", [](Spec& s) { s.duplicate_fqn = "epoch"; }, ErrorCode::kCorrupt, "twice");
  add("unknown dtype", [](Spec& s) { s.dtype = "not_a_dtype"; }, ErrorCode::kUnsupported, "torch.not_a_dtype");
  add("bytes item runs code", [](Spec& s) { s.evil_bytes_item = true; }, ErrorCode::kUnsupported, "os.system");
  add("chunks overlap", [](Spec& s) { s.size = {6}; s.second_chunk = {2}; }, ErrorCode::kCorrupt, "overlap");
  add("chunks leave a hole", [](Spec& s) { s.size = {9}; s.second_chunk = {4}; }, ErrorCode::kCorrupt, "uncovered");
  for (const Case& c : cases) {
    const Error error = load_error(c.spec);
    EXPECT_EQ(error.code(), c.code) << c.what << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find(c.message), std::string::npos) << c.what << ": " << error.what();
  }
}

TEST(DcpTest, VerifyChecksTheItemsRecords) {
  testing::TempDir temp;
  const fs::path dir = build(temp.path());
  // The records' zip CRC-32s are the checksums a DCP checkpoint stores: each
  // tensor of one chunk names its record's, as the torch reader does.
  const Contents intact = verify(dir);
  EXPECT_EQ(intact.checksum, ChecksumKind::kCrc32);
  const auto w = std::find_if(intact.entries.begin(), intact.entries.end(),
                              [](const EntryInfo& entry) { return entry.name == "model.w"; });
  ASSERT_NE(w, intact.entries.end());
  ASSERT_EQ(w->checksum.size(), 8u);
  const std::string floats = f32_bytes({1, 2, 3, 4});
  EXPECT_EQ(w->checksum, detail::hex8(detail::crc32(std::as_bytes(std::span(floats.data(), floats.size())))));
  std::string data = testing::read_file(dir / "__0_0.distcp");
  const size_t at = data.find(floats);
  ASSERT_NE(at, std::string::npos);
  data[at] = static_cast<char>(data[at] ^ 0x40);
  testing::write_file(dir / "__0_0.distcp", data);
  EXPECT_NO_THROW(load(dir));  // a lazy load reads no bytes to check
  try {
    load(dir, {.verify = true});
    ADD_FAILURE() << "verify passed";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_NE(std::string(error.what()).find("CRC-32"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("model.w"), std::string::npos) << error.what();
  }
}

TEST(DcpTest, TruncatedMetadataIsCorrupt) {
  testing::TempDir temp;
  const fs::path dir = build(temp.path());
  const std::string metadata = testing::read_file(dir / ".metadata");
  for (size_t cut : {size_t{0}, size_t{1}, metadata.size() / 2, metadata.size() - 1}) {
    testing::write_file(dir / ".metadata", metadata.substr(0, cut));
    try {
      load(dir);
      ADD_FAILURE() << "cut at " << cut;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << cut << ": " << error.what();
    }
  }
}

TEST(DcpTest, DetectsOnlyDirectoriesWithMetadata) {
  testing::TempDir temp;
  const fs::path dir = build(temp.path());
  EXPECT_EQ(detect(dir).id(), "dcp");
  fs::remove(dir / ".metadata");
  EXPECT_THROW(detect(dir), Error);
}

}  // namespace
}  // namespace ckpt
