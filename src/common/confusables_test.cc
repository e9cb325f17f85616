#include "common/confusables.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace gpupool {
namespace {

// Whole-script confusables: "аррlе" all Cyrillic but the Latin l (which MixesLookAlikeScripts
// refuses) or all Cyrillic ("аррӏе") listed like "apple" under enforce none.
TEST(ConfusablesTest, CyrillicAndGreekLookAlikesHaveTheLatinSkeleton) {
  EXPECT_EQ(ConfusableSkeleton("apple"), "apple");
  EXPECT_EQ(ConfusableSkeleton("\xd0\xb0\xd1\x80\xd1\x80\xd3\x8f\xd0\xb5"), "apple");  // аррӏе
  EXPECT_EQ(ConfusableSkeleton("\xd1\x81\xd0\xbe\xd1\x81\xd0\xbe"), "coco");           // сосо
  EXPECT_EQ(ConfusableSkeleton("\xd1\x83\xd1\x85\xd1\x96\xd1\x98\xd1\x95\xd4\x81\xd2\xbb"),
            "yxijsdh");  // ухіјѕԁһ
  EXPECT_EQ(ConfusableSkeleton("\xce\xbf\xce\xbd\xcf\x81\xce\xb9\xce\xba\xce\xb1"),
            "ovpika");                                               // ονρικα (Greek)
  EXPECT_EQ(ConfusableSkeleton("\xd0\x90\xd0\x92\xd0\xa1"), "abc");  // АВС (Cyrillic)
  EXPECT_EQ(ConfusableSkeleton("\xce\x91\xce\x92\xce\x95"), "abe");  // ΑΒΕ (Greek)
  EXPECT_EQ(ConfusableSkeleton("\xc9\xa1it"), "git");                // ɡ (Latin script g)
}

TEST(ConfusablesTest, FullwidthDigitsAndCaseFoldToOneSkeleton) {
  EXPECT_EQ(ConfusableSkeleton("\xef\xbd\x81\xef\xbd\x90\xef\xbd\x90\xef\xbd\x8c\xef\xbd\x85"),
            "apple");                                               // ａｐｐｌｅ
  EXPECT_EQ(ConfusableSkeleton("\xef\xbc\xa1\xef\xbc\x91"), "al");  // Ａ１
  EXPECT_EQ(ConfusableSkeleton("APPLE"), "apple");
  EXPECT_EQ(ConfusableSkeleton("appIe"), "apple");  // a capital I prints like l
  EXPECT_EQ(ConfusableSkeleton("app1e"), "apple");
  EXPECT_EQ(ConfusableSkeleton("c0c0"), "coco");
  EXPECT_EQ(ConfusableSkeleton("\xd0\x86"), "l");  // Cyrillic І, as a capital I
  EXPECT_EQ(ConfusableSkeleton("team-7/vision_2"), "team-7/vision_2");
}

TEST(ConfusablesTest, OtherLettersAndMalformedBytesStayApart) {
  // Cyrillic letters without a Latin look-alike keep their own (lower-case) form.
  EXPECT_EQ(ConfusableSkeleton("\xd0\x97\xd1\x80\xd0\xb5\xd0\xbd\xd0\xb8\xd0\xb5"),
            "\xd0\xb7pe\xd0\xbd\xd0\xb8"
            "e");  // Зрение: з, н, и are no Latin letter
  EXPECT_NE(ConfusableSkeleton("caf\xc3\xa9"), ConfusableSkeleton("cafe"));  // é is not e
  EXPECT_EQ(ConfusableSkeleton("CAF\xc3\x89"), "caf\xc3\xa9");               // CAFÉ folds to café
  EXPECT_EQ(ConfusableSkeleton("\xe6\x97\xa5\xe6\x9c\xac"), "\xe6\x97\xa5\xe6\x9c\xac");  // 日本
  EXPECT_EQ(ConfusableSkeleton("a\xd1"), "a\xd1");  // cut short
  EXPECT_EQ(ConfusableSkeleton("\xff"
                               "A"),
            "\xff"
            "a");  // not UTF-8
  EXPECT_EQ(ConfusableSkeleton(""), "");
}

}  // namespace
}  // namespace gpupool
