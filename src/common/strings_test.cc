#include "common/strings.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(StringsTest, SplitKeepsEmptyFields) {
  EXPECT_EQ(Split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(Split("", ','), (std::vector<std::string>{""}));
}

TEST(StringsTest, TrimAndLower) {
  EXPECT_EQ(Trim("  x y \n"), "x y");
  EXPECT_EQ(ToLower("AbC"), "abc");
  EXPECT_TRUE(StartsWith("GPU-123", "GPU-"));
  EXPECT_FALSE(StartsWith("GP", "GPU-"));
}

TEST(StringsTest, NumbersMustBeWholeAndInRange) {
  EXPECT_EQ(ParseInt64("-42"), -42);
  EXPECT_EQ(ParseInt64("42x"), std::nullopt);
  EXPECT_EQ(ParseInt64(""), std::nullopt);
  EXPECT_EQ(ParseInt64("99999999999999999999"), std::nullopt);
  EXPECT_EQ(ParseUint64("-1"), std::nullopt);
  EXPECT_EQ(ParseUint64("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseDouble("0.25"), 0.25);
  EXPECT_EQ(ParseDouble("nan"), std::nullopt);
  EXPECT_EQ(ParseDouble("1e999"), std::nullopt);
}

TEST(StringsTest, SanitizeUtf8ReplacesInvalidBytes) {
  EXPECT_EQ(SanitizeUtf8("Tesla V100"), "Tesla V100");
  EXPECT_EQ(SanitizeUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(SanitizeUtf8("bad\xff\xfe."), "bad??.");
  EXPECT_EQ(SanitizeUtf8("trunc\xe2\x82"), "trunc??");
  EXPECT_EQ(SanitizeUtf8("\xc0\xaf"), "??");       // overlong
  EXPECT_EQ(SanitizeUtf8("\xed\xa0\x80"), "???");  // surrogate
}

TEST(StringsTest, ControlCharactersAreC0DelAndC1ButNotOtherUnicode) {
  EXPECT_FALSE(HasControlCharacter("vision-2.a_b/c d"));
  EXPECT_FALSE(HasControlCharacter("caf\xc3\xa9 \xe6\x97\xa5"));  // café 日
  EXPECT_FALSE(HasControlCharacter("\xc2\xa0"));                  // U+00A0
  EXPECT_FALSE(HasControlCharacter(""));
  for (std::string_view bad : {"a\nb", "\t", "x\x1b[31m", "\x7f", "\xc2\x9b", "\xc2\x80"}) {
    EXPECT_TRUE(HasControlCharacter(bad)) << bad;
  }
  EXPECT_TRUE(HasControlCharacter(std::string_view("a\0b", 3)));
}

// The third red team: a project "vision" + U+200B printed as "vision" in the queue and
// usage, and one with U+202E printed reversed.
TEST(StringsTest, InvisibleCharactersAreZeroWidthBidiAndFormatCharacters) {
  for (std::string_view ok : {"vision", "caf\xc3\xa9 \xe6\x97\xa5", "\xc2\xa0", "",
                              "\xef\xbd\x96ision", "\xf0\x9f\x98\x80", "\xe2\x80\x90"}) {
    EXPECT_FALSE(HasInvisibleCharacter(ok)) << ok;  // fullwidth v, an emoji, a hyphen
  }
  for (std::string_view bad : {"vision\xe2\x80\x8b",         // U+200B zero-width space
                               "\xe2\x80\xaenoisiv",         // U+202E right-to-left override
                               "vi\xc2\xadsion",             // U+00AD soft hyphen
                               "\xef\xbb\xbfvision",         // U+FEFF byte-order mark
                               "vision\xe2\x81\xa6",         // U+2066 isolate
                               "vision\xef\xb8\x8f",         // U+FE0F variation selector
                               "vision\xf3\xa0\x80\x81"}) {  // U+E0001 language tag
    EXPECT_TRUE(HasInvisibleCharacter(bad)) << bad;
  }
  EXPECT_FALSE(HasInvisibleCharacter("\xe2\x80"));  // cut short: not looked into
}

// Look-alike letters: "v\u0456sion" (Cyrillic і) listed like "vision" under enforce none.
TEST(StringsTest, LatinGreekAndCyrillicLettersInOneNameAreMixedScripts) {
  for (std::string_view ok :
       {"vision", "team-7/vision", "caf\xc3\xa9",
        "\xd0\xb7\xd1\x80\xd0\xb5\xd0\xbd\xd0\xb8\xd0\xb5-2", "\xce\xb1\xce\xb2",
        "\xe6\x97\xa5\xe6\x9c\xacvision", "\xef\xbd\x96ision", ""}) {
    EXPECT_FALSE(MixesLookAlikeScripts(ok)) << ok;  // Latin, Cyrillic, Greek alone; CJK
  }
  for (std::string_view bad : {"v\xd1\x96sion",        // Cyrillic і
                               "\xd0\xb0pple",         // Cyrillic а
                               "visi\xce\xbfn",        // Greek ο
                               "\xce\xb1\xd0\xb0"}) {  // Greek α, Cyrillic а
    EXPECT_TRUE(MixesLookAlikeScripts(bad)) << bad;
  }
  EXPECT_FALSE(MixesLookAlikeScripts("v\xd1"));  // cut short: not looked into
}

TEST(StringsTest, Base64RoundTripsEveryByteAndRefusesJunk) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n < 6; ++n) {
    const std::string bytes = all.substr(n);
    EXPECT_EQ(Base64Decode(Base64Encode(bytes)), bytes);
  }
  EXPECT_EQ(Base64Decode("Zg=="), "f");
  EXPECT_FALSE(Base64Decode("Zg="));       // length
  EXPECT_FALSE(Base64Decode("Z!=="));      // character
  EXPECT_FALSE(Base64Decode("=Zg="));      // padding first
  EXPECT_FALSE(Base64Decode("Zg==Zg=="));  // padding inside
  EXPECT_FALSE(Base64Decode("Z=g="));
}

TEST(StringsTest, StrFormatWritesTextOfAnyLength) {
  EXPECT_EQ(StrFormat("%.1f %s", 1.25, "GiB"), "1.2 GiB");
  EXPECT_EQ(StrFormat("%04x:%02x", 0xab, 3), "00ab:03");
  EXPECT_EQ(StrFormat("%s", ""), "");
  // Around the 128-byte buffer that short texts go through, and well past it.
  for (size_t n : {126, 127, 128, 129, 1000}) {
    const std::string text(n, 'x');
    EXPECT_EQ(StrFormat("%s", text.c_str()), text) << n;
    EXPECT_EQ(StrFormat("<%s>", text.c_str()), "<" + text + ">") << n;
  }
}

}  // namespace
}  // namespace gpupool
