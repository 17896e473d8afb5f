// The layering rule of ../shared/DESIGN.md, checked on this checkout, and the
// check itself shown to catch each kind of wrong include on a small tree.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/layers.h"
#include "support/temp_dir.h"

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

TEST(LayeringTest, NoFileIncludesALayerAboveIt) {
  const std::vector<LayerViolation> violations = layering_violations(CKPT_SOURCE_DIR);
  EXPECT_TRUE(violations.empty()) << describe(violations);
}

class LayeringCheckTest : public ::testing::Test {
 protected:
  void write(const std::string& relative, const std::string& text = "") {
    const fs::path path = dir_.path() / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  // The single violation of the tree, or a failure.
  LayerViolation only_violation() {
    const std::vector<LayerViolation> violations = layering_violations(dir_.path());
    EXPECT_EQ(violations.size(), 1u) << describe(violations);
    return violations.empty() ? LayerViolation{} : violations.front();
  }
  TempDir dir_;
};

// A tree that obeys the rule: each layer includes its own and those below.
TEST_F(LayeringCheckTest, IncludesDownwardsPass) {
  write("src/core/tree.h");
  write("src/io/file.h", "#include \"core/tree.h\"\n");
  write("src/formats/tf/reader.cc", "#include \"io/file.h\"\n#include \"formats/tf/tensor_bundle.pb.h\"\n");
  write("src/checkpoint/convert.cc", "#include \"formats/tf/reader.cc\"\n#include <vector>\n");
  write("include/ckpt/tree.h", "#include \"ckpt/dtype.h\"\n");
  write("include/ckpt/dtype.h");
  write("tools/ckpt/inspect.cc", "#include \"commands.h\"\n#include \"ckpt/tree.h\"\n");
  write("tools/ckpt/commands.h");
  write("python/src/module.cc", "#include \"values.h\"\n#include \"ckpt/tree.h\"\n");
  write("python/src/values.h");
  EXPECT_TRUE(layering_violations(dir_.path()).empty()) << describe(layering_violations(dir_.path()));
}

TEST_F(LayeringCheckTest, CoreIncludingIoIsCaught) {
  write("src/io/parallel.h");
  write("src/core/cast.cc", "// casts\n#include \"io/parallel.h\"\n");
  const LayerViolation violation = only_violation();
  EXPECT_EQ(violation.file, "src/core/cast.cc");
  EXPECT_EQ(violation.line, 2);
  EXPECT_EQ(violation.include, "io/parallel.h");
  EXPECT_NE(violation.why.find("core includes io"), std::string::npos) << violation.why;
}

TEST_F(LayeringCheckTest, APublicHeaderOfAHigherLayerIsCaught) {
  write("include/ckpt/restore.h");
  write("src/formats/npz/writer.cc", "#include \"ckpt/restore.h\"\n");
  EXPECT_NE(only_violation().why.find("formats includes restore"), std::string::npos);
}

TEST_F(LayeringCheckTest, PythonIncludingTheToolIsCaught) {
  write("tools/ckpt/commands.h");
  write("python/src/module.cc", "#include \"../../tools/ckpt/commands.h\"\n");
  EXPECT_NE(only_violation().why.find("python includes a private file of tools"), std::string::npos);
}

TEST_F(LayeringCheckTest, TheToolIncludingInternalsIsCaught) {
  write("src/core/json_writer.h");
  write("tools/ckpt/output.cc", "#include \"core/json_writer.h\"\n");
  EXPECT_NE(only_violation().why.find("tools includes a private file of core"), std::string::npos);
}

TEST_F(LayeringCheckTest, APublicHeaderIncludingAPrivateOneIsCaught) {
  write("src/core/checksum.h");
  write("include/ckpt/format.h", "#include \"core/checksum.h\"\n");
  EXPECT_NE(only_violation().why.find("public header includes a private one"), std::string::npos);
}

TEST_F(LayeringCheckTest, APublicHeaderWithoutALayerIsCaught) {
  write("include/ckpt/novelty.h");
  EXPECT_NE(only_violation().why.find("no layer"), std::string::npos);
}

}  // namespace
}  // namespace ckpt::testing
