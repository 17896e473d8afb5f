#include "core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace ckpt::detail {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(HugePagesTest, PolicyFromTheEnvironmentValue) {
  EXPECT_EQ(huge_page_policy_from(nullptr), HugePagePolicy::kAuto);
  EXPECT_EQ(huge_page_policy_from(""), HugePagePolicy::kAuto);
  EXPECT_EQ(huge_page_policy_from("auto"), HugePagePolicy::kAuto);
  EXPECT_EQ(huge_page_policy_from("1"), HugePagePolicy::kAlways);
  EXPECT_EQ(huge_page_policy_from("always"), HugePagePolicy::kAlways);
  EXPECT_EQ(huge_page_policy_from("0"), HugePagePolicy::kNever);
  EXPECT_EQ(huge_page_policy_from("never"), HugePagePolicy::kNever);
  EXPECT_EQ(huge_page_policy_from("yes please"), HugePagePolicy::kAuto);
}

TEST(HugePagesTest, FreeHugeBytesCountsOrdersNineAndUp) {
  // Two zones; order 9 is the tenth count (2 MiB blocks), order 10 the
  // eleventh (4 MiB).
  const char* text =
      "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n"
      "Node 0, zone   Normal  25194  22450  13255  10163   6226   4393   5887   3211   2090      5      2 \n";
  EXPECT_EQ(free_huge_bytes(text), (1 + 5) * 2 * kMiB + (3 + 2) * 4 * kMiB);
  EXPECT_EQ(free_huge_bytes("Node 0, zone Normal 7 7 7 7 7 7 7 7 7\n"), 0u);  // nothing of order 9
  EXPECT_EQ(free_huge_bytes(""), std::nullopt);
  EXPECT_EQ(free_huge_bytes("Node 0, zone Normal 1 x 3\n"), std::nullopt);
  EXPECT_EQ(free_huge_bytes("something else entirely\n"), std::nullopt);
}

TEST(HugePagesTest, AutoAdvisesOnlyWhenHugePagesAreFreeForTheWholeBlock) {
  const size_t block = 64 * kMiB;
  EXPECT_TRUE(advise_huge_pages(HugePagePolicy::kAuto, block, false, 64 * kMiB));
  EXPECT_FALSE(advise_huge_pages(HugePagePolicy::kAuto, block, false, 62 * kMiB));
  EXPECT_TRUE(advise_huge_pages(HugePagePolicy::kAuto, block, false, std::nullopt));  // unknown: as before
  // Free pages reported to a host: never by default, whatever is free.
  EXPECT_FALSE(advise_huge_pages(HugePagePolicy::kAuto, block, true, 1024 * kMiB));
  EXPECT_TRUE(advise_huge_pages(HugePagePolicy::kAlways, block, true, 0));
  EXPECT_FALSE(advise_huge_pages(HugePagePolicy::kNever, block, false, 1024 * kMiB));
}

TEST(HugePagesTest, BalloonFeatureBitFiveIsFreePageReporting) {
  // A feature file as sysfs prints it: bit 0 first (bits 1, 2, 5 and 32 set).
  const std::string reporting = "0110010000000000000000000000000010000000";
  EXPECT_TRUE(balloon_reports_free_pages(reporting));
  std::string without = reporting;
  without[5] = '0';
  EXPECT_FALSE(balloon_reports_free_pages(without));
  EXPECT_FALSE(balloon_reports_free_pages("01100"));
  EXPECT_FALSE(balloon_reports_free_pages(""));
}

TEST(HugePagesTest, ThisMachinesBuddyInfoParses) {
  // The decision reads the real file; where the kernel has one, its text
  // must be of the form parsed above, or auto silently degrades to always.
  FILE* file = std::fopen("/proc/buddyinfo", "r");
  if (file == nullptr) GTEST_SKIP() << "no /proc/buddyinfo";
  char text[4096];
  const size_t got = std::fread(text, 1, sizeof text, file);
  std::fclose(file);
  EXPECT_TRUE(free_huge_bytes({text, got}).has_value()) << std::string(text, got);
}

}  // namespace
}  // namespace ckpt::detail
