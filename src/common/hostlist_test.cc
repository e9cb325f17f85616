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

// At most 4096 names (a job's --nodelist / --exclude bound, jobs::kMaxNodeNames), counted
// before anything is expanded: a huge range is refused at no cost, saying how many it names.
TEST(HostListTest, AtMost4096NamesCountedWithoutExpanding) {
  EXPECT_EQ(kMaxHostListNames, 4096u);
  EXPECT_EQ(ExpandHostList("n[1-4096]").value().size(), 4096u);
  EXPECT_EQ(ExpandHostList("a[1-4095],b").value().size(), 4096u);
  EXPECT_EQ(ExpandHostList("n[1-4097]").status().message(),
            "'n[1-4097]': names 4097 nodes, more than the 4096 one list may name");
  EXPECT_EQ(ExpandHostList("a[0-65534],n1").status().message(),
            "'a[0-65534],n1': names 65536 nodes, more than the 4096 one list may name");
  EXPECT_EQ(HostListSize("a[0-65534],n1").value(), 65536u);
  EXPECT_EQ(HostListSize("r[01-10]n[1-4,7]x").value(), 50u);
  EXPECT_EQ(HostListSize("r[0-99999]n[0-99999]").value(), 10'000'000'000u);
  EXPECT_EQ(HostListSize("a[0-999999999]b[0-999999999]c[0-999999999]").value(),
            kHostListSizeSaturated);
  EXPECT_EQ(ExpandHostList("a[0-999999999]b[0-999999999]c[0-999999999]").status().message(),
            "'a[0-999999999]b[0-999999999]c[0-999999999]': names too many nodes, more than the "
            "4096 one list may name");
  EXPECT_FALSE(HostListSize("n[1-").ok());
  // A list of thousands of names written out is cut where a message quotes it.
  std::string written;
  for (int i = 0; i < 5000; ++i) written += (i ? ",n" : "n") + std::to_string(i);
  const std::string m = ExpandHostList(written).status().message();
  EXPECT_EQ(m, "'" + written.substr(0, 80) +
                   "...': names 5000 nodes, more than the 4096 one list may name");
}

}  // namespace
}  // namespace gpupool
