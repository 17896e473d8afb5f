#include "core/text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ckpt::detail {
namespace {

TEST(TextTest, Utf8AcceptsWellFormedText) {
  const std::vector<std::string> texts = {
      "", "plain ascii", "d\xc3\xa9" "codeur", "\xe5\xb1\x82", "emoji \xf0\x9f\x99\x82",
      "\xf4\x8f\xbf\xbf",                   // U+10FFFF
      std::string("nul\0inside", 10)};
  for (const std::string& text : texts) {
    EXPECT_TRUE(valid_utf8(text)) << text;
    EXPECT_TRUE(valid_utf8(text, {.allow_surrogates = true})) << text;
  }
}

TEST(TextTest, Utf8RefusesMalformedText) {
  const std::vector<std::string> texts = {
      "\x80", "\xff", "\xc3", "ab\xe5\xb1", "\xf0\x9f\x99",  // stray, invalid, truncated
      "\xc0\xaf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf",        // overlong
      "\xf4\x90\x80\x80",                                  // past U+10FFFF
      "\xc3\x28", "\xf8\x88\x80\x80\x80"};                 // bad continuation, 5 bytes
  for (const std::string& text : texts) {
    EXPECT_FALSE(valid_utf8(text)) << text;
    EXPECT_FALSE(valid_utf8(text, {.allow_surrogates = true})) << text;
  }
}

TEST(TextTest, SurrogatesOnlyWhenAllowed) {
  // U+D800 and U+DFFF as Python's "surrogatepass" encodes them.
  for (const std::string& text : std::vector<std::string>{"\xed\xa0\x80", "x\xed\xbf\xbfy"}) {
    EXPECT_FALSE(valid_utf8(text)) << "the Unicode standard refuses surrogates";
    EXPECT_TRUE(valid_utf8(text, {.allow_surrogates = true})) << "pickles carry them";
  }
  EXPECT_TRUE(valid_utf8("\xed\x9f\xbf")) << "U+D7FF is no surrogate";
}

TEST(TextTest, HexDigitsArePaddedLowerCase) {
  EXPECT_EQ(hex8(0), "00000000");
  EXPECT_EQ(hex8(0xbeef), "0000beef");
  EXPECT_EQ(hex8(0xCBF43926u), "cbf43926");
  EXPECT_EQ(hex_digits(0x2D06800538D394C2ull, 16), "2d06800538d394c2");
  EXPECT_EQ(hex_digits(0xab, 2), "ab");
  EXPECT_EQ(hex_digits(0x7, 2), "07");
  EXPECT_EQ(hex_digits(0x12345, 4), "12345") << "never cut";
  EXPECT_EQ(hex_digits(0, 0), "0");
  EXPECT_EQ(hex_digits(~uint64_t{0}, 0), "ffffffffffffffff");
}

}  // namespace
}  // namespace ckpt::detail
