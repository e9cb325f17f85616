#include "cli/agent_flags.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

using Kind = agent::DiskMinFree::Kind;

TEST(AgentFlags, DiskMinFreeTakesASizeAPercentageAutoOrOff) {
  EXPECT_EQ(ParseDiskMinFree("auto").value().kind, Kind::kDefault);
  EXPECT_EQ(ParseDiskMinFree("off").value().kind, Kind::kOff);
  EXPECT_EQ(ParseDiskMinFree("0").value().kind, Kind::kOff);
  const agent::DiskMinFree two = ParseDiskMinFree("2G").value();
  EXPECT_EQ(two.kind, Kind::kBytes);
  EXPECT_EQ(two.bytes, uint64_t{2} << 30);
  const agent::DiskMinFree pct = ParseDiskMinFree("2.5%").value();
  EXPECT_EQ(pct.kind, Kind::kPercent);
  EXPECT_DOUBLE_EQ(pct.percent, 2.5);
  for (const char* bad : {"", "%", "0%", "100%", "-1%", "5 %", "x%", "lots", "-2G"}) {
    Result<agent::DiskMinFree> r = ParseDiskMinFree(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--disk-min-free " + std::string(bad) + ":"),
              std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("a percentage such as 5%"), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace gpupool::cli
