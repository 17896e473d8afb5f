// Malformed Orbax checkpoints, one defect at a time (like llama.cpp's
// test-gguf.cpp): OCDBT envelopes, nodes and references, zarr metadata and
// chunks, _METADATA. Each expects its error code, a message naming the
// check that fired, and the file or entry.

#include <gtest/gtest.h>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/orbax/format.h"
#include "formats/orbax_test_builder.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::ocdbt::ItemBuilder;
namespace ocdbt = testing::ocdbt;

class OrbaxMalformedTest : public ::testing::Test {
 protected:
  Error error_of(const ItemBuilder& item, const std::function<void(const std::filesystem::path&)>& edit = {}) {
    const auto dir = dir_ / "item";
    std::filesystem::remove_all(dir);
    item.write(dir);
    if (edit) edit(dir);
    try {
      orbax_format().read(dir, {});
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(dir.string()), std::string::npos) << error.what();
      return error;
    }
    ADD_FAILURE() << "the checkpoint was accepted";
    return Error(ErrorCode::kIo, "accepted");
  }
  // The error's code; its message must contain `fragment`, its entry `entry`.
  ErrorCode code(const ItemBuilder& item, std::string_view fragment, std::string_view entry = {},
                 const std::function<void(const std::filesystem::path&)>& edit = {}) {
    const Error error = error_of(item, edit);
    EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
    EXPECT_NE(error.context().entry.find(entry), std::string::npos) << error.what();
    return error.code();
  }
  static std::string manifest_of(const ItemBuilder& item) {
    return ocdbt::envelope(ocdbt::kManifestMagic, ocdbt::manifest_body("d/node", 0, item.encoded_node().size(), 0));
  }

  testing::TempDir dir_;
};

TEST_F(OrbaxMalformedTest, TheValidBaseIsAccepted) {
  ItemBuilder item;
  item.write(dir_ / "good");
  const Tree tree = orbax_format().read(dir_ / "good", {}).tree;
  const Tensor& w = tree.at("w").tensor();
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.values<float>()[5], 5.0f);
}

TEST_F(OrbaxMalformedTest, ManifestBadMagic) {
  ItemBuilder item;
  item.manifest = ocdbt::envelope(ocdbt::kVersionTreeMagic, ocdbt::manifest_body("d/node", 0, item.encoded_node().size(), 0));
  EXPECT_EQ(code(item, "bad magic 0x0cdb1234", "manifest"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ManifestChecksumMismatch) {
  ItemBuilder item;
  std::string manifest = manifest_of(item);
  manifest[20] ^= 0x01;
  item.manifest = manifest;
  EXPECT_EQ(code(item, "CRC-32C mismatch", "manifest"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ManifestTruncatedBelowTheEnvelope) {
  ItemBuilder item;
  item.manifest = manifest_of(item).substr(0, 10);
  EXPECT_EQ(code(item, "truncated: 10 bytes", "manifest"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ManifestLengthFieldLies) {
  ItemBuilder item;
  std::string manifest = manifest_of(item);
  manifest[4] = static_cast<char>(manifest[4] + 1);
  ocdbt::reseal(manifest);
  item.manifest = manifest;
  EXPECT_EQ(code(item, "length field says", "manifest"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ManifestFutureVersion) {
  ItemBuilder item;
  item.manifest = ocdbt::envelope(ocdbt::kManifestMagic, ocdbt::manifest_body("d/node", 0, item.encoded_node().size(), 0),
                                  false, 1);
  EXPECT_EQ(code(item, "unsupported version 1"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ManifestUnknownCompression) {
  ItemBuilder item;
  std::string manifest = manifest_of(item);
  manifest[13] = 7;  // compression_format, after magic, length and version
  ocdbt::reseal(manifest);
  item.manifest = manifest;
  EXPECT_EQ(code(item, "unknown compression_format 7"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ManifestZstdGarbage) {
  ItemBuilder item;
  std::string manifest = manifest_of(item);
  manifest[13] = 1;  // says zstd; the body is not
  ocdbt::reseal(manifest);
  item.manifest = manifest;
  EXPECT_EQ(code(item, "zstd data does not decode", "manifest"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ManifestBodyTruncatedInsideAField) {
  ItemBuilder item;
  std::string body = ocdbt::manifest_body("d/node", 0, item.encoded_node().size(), 0);
  body.resize(body.size() - 6);  // inside the commit time
  item.manifest = ocdbt::envelope(ocdbt::kManifestMagic, body);
  EXPECT_EQ(code(item, "truncated: commit_time"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, BtreeNodeChecksumMismatch) {
  ItemBuilder item;
  std::string node = ocdbt::envelope(ocdbt::kBtreeMagic, ocdbt::leaf_body({"d/data"}, item.values()));
  node[node.size() / 2] ^= 0x40;
  item.node = node;
  const Error error = error_of(item);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_NE(error.message().find("CRC-32C mismatch"), std::string::npos) << error.what();
  EXPECT_EQ(error.context().path.filename(), "node") << error.what();
}

TEST_F(OrbaxMalformedTest, BtreeNodeBadMagic) {
  ItemBuilder item;
  item.node = ocdbt::envelope(ocdbt::kManifestMagic, ocdbt::leaf_body({"d/data"}, item.values()));
  EXPECT_EQ(code(item, "bad magic 0x0cdb3a2a", "b-tree node"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, NodeReferencePastTheEndOfItsDataFile) {
  ItemBuilder item;
  item.manifest = ocdbt::envelope(ocdbt::kManifestMagic,
                                  ocdbt::manifest_body("d/node", 8, item.encoded_node().size(), 0));
  EXPECT_EQ(code(item, "lies past the end of data file 'd/node'", "b-tree node"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, NodeTruncatedByItsReference) {
  ItemBuilder item;
  item.manifest = ocdbt::envelope(ocdbt::kManifestMagic,
                                  ocdbt::manifest_body("d/node", 0, item.encoded_node().size() - 3, 0));
  EXPECT_EQ(code(item, "length field says", "b-tree node"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ValueReferencePastTheEndOfItsDataFile) {
  ItemBuilder item;
  std::vector<ocdbt::Value> values = item.values();
  values[1].offset = 10;
  item.node = ocdbt::envelope(ocdbt::kBtreeMagic, ocdbt::leaf_body({"d/data"}, values));
  EXPECT_EQ(code(item, "lies past the end of data file 'd/data' (24 bytes)", "w/0.0"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, OverlongVarint) {
  ItemBuilder item;
  std::string body(1, '\0');
  body += ocdbt::file_table({"d/data"});
  body += std::string(11, '\xff');  // num_entries
  item.node = ocdbt::envelope(ocdbt::kBtreeMagic, body);
  EXPECT_EQ(code(item, "invalid varint num_entries"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, DataFileIdOutsideTheTable) {
  ItemBuilder item;
  std::vector<ocdbt::Value> values = item.values();
  values[1].file = 3;
  item.node = ocdbt::envelope(ocdbt::kBtreeMagic, ocdbt::leaf_body({"d/data"}, values));
  EXPECT_EQ(code(item, "data file id 3 outside the table of 1 files"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, KeysOutOfOrder) {
  ItemBuilder item;
  std::vector<ocdbt::Value> values = item.values();
  std::swap(values[0], values[1]);
  item.node = ocdbt::envelope(ocdbt::kBtreeMagic, ocdbt::leaf_body({"d/data"}, values));
  EXPECT_EQ(code(item, "keys out of order"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, DataFilePathLeavesTheCheckpoint) {
  ItemBuilder item;
  item.node = ocdbt::envelope(ocdbt::kBtreeMagic, ocdbt::leaf_body({"../data"}, item.values()));
  EXPECT_EQ(code(item, "leaves the checkpoint", "w/0.0"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, MissingDataFile) {
  EXPECT_EQ(code(ItemBuilder(), "data file 'd/data' cannot be read", "w/0.0",
                 [](const std::filesystem::path& dir) { std::filesystem::remove(dir / "d" / "data"); }),
            ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, RootHeightDisagreesWithTheNode) {
  ItemBuilder item;
  item.manifest = ocdbt::envelope(ocdbt::kManifestMagic, ocdbt::manifest_body("d/node", 0, item.encoded_node().size(), 1));
  EXPECT_EQ(code(item, "height 0, but its parent says 1"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ZarrayIsNotJson) {
  ItemBuilder item;
  item.zarray = "{\"chunks\": [2, 3],";
  EXPECT_EQ(code(item, ".zarray: not valid JSON", "w"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ZarrayUnknownDtype) {
  ItemBuilder item;
  item.zarray.replace(item.zarray.find("<f4"), 3, "<q9");
  EXPECT_EQ(code(item, "unknown dtype '<q9'", "w"), ErrorCode::kUnsupported);
}

TEST_F(OrbaxMalformedTest, ZarrayNegativeShape) {
  ItemBuilder item;
  item.zarray.replace(item.zarray.find("\"shape\":[2,3]"), 13, "\"shape\":[-2,3]");
  EXPECT_EQ(code(item, "shape holds -2", "w"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ZarrayShapeDisagreesWithTheChunkBytes) {
  ItemBuilder item;
  item.chunk.resize(20);
  EXPECT_EQ(code(item, "chunk holds 20 bytes, expected 24", "w/0.0"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ZarrayChunksOfAnotherRank) {
  ItemBuilder item;
  item.zarray.replace(item.zarray.find("\"chunks\":[2,3]"), 14, "\"chunks\":[2]");
  EXPECT_EQ(code(item, "chunks has 1 dimensions, shape 2", "w"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ZstdChunkGarbage) {
  ItemBuilder item;
  item.zarray.replace(item.zarray.find("\"compressor\":null"), 17, R"j("compressor":{"id":"zstd","level":1})j");
  EXPECT_EQ(code(item, "zstd chunk does not decode", "w/0.0"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, UnsupportedCompressor) {
  ItemBuilder item;
  item.zarray.replace(item.zarray.find("\"compressor\":null"), 17, R"j("compressor":{"id":"blosc"})j");
  EXPECT_EQ(code(item, "compressor 'blosc'", "w"), ErrorCode::kUnsupported);
}

TEST_F(OrbaxMalformedTest, MetadataIsNotJson) {
  ItemBuilder item;
  item.metadata = "{\"tree_metadata\": ";
  const Error error = error_of(item);
  EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
  EXPECT_NE(error.message().find("_METADATA is not valid JSON"), std::string::npos) << error.what();
  EXPECT_EQ(error.context().path.filename(), "_METADATA");
}

TEST_F(OrbaxMalformedTest, KeyIsNotATupleString) {
  ItemBuilder item;
  item.metadata.replace(item.metadata.find("\"('w',)\""), 8, "\"w\"");
  EXPECT_EQ(code(item, "not a tuple of strings", "w"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, KeyMetadataDisagreesWithTheTuple) {
  ItemBuilder item;
  item.metadata.replace(item.metadata.find("\"('w',)\""), 8, "\"('v',)\"");
  EXPECT_EQ(code(item, "key_metadata disagrees with the tuple", "('v',)"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, UnknownValueType) {
  ItemBuilder item;
  item.metadata.replace(item.metadata.find("np.ndarray"), 10, "PyObject");
  EXPECT_EQ(code(item, "value_type 'PyObject' is not read", "w"), ErrorCode::kUnsupported);
}

TEST_F(OrbaxMalformedTest, ListLacksAnIndex) {
  ItemBuilder item;
  item.metadata =
      R"j({"tree_metadata": {"('1',)": {"key_metadata": [{"key": "1", "key_type": 1}], )j"
      R"j("value_metadata": {"value_type": "None", "skip_deserialize": true}}}})j";
  EXPECT_EQ(code(item, "list lacks index 0"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxMalformedTest, ArrayMissingFromTheDatabase) {
  ItemBuilder item;
  item.metadata.replace(item.metadata.find("\"('w',)\""), 8, "\"('v',)\"");
  item.metadata.replace(item.metadata.find("\"key\": \"w\""), 10, "\"key\": \"v\"");
  EXPECT_EQ(code(item, "no key 'v/.zarray'", "v"), ErrorCode::kCorrupt);
}

// ckpt's record (custom_metadata.ckpt of _CHECKPOINT_METADATA), one defect
// at a time, over a checkpoint ckpt wrote with arrays "v" and "w".
class OrbaxRecordTest : public ::testing::Test {
 protected:
  static constexpr std::string_view kValidRecord =
      R"j({"version": 1, "tree": {"map": [["v", {"tensor": "v"}], ["w", {"tensor": "w"}]]}})j";

  // Saves the item (arrays "v" and "w") at dir_/item; returns its tree.
  Tree save_item(bool extras = true) {
    Tree tree = Tree::map();
    tree.set("v", Tensor::zeros(DType::kFloat32, {2}));
    tree.set("w", Tensor::zeros(DType::kInt8, {3}));
    save(dir_ / "item", tree, {.format = "orbax", .extras = extras});
    return tree;
  }
  // Replaces the item's _CHECKPOINT_METADATA, its custom_metadata `custom`.
  void write_custom_metadata(const std::string& custom) {
    testing::write_file(dir_ / "item" / "_CHECKPOINT_METADATA",
                        R"j({"item_handlers": "H", "custom_metadata": )j" + custom + "}");
  }

  // The error of reading the checkpoint whose record is `record` (JSON text).
  Error error_of(std::string_view record) {
    const auto dir = dir_ / "item";
    save_item();
    write_custom_metadata("{\"ckpt\": " + std::string(record) + "}");
    try {
      orbax_format().read(dir, {});
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("_CHECKPOINT_METADATA"), std::string::npos) << error.what();
      return error;
    }
    ADD_FAILURE() << "the record was accepted: " << record;
    return Error(ErrorCode::kIo, "accepted");
  }
  // The error's code; its message must contain `fragment`, its entry `entry`.
  ErrorCode code(std::string_view record, std::string_view fragment, std::string_view entry = "custom_metadata.ckpt") {
    const Error error = error_of(record);
    EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
    EXPECT_NE(error.context().entry.find(entry), std::string::npos) << error.what();
    return error.code();
  }

  testing::TempDir dir_;
};

TEST_F(OrbaxRecordTest, TheValidRecordIsAcceptedAndOtherCustomMetadataIgnored) {
  const Tree tree = save_item();
  for (const std::string& custom : {"{\"ckpt\": " + std::string(kValidRecord) + "}", std::string("{\"other\": 1}"),
                                   std::string("null"), std::string("[1]")}) {
    write_custom_metadata(custom);
    const Contents contents = orbax_format().read(dir_ / "item", {});
    EXPECT_TRUE(contents.tree == tree) << custom;
    for (const auto& [key, value] : contents.metadata) {
      EXPECT_FALSE(key.starts_with("custom_metadata.ckpt")) << key << ": the record is not user metadata";
    }
  }
}

// A "ckpt" that is not an object with both "version" and "tree" is the
// caller's own custom metadata: the checkpoint reads as Orbax sees it, and
// the value stays in the metadata.
TEST_F(OrbaxRecordTest, AnotherCkptKeyIsTheCallersOwnMetadata) {
  const Tree tree = save_item(/*extras=*/false);
  for (const std::string custom : {"5", "\"epoch 3\"", R"j({"version": 1})j", R"j({"tree": {"map": []}})j"}) {
    write_custom_metadata("{\"ckpt\": " + custom + "}");
    const Contents contents = orbax_format().read(dir_ / "item", {});
    EXPECT_TRUE(contents.tree == tree) << custom;
    EXPECT_EQ(contents.format_version, 0) << custom;
    bool kept = false;
    for (const auto& [key, value] : contents.metadata) kept = kept || key.starts_with("custom_metadata.ckpt");
    EXPECT_TRUE(kept) << custom << ": the caller's metadata is kept";
  }
}

TEST_F(OrbaxRecordTest, RecordLacksTheVersionValue) {
  EXPECT_EQ(code(R"j({"version": null, "tree": {"map": []}})j", "not a positive integer"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxRecordTest, RecordVersionIsNotAPositiveInteger) {
  EXPECT_EQ(code(R"j({"version": 0, "tree": {"map": []}})j", "not a positive integer"), ErrorCode::kCorrupt);
  EXPECT_EQ(code(R"j({"version": "1", "tree": {"map": []}})j", "not a positive integer"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxRecordTest, RecordFromANewerCkpt) {
  EXPECT_EQ(code(R"j({"version": 2, "tree": {"map": []}})j", "newer ckpt"), ErrorCode::kUnsupported);
}

TEST_F(OrbaxRecordTest, RecordNamesAFieldTwice) {
  EXPECT_EQ(code(R"j({"version": 1, "version": 1, "tree": {"map": []}})j", "duplicate field \"version\""),
            ErrorCode::kCorrupt);
}

TEST_F(OrbaxRecordTest, RecordTreeIsNotATreeSkeleton) {
  EXPECT_EQ(code(R"j({"version": 1, "tree": {"map": 5}})j", "custom_metadata.ckpt: ", ""), ErrorCode::kCorrupt);
  EXPECT_EQ(code(R"j({"version": 1, "tree": {"map": [["v", {"tensor": "v"}], ["w", {"tensor": 7}]]}})j",
                 "custom_metadata.ckpt: ", ""),
            ErrorCode::kCorrupt);
}

TEST_F(OrbaxRecordTest, RecordTreeIsASingleLeaf) {
  EXPECT_EQ(code(R"j({"version": 1, "tree": 5})j", "not a map or a list"), ErrorCode::kCorrupt);
}

TEST_F(OrbaxRecordTest, RecordNamesAnArrayThatMetadataLacks) {
  EXPECT_EQ(code(R"j({"version": 1, "tree": {"map": [["v", {"tensor": "v"}], ["w", {"tensor": "x"}]]}})j",
                 "names array 'x', which _METADATA does not list", "x"),
            ErrorCode::kCorrupt);
}

TEST_F(OrbaxRecordTest, RecordNamesAnArrayTwice) {
  EXPECT_EQ(code(R"j({"version": 1, "tree": {"map": [["v", {"tensor": "w"}], ["w", {"tensor": "w"}]]}})j",
                 "names array 'w' twice", "w"),
            ErrorCode::kCorrupt);
}

TEST_F(OrbaxRecordTest, RecordLeavesAnArrayOut) {
  EXPECT_EQ(code(R"j({"version": 1, "tree": {"map": [["v", {"tensor": "v"}]]}})j",
                 "array 'w' of _METADATA is missing from the tree", "w"),
            ErrorCode::kCorrupt);
}

}  // namespace
}  // namespace ckpt
