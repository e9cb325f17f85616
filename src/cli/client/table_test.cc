#include "cli/client/table.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

TEST(TableTest, PadsAlignsAndCleans) {
  Table t({"ID>", "NAME", "NOTE"});
  t.AddRow({"7", "a\nb", "x"});
  t.AddRow({"123", "élan", ""});
  EXPECT_EQ(t.Render(),
            " ID  NAME  NOTE\n"
            "  7  a b   x\n"
            "123  élan\n");
}

// Another user's job name or command reaches an admin's terminal: the 8-bit CSI (U+009B,
// which xterm honours in UTF-8 mode), NEL and a right-to-left override (which reverses the
// rest of the row) are made harmless; text in other scripts is left as it is.
TEST(TableTest, C1ControlsAndBidiOverridesAreMadeHarmless) {
  EXPECT_EQ(CleanCell("x\u009b2Jy\u0085z"), "x 2Jy z");
  EXPECT_EQ(CleanCell("adv7a \u202eGNINNUR"), "adv7a \ufffdGNINNUR");
  EXPECT_EQ(CleanCell("a\u2066b\u2069c\u202ad"), "a\ufffdb\ufffdc\ufffdd");
  EXPECT_EQ(CleanCell("\u00a0\u00e9\u05d0\u202f\u2070"), "\u00a0\u00e9\u05d0\u202f\u2070");
  EXPECT_EQ(CleanCell("\x1b[2J\x7f"), " [2J ");
}

}  // namespace
}  // namespace gpupool::cli
