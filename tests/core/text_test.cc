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

TEST(TextTest, QuotedKeepsPrintableTextAndValidUtf8) {
  EXPECT_EQ(quoted("layer.weight"), "'layer.weight'");
  EXPECT_EQ(quoted(""), "''");
  EXPECT_EQ(quoted("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "'\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80'");
}

TEST(TextTest, QuotedEscapesControlsQuotesAndBytesThatAreNoUtf8) {
  EXPECT_EQ(detail::quoted(std::string("a\0b", 3)), R"('a\x00b')") << "an embedded NUL cuts nothing";
  EXPECT_EQ(quoted("tab\there\nnew\rline"), R"('tab\there\nnew\rline')");
  EXPECT_EQ(quoted("\x1b[31mred\x7f"), R"('\x1b[31mred\x7f')");
  EXPECT_EQ(quoted("it's a\\b"), R"('it\'s a\\b')");
  EXPECT_EQ(quoted("\xff\xfe"), R"('\xff\xfe')");
  EXPECT_EQ(quoted("x\xed\xa0\x80y"), R"('x\xed\xa0\x80y')") << "a surrogate is no UTF-8";
  EXPECT_EQ(quoted("\xc3"), R"('\xc3')") << "a sequence cut short";
  EXPECT_EQ(quoted("\xc2\x85"), R"('\xc2\x85')") << "C1 controls (U+0085) are escaped too";
}

TEST(TextTest, QuotedCapsTheLengthAtACharacterBoundary) {
  EXPECT_EQ(detail::quoted(std::string(300, 'a'), {.max_bytes = 4}), "'aaaa'... (300 bytes)");
  EXPECT_EQ(quoted("ab\xc3\xa9", {.max_bytes = 3}), "'ab'... (4 bytes)") << "never half a character";
  EXPECT_EQ(quoted("abcd", {.max_bytes = 4}), "'abcd'");
  const std::string rendered = detail::quoted(std::string(100000, '\x01'));
  EXPECT_LT(rendered.size(), 1000u);
}

TEST(TextTest, NamesMustBeUtf8WithoutSurrogates) {
  EXPECT_NO_THROW(require_utf8_name("layer.0.w\xc3\xa9ight"));
  EXPECT_NO_THROW(require_utf8_name(""));
  for (const std::string& name : std::vector<std::string>{"a\xff", "w\xed\xa0\x80", "\xc3"}) {
    try {
      require_utf8_name(name, {.path = "model.bin", .offset = 7});
      ADD_FAILURE() << "accepted " << detail::quoted(name);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
      EXPECT_EQ(error.context().path, "model.bin");
      EXPECT_EQ(error.context().offset, 7u);
      EXPECT_NE(error.message().find(detail::quoted(name)), std::string::npos) << error.what();
      EXPECT_TRUE(valid_utf8(error.what())) << "the message itself is UTF-8";
    }
  }
}

TEST(TextTest, ErrorsQuoteTheirEntry) {
  // Error::render puts the entry through quoted(): one printable line.
  const Error error(ErrorCode::kCorrupt, "bad", {.path = "f", .entry = "a\nb\xff"});
  EXPECT_STREQ(error.what(), R"(f: entry 'a\nb\xff': bad)");
  EXPECT_EQ(error.context().entry, "a\nb\xff") << "the context keeps the bytes";
}

}  // namespace
}  // namespace ckpt::detail
