// Tied tensors in .npz: stored once, the other names recorded as aliases in
// ckpt's zip archive comment (docs/formats/numpy.md, "Tied tensors"), read
// back as tensors sharing the stored member's bytes; the comment's malformed
// variants one defect at a time. np.load and zipfile reading these files are
// tested in tests/interop.

#include <gtest/gtest.h>

#include <random>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "formats/numpy/format.h"
#include "formats/numpy/layout.h"
#include "formats/numpy/writer.h"
#include "formats/zip/layout.h"
#include "formats/zip/reader.h"
#include "formats/zip_test_builder.h"
#include "io/mapped_file.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

using testing::read_file;

// Pseudo-random bytes, a different tensor per seed.
Tensor filled(DType dtype, Shape shape, uint32_t seed) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  std::mt19937 random(seed);
  for (std::byte& b : tensor.mutable_bytes()) b = static_cast<std::byte>(random());
  return tensor;
}

std::vector<std::string> keys_of(const Tree& tree) {
  std::vector<std::string> keys;
  for (const TreeEntry& entry : tree.entries()) keys.push_back(std::get<std::string>(entry.key));
  return keys;
}

class NpzAliasTest : public ::testing::Test {
 protected:
  std::filesystem::path save_npz(const Tree& tree, const std::string& name = "t.npz", bool extras = true) {
    const auto path = dir_ / name;
    npz_format().write(path, tree, {.extras = extras, .fsync = false});
    return path;
  }
  static zip_detail::ZipReader open_zip(const std::filesystem::path& path) {
    return zip_detail::ZipReader(detail::MappedFile::open(path));
  }
  static std::vector<std::string> members_of(const std::filesystem::path& path) {
    const zip_detail::ZipReader zip = open_zip(path);
    std::vector<std::string> names;
    for (const zip_detail::ZipEntry& entry : zip.entries()) names.push_back(entry.name);
    return names;
  }

  testing::TempDir dir_;
};

TEST_F(NpzAliasTest, TiedTensorsAreStoredOnceAndNamedInTheArchiveComment) {
  const Tensor embed = filled(DType::kFloat32, {64, 8}, 1);
  Tree tree = Tree::map();
  tree.set("embed.weight", embed);
  tree.set("norm.weight", filled(DType::kFloat32, {8}, 2));
  tree.set("lm_head.weight", embed);
  const auto path = save_npz(tree);
  EXPECT_EQ(members_of(path), (std::vector<std::string>{"embed.weight.npy", "norm.weight.npy"}));
  const std::string comment = R"(ckpt:{"version":1,"aliases":{"lm_head.weight":"embed.weight"}})";
  const std::string bytes = read_file(path);
  ASSERT_GT(bytes.size(), comment.size() + zip_detail::kEndRecordSize);
  EXPECT_EQ(bytes.substr(bytes.size() - comment.size()), comment) << "the comment ends the file";
  const size_t end_record = bytes.size() - comment.size() - zip_detail::kEndRecordSize;
  EXPECT_EQ(testing::get_u32(bytes, end_record), zip_detail::kEndRecordSignature);
  EXPECT_EQ(testing::get_u16(bytes, end_record + 20), comment.size());
  EXPECT_LT(bytes.size(), 2 * embed.nbytes());

  const Contents contents = npz_format().read(path, {.verify = true});
  ASSERT_EQ(contents.entries.size(), 2u) << "entries are the stored members only";
  EXPECT_EQ(contents.entries[0].name, "embed.weight");
  EXPECT_EQ(contents.entries[1].name, "norm.weight");
  EXPECT_EQ(contents.format_version, 1);
  EXPECT_EQ(keys_of(contents.tree), (std::vector<std::string>{"embed.weight", "norm.weight", "lm_head.weight"}));
  EXPECT_TRUE(contents.tree == tree);
  const Tensor& stored = contents.tree.at("embed.weight").tensor();
  EXPECT_TRUE(stored.same_memory(contents.tree.at("lm_head.weight").tensor()));
  EXPECT_EQ(stored.buffer().kind(), StorageKind::kMapped);
  EXPECT_FALSE(stored.same_memory(contents.tree.at("norm.weight").tensor()));
}

TEST_F(NpzAliasTest, AliasesFollowTheMembersInTreeOrderAndSavingThemAgainGivesTheSameFile) {
  const Tensor t = filled(DType::kInt16, {5, 3}, 3);
  const Tensor u = filled(DType::kUInt8, {17}, 4);
  Tree tree = Tree::map();
  tree.set("a", t);
  tree.set("b", t);
  tree.set("c", u);
  tree.set("d", u);
  tree.set("e", t);
  tree.set("f", filled(DType::kFloat64, {2}, 5));
  const auto path = save_npz(tree);
  EXPECT_EQ(members_of(path), (std::vector<std::string>{"a.npy", "c.npy", "f.npy"}));
  EXPECT_EQ(open_zip(path).comment(), R"(ckpt:{"version":1,"aliases":{"b":"a","d":"c","e":"a"}})");
  const Tree loaded = npz_format().read(path, {}).tree;
  EXPECT_EQ(keys_of(loaded), (std::vector<std::string>{"a", "c", "f", "b", "d", "e"}));
  for (const char* name : {"a", "b", "c", "d", "e", "f"}) {
    EXPECT_TRUE(loaded.at(name).tensor().equals(tree.at(name).tensor())) << name;
  }
  EXPECT_TRUE(loaded.at("a").tensor().same_memory(loaded.at("b").tensor()));
  EXPECT_TRUE(loaded.at("a").tensor().same_memory(loaded.at("e").tensor()));
  EXPECT_TRUE(loaded.at("c").tensor().same_memory(loaded.at("d").tensor()));
  EXPECT_EQ(read_file(save_npz(loaded, "again.npz")), read_file(path));
}

TEST_F(NpzAliasTest, WithoutTiesOrWithoutExtrasThereIsNoComment) {
  const Tensor t = filled(DType::kFloat32, {4}, 6);
  Tree untied = Tree::map();
  untied.set("a", t);
  untied.set("b", t.copy());
  EXPECT_EQ(open_zip(save_npz(untied, "untied.npz")).comment(), "");

  Tree tied = Tree::map();
  tied.set("a", t);
  tied.set("b", t);
  const auto plain = save_npz(tied, "plain.npz", /*extras=*/false);
  EXPECT_EQ(members_of(plain), (std::vector<std::string>{"a.npy", "b.npy"}));
  EXPECT_EQ(open_zip(plain).comment(), "");
  // Byte-identical to the copies' file (which is np.savez's).
  EXPECT_EQ(read_file(plain), read_file(save_npz(untied, "plain_copies.npz", /*extras=*/false)));
  const Tree loaded = npz_format().read(plain, {}).tree;
  EXPECT_FALSE(loaded.at("a").tensor().same_memory(loaded.at("b").tensor()));
  EXPECT_EQ(npz_format().read(plain, {}).format_version, 0);
}

TEST_F(NpzAliasTest, OtherViewsOfTheSameBytesAreCopies) {
  const Tensor t = filled(DType::kFloat32, {4, 4}, 7);
  Tree tree = Tree::map();
  tree.set("t", t);
  tree.set("reshaped", Tensor(DType::kFloat32, {16}, t.buffer()));
  tree.set("retyped", Tensor(DType::kInt32, {4, 4}, t.buffer()));
  tree.set("row", Tensor(DType::kFloat32, {4}, t.buffer().slice(16, 16)));
  const Tensor empty = Tensor::empty(DType::kFloat32, {0});
  tree.set("empty", empty);
  tree.set("empty_again", empty);
  const auto path = save_npz(tree);
  EXPECT_EQ(members_of(path).size(), 6u);
  EXPECT_EQ(open_zip(path).comment(), "");
  EXPECT_TRUE(npz_format().read(path, {}).tree == tree);
}

TEST_F(NpzAliasTest, TiesThatOutgrowTheCommentAreStoredAsCopies) {
  const Tensor w = filled(DType::kUInt8, {3}, 8);
  Tree tree = Tree::map();
  tree.set("w", w);
  constexpr size_t kAliases = 300;  // ~256 comment bytes each: more than 65535 in all
  for (size_t i = 0; i < kAliases; ++i) {
    std::string name = std::to_string(i) + ".";
    name.resize(250, 'n');
    tree.set(name, w);
  }
  const auto path = save_npz(tree);
  const zip_detail::ZipReader zip = open_zip(path);
  EXPECT_LE(zip.comment().size(), zip_detail::kMaxCommentLength);
  EXPECT_GT(zip.comment().size(), zip_detail::kMaxCommentLength - 300);
  const Contents contents = npz_format().read(path, {.verify = true});
  const size_t copies = contents.entries.size() - 1;
  EXPECT_GT(copies, 0u);
  EXPECT_LT(copies, kAliases);
  // The first aliases in tree order fit; from the first that did not on,
  // every tie is a member of its own.
  const std::vector<Tree::Leaf> leaves = tree.leaves();
  const Tensor& stored = contents.tree.at("w").tensor();
  for (size_t i = 1; i < leaves.size(); ++i) {
    const bool aliased = i <= kAliases - copies;
    const Tensor& loaded = contents.tree.find(leaves[i].name)->tensor();
    EXPECT_TRUE(loaded.equals(w)) << leaves[i].name;
    EXPECT_EQ(loaded.same_memory(stored), aliased) << i;
    EXPECT_EQ(zip.find(leaves[i].name + ".npy") == nullptr, aliased) << i;
  }
  EXPECT_EQ(read_file(save_npz(contents.tree, "again.npz")), read_file(path));
}

TEST_F(NpzAliasTest, AliasesOfDeflatedMembersShareTheInflatedBytes) {
  // Written by the independent test encoder, not ckpt's writer.
  const Tensor t = filled(DType::kFloat32, {2, 3}, 9);
  const std::string npy = numpy_detail::format_npy_header(t.dtype(), t.shape()) +
                          std::string(reinterpret_cast<const char*>(t.bytes().data()), t.nbytes());
  const auto path = dir_ / "deflated.npz";
  testing::write_file(path, testing::build_test_zip({{.name = "w.npy", .data = npy, .method = 8}},
                                                    {.comment = R"(ckpt:{"version":1,"aliases":{"v":"w"}})"})
                                .bytes);
  for (const bool lazy : {true, false}) {
    const Tree tree = load(path, {.lazy = lazy});
    EXPECT_EQ(keys_of(tree), (std::vector<std::string>{"w", "v"}));
    EXPECT_TRUE(tree.at("v").tensor().equals(t));
    EXPECT_TRUE(tree.at("w").tensor().same_memory(tree.at("v").tensor())) << "lazy " << lazy;
  }
}

TEST_F(NpzAliasTest, OtherCommentsAreIgnored) {
  const std::string npy = numpy_detail::format_npy_header(DType::kUInt8, {1}) + "x";
  for (const std::string comment : {"", "hello", "ckpt", "ckpt:", "ckpt: saved by hand", "CKPT:{\"x\"",
                                    " ckpt:{}", "ckpt;{\"version\":1}"}) {
    const auto path = dir_ / "foreign.npz";
    testing::write_file(path, testing::build_test_zip({{.name = "w.npy", .data = npy}}, {.comment = comment}).bytes);
    const Contents contents = npz_format().read(path, {.verify = true});
    EXPECT_EQ(keys_of(contents.tree), std::vector<std::string>{"w"}) << comment;
    EXPECT_EQ(contents.format_version, 0) << comment;
  }
}

TEST_F(NpzAliasTest, UnicodeAndEscapedNamesRoundTrip) {
  const Tensor t = filled(DType::kFloat16, {3}, 10);
  Tree tree = Tree::map();
  tree.set("décodeur.层", t);
  tree.set("emoji 🙂 \"quoted\" \\ back", t);
  tree.set("tab\tand\x05", t);  // control characters are \u00xx in the comment
  const auto path = save_npz(tree);
  const std::string comment(open_zip(path).comment());
  EXPECT_EQ(comment.find(zip_detail::kEndRecordSignatureBytes), std::string::npos);
  EXPECT_NE(comment.find("\\u0005"), std::string::npos) << comment;
  const Tree loaded = npz_format().read(path, {}).tree;
  EXPECT_TRUE(loaded == tree);
  EXPECT_TRUE(loaded.at("décodeur.层").tensor().same_memory(loaded.find(std::string("tab\tand\x05"))->tensor()));
}

// ---------------------------------------------------------------- malformed

// A valid npz with members "w" and "v" and the comment given, which must
// fail with one error naming the comment.
class NpzAliasMalformedTest : public ::testing::Test {
 protected:
  testing::TestZip with_comment(std::string_view comment) {
    const std::string npy = numpy_detail::format_npy_header(DType::kInt32, {2}) + std::string(8, '\x01');
    return testing::build_test_zip({{.name = "w.npy", .data = npy}, {.name = "v.npy", .data = npy}},
                                   {.comment = std::string(comment)});
  }
  Error error_of(std::string_view comment) {
    const testing::TestZip zip = with_comment(comment);
    const auto path = dir_ / "bad.npz";
    testing::write_file(path, zip.bytes);
    try {
      npz_format().read(path, {});
    } catch (const Error& error) {
      EXPECT_EQ(error.context().path, path) << error.what();
      EXPECT_EQ(error.context().entry, numpy_detail::kNpzCommentEntry) << error.what();
      EXPECT_EQ(error.context().offset, zip.end_offset + zip_detail::kEndRecordSize) << error.what();
      EXPECT_NE(std::string(error.what()).find("bad.npz"), std::string::npos) << error.what();
      return error;
    }
    ADD_FAILURE() << "the comment was accepted: " << comment;
    return Error(ErrorCode::kIo, "accepted");
  }
  // The error's code; its message must contain `fragment`.
  ErrorCode code(std::string_view aliases_json, std::string_view fragment) {
    const Error error = error_of(aliases_json);
    EXPECT_NE(error.message().find(fragment), std::string::npos) << error.what();
    return error.code();
  }

  testing::TempDir dir_;
};

TEST_F(NpzAliasMalformedTest, TheValidBaseIsAccepted) {
  const auto path = dir_ / "good.npz";
  testing::write_file(path, with_comment(R"(ckpt:{"version":1,"aliases":{"u":"w"},"later":[1]})").bytes);
  const Tree tree = npz_format().read(path, {.verify = true}).tree;
  EXPECT_EQ(keys_of(tree), (std::vector<std::string>{"w", "v", "u"}));
}

TEST_F(NpzAliasMalformedTest, NotValidJson) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":"w"})", "not valid JSON"), ErrorCode::kCorrupt);
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":"w"}} trailing)", "not valid JSON"), ErrorCode::kCorrupt);
  EXPECT_EQ(code("ckpt:{\"version\":1,\"aliases\":{\"u\xff\":\"w\"}}", "not valid JSON"), ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, DuplicateField) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"version":1,"aliases":{"u":"w"}})", "duplicate field \"version\""),
            ErrorCode::kCorrupt);
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{},"aliases":{"u":"w"}})", "duplicate field \"aliases\""),
            ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, VersionMissingOrNotAPositiveInteger) {
  for (const char* version : {"", R"("version":0,)", R"("version":-1,)", R"("version":"1",)", R"("version":1.0,)",
                              R"("version":null,)"}) {
    EXPECT_EQ(code("ckpt:{" + std::string(version) + R"("aliases":{"u":"w"}})", "\"version\" is missing or not"),
              ErrorCode::kCorrupt)
        << version;
  }
}

TEST_F(NpzAliasMalformedTest, FutureVersionIsUnsupported) {
  EXPECT_EQ(code(R"(ckpt:{"version":2,"aliases":{"u":"w"}})", "newer ckpt (comment version 2"),
            ErrorCode::kUnsupported);
}

TEST_F(NpzAliasMalformedTest, AliasesMissingOrNotAnObject) {
  EXPECT_EQ(code(R"(ckpt:{"version":1})", "\"aliases\" is missing"), ErrorCode::kCorrupt);
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":[["u","w"]]})", "\"aliases\" is not an object"),
            ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, AliasValueIsNotAString) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":1}})", "alias 'u' is not a string"), ErrorCode::kCorrupt);
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":["w"]}})", "alias 'u' is not a string"), ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, AliasNamedTwice) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":"w","u":"v"}})", "names alias 'u' twice"),
            ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, AliasWithANulByte) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u\u0000x":"w"}})", "has a NUL byte"), ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, AliasIsAlsoAMember) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"v":"w"}})", "alias 'v' is also the key of a member"),
            ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, AliasNamesItself) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":"u"}})", "alias 'u' names itself"), ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, AliasNamesAnotherAlias) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":"w","x":"u"}})", "alias 'x' names alias 'u'"),
            ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, AliasesInACycle) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":"x","x":"u"}})", "alias 'u' names alias 'x'"),
            ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, AliasNamesAKeyWithoutAMember) {
  EXPECT_EQ(code(R"(ckpt:{"version":1,"aliases":{"u":"missing"}})", "which has no member 'missing.npy'"),
            ErrorCode::kCorrupt);
}

TEST_F(NpzAliasMalformedTest, EveryTruncationAndByteFlipOfTheCommentFailsCleanly) {
  const std::string comment = R"(ckpt:{"version":1,"aliases":{"u":"w","x":"v"}})";
  const std::string valid = with_comment(comment).bytes;
  const size_t start = valid.size() - comment.size();
  const auto path = dir_ / "fuzz.npz";
  const auto attempt = [&](std::string_view bytes) {
    testing::write_file(path, bytes);
    try {
      npz_format().read(path, {.verify = true});
    } catch (const Error& error) {
      EXPECT_TRUE(error.code() == ErrorCode::kCorrupt || error.code() == ErrorCode::kUnsupported) << error.what();
    }
  };
  for (size_t keep = start; keep < valid.size(); ++keep) {
    // A shorter comment, with the end record's length saying so.
    std::string bytes = valid.substr(0, keep);
    testing::put_u16(bytes, start - 2, static_cast<uint16_t>(keep - start));
    attempt(bytes);
  }
  for (size_t at = start; at < valid.size(); ++at) {
    for (const char value : {'\0', '\xFF', '"', '{', '}', ':', ',', '1', 'w'}) {
      std::string bytes = valid;
      bytes[at] = value;
      attempt(bytes);
    }
  }
}

}  // namespace
}  // namespace ckpt
