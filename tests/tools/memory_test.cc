// Peak memory of the CLI on files made of many tiny values (issue 15): 4M
// Nones as a torch pickle (a list filled by one APPENDS of N opcodes) and
// as Flax msgpack (an array of 4M nils, 0xc0), one byte of file per leaf.
// `ckpt verify` and `ckpt inspect --json` must stay within 64 bytes of
// resident memory per byte of file, over the base that the same command
// needs for a small file of the same kind (the binary, its libraries, the
// allocator's arenas: about 10 MB here). Before the tree's leaves shrank to
// 16 bytes (and inspect stopped building a map of every leaf's name), verify
// took ~150 and inspect --json ~380 bytes per byte.

#include <gtest/gtest.h>

#include <cstdlib>

#include <cstdint>
#include <string>
#include <vector>

#include "formats/torch_test_builder.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "support/tool_run.h"

namespace ckpt {
namespace {

constexpr size_t kNones = 4'000'000;
constexpr long kBytesPerFileByte = 64;

// {"a": [None] * count} as a torch zip.
std::string torch_nones(size_t count) {
  testing::Pkl pickle(2);
  pickle.empty_dict().binput(0).str("a").binput(1).empty_list().mark();
  pickle.raw(std::string(count, 'N'));
  return testing::torch_zip(pickle.appends().setitem().stop().bytes(), {}).bytes;
}

// {"a": [nil] * count} as msgpack (map 1, str "a", array 32).
std::string msgpack_nones(size_t count) {
  std::string out = "\x81\xa1" "a\xdd";
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((count >> shift) & 0xff));
  out.append(count, '\xc0');
  return out;
}

class CliMemoryTest : public ::testing::Test {
 protected:
  // Runs `command` on `small` and on `big` (same kind); the big file's peak
  // RSS beyond the small one's must be within kBytesPerFileByte per byte.
  void check(const std::vector<std::string>& command, const std::string& small, const std::string& big,
             const std::string& extension) {
    const auto small_path = dir_.path() / ("small" + extension);
    const auto big_path = dir_.path() / ("big" + extension);
    testing::write_file(small_path, small);
    testing::write_file(big_path, big);
    // In the sanitizer build the CLI's freed blocks would wait in ASan's
    // quarantine (256 MB) and count as resident; the bound is ckpt's, not
    // ASan's. (This process's children only; ASan read its own options at
    // start.)
    ::setenv("ASAN_OPTIONS", "quarantine_size_mb=0:detect_leaks=0", 1);
    std::vector<std::string> arguments = command;
    arguments.push_back(small_path.string());
    const testing::ToolRun base = testing::run_tool(dir_.path(), arguments);
    ASSERT_EQ(base.exit_code, 0) << base.err;
    arguments.back() = big_path.string();
    const testing::ToolRun run = testing::run_tool(dir_.path(), arguments);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const long limit_kb = base.max_rss_kb + kBytesPerFileByte * static_cast<long>(big.size()) / 1024;
    EXPECT_LE(run.max_rss_kb, limit_kb)
        << command[0] << " " << big_path.filename() << ": peak " << run.max_rss_kb << " KB for " << big.size()
        << " bytes (" << (run.max_rss_kb - base.max_rss_kb) * 1024 / static_cast<long>(big.size())
        << " per byte over the base of " << base.max_rss_kb << " KB)";
    if (command.size() > 1) {  // inspect --json: every None is in "values"
      EXPECT_NE(run.out.find("\"a.3999999\":null"), std::string::npos);
    }
  }

  testing::TempDir dir_;
};

TEST_F(CliMemoryTest, VerifyOfManyNonesStaysWithinSixtyFourTimesTheFile) {
  check({"verify"}, torch_nones(1000), torch_nones(kNones), ".pt");
  check({"verify"}, msgpack_nones(1000), msgpack_nones(kNones), ".msgpack");
}

TEST_F(CliMemoryTest, InspectJsonOfManyNonesStaysWithinSixtyFourTimesTheFile) {
  check({"inspect", "--json"}, torch_nones(1000), torch_nones(kNones), ".pt");
  check({"inspect", "--json"}, msgpack_nones(1000), msgpack_nones(kNones), ".msgpack");
}

}  // namespace
}  // namespace ckpt
