#include "common/hostlist.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

using Names = std::vector<std::string>;

TEST(HostListTest, PlainNamesAndCommas) {
  EXPECT_EQ(ExpandHostList("node0").value(), (Names{"node0"}));
  EXPECT_EQ(ExpandHostList("a,b,a").value(), (Names{"a", "b"}));
}

TEST(HostListTest, BracketsKeepPaddingAndMultiply) {
  EXPECT_EQ(ExpandHostList("node[01-03,07]").value(),
            (Names{"node01", "node02", "node03", "node07"}));
  EXPECT_EQ(ExpandHostList("gpu[8-10]x,c1").value(), (Names{"gpu8x", "gpu9x", "gpu10x", "c1"}));
  EXPECT_EQ(ExpandHostList("n[08-10]").value(), (Names{"n08", "n09", "n10"}));
  EXPECT_EQ(ExpandHostList("r[1-2]n[1-2]").value(), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
}

TEST(HostListTest, MistakesAreNamed) {
  for (const char* bad : {"", "a,,b", "a,", "node[1-3", "node1-3]", "node[3-1]", "node[a-b]",
                          "node[]", "node[1-]", "a b", "n[0-99999999]"}) {
    Result<Names> r = ExpandHostList(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(ExpandHostList("node[3-1]").status().message().find("ends below its start"),
            std::string::npos);
  EXPECT_NE(ExpandHostList("node[1-3").status().message().find("without its ']'"),
            std::string::npos);
}

}  // namespace
}  // namespace gpupool
