#include "cli/client/units.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

TEST(ParseSizeTest, AcceptsBinaryUnitsWithOptionalIAndB) {
  EXPECT_EQ(*ParseSize("1024"), 1024u);
  EXPECT_EQ(*ParseSize("16G"), 16ull << 30);
  EXPECT_EQ(*ParseSize("16g"), 16ull << 30);
  EXPECT_EQ(*ParseSize("16GB"), 16ull << 30);
  EXPECT_EQ(*ParseSize("16GiB"), 16ull << 30);
  EXPECT_EQ(*ParseSize("16Gi"), 16ull << 30);
  EXPECT_EQ(*ParseSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseSize("4K"), 4096u);
  EXPECT_EQ(*ParseSize("2T"), 2ull << 40);
  EXPECT_EQ(*ParseSize("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseSize("100B"), 100u);
  EXPECT_EQ(*ParseSize(" 8G "), 8ull << 30);
  EXPECT_EQ(*ParseSize("0"), 0u);
}

TEST(ParseSizeTest, RejectsJunkAndOverflowWithAHint) {
  for (const char* bad : {"", "G", "16X", "16GG", "16Bi", "-1G", "1.2.3G", "abc", "16 G B"}) {
    auto r = ParseSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("e.g. 16G"), std::string::npos) << r.status().message();
  }
  EXPECT_NE(ParseSize("99999999999999999999").status().message().find("too large"),
            std::string::npos);
  EXPECT_NE(ParseSize("20000000T").status().message().find("too large"), std::string::npos);
  EXPECT_NE(ParseSize("99999999.5P").status().message().find("too large"), std::string::npos);
}

// --gpu-mem 10 was 10 bytes: a memory size needs its unit, and is at least 1M (or 0).
TEST(ParseMemorySizeTest, ABareNumberOrLessThanOneMiBIsRefusedWithTheUnitsToWrite) {
  EXPECT_EQ(*ParseMemorySize("10G"), 10ull << 30);
  EXPECT_EQ(*ParseMemorySize("1M"), 1ull << 20);
  EXPECT_EQ(*ParseMemorySize("1024K"), 1ull << 20);
  EXPECT_EQ(*ParseMemorySize("0"), 0u);  // none, in any unit
  EXPECT_EQ(ParseMemorySize("10").status().message(),
            "a size needs a unit (a bare number would be 10 bytes); write 10G or 10240M");
  EXPECT_EQ(ParseMemorySize("4000").status().message(),  // Slurm's --mem 4000: megabytes
            "a size needs a unit (a bare number would be 4000 bytes); write 4000M or 4000G");
  EXPECT_EQ(ParseMemorySize(" 8589934592 ").status().message(),
            "a size needs a unit (a bare number would be 8589934592 bytes); write 8G");
  EXPECT_EQ(ParseMemorySize("1048577").status().message(),
            "a size needs a unit (a bare number would be 1048577 bytes); write 2M");
  EXPECT_EQ(ParseMemorySize("512K").status().message(),
            "'512K' is below the smallest size, 1M; write e.g. 10G or 10240M");
  EXPECT_EQ(ParseMemorySize("100B").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ParseMemorySize("lots").status().message().find("'lots' is not a size"),
            std::string::npos);
}

TEST(ParseDurationTest, SlurmClockForms) {
  EXPECT_EQ(*ParseDuration("90"), 90 * 60);  // plain number: minutes
  EXPECT_EQ(*ParseDuration("5:30"), 5 * 60 + 30);
  EXPECT_EQ(*ParseDuration("1:30:00"), 5400);
  EXPECT_EQ(*ParseDuration("1-00:00:00"), 86400);
  EXPECT_EQ(*ParseDuration("2-12"), 2 * 86400 + 12 * 3600);
  EXPECT_EQ(*ParseDuration("1-02:03"), 86400 + 2 * 3600 + 3 * 60);
  EXPECT_EQ(*ParseDuration("100:00:00"), 360000);  // leading hours may exceed 24
}

TEST(ParseDurationTest, UnitForms) {
  EXPECT_EQ(*ParseDuration("45s"), 45);
  EXPECT_EQ(*ParseDuration("90m"), 5400);
  EXPECT_EQ(*ParseDuration("2h"), 7200);
  EXPECT_EQ(*ParseDuration("1d"), 86400);
  EXPECT_EQ(*ParseDuration("1h30m"), 5400);
  EXPECT_EQ(*ParseDuration("2H"), 7200);
}

TEST(ParseDurationTest, RejectsBadForms) {
  for (const char* bad : {"", "abc", "1x", "h", "1h1h", "1:2:3:4", "-5", "1-", "1-2:3:4:5", ":30",
                          "1.5h", "1::2", "1h 30m"}) {
    auto r = ParseDuration(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("e.g. 45s, 90m, 2h"), std::string::npos) << bad;
  }
  EXPECT_NE(ParseDuration("1:75:00").status().message().find("below 60"), std::string::npos);
  EXPECT_NE(ParseDuration("10:60").status().message().find("below 60"), std::string::npos);
  EXPECT_NE(ParseDuration("1-24:00:00").status().message().find("below 24"), std::string::npos);
}

TEST(ParseGpuShareTest, FractionsAndPercent) {
  EXPECT_EQ(*ParseGpuShare("0.25"), 250);
  EXPECT_EQ(*ParseGpuShare("1"), 1000);
  EXPECT_EQ(*ParseGpuShare("25%"), 250);
  EXPECT_EQ(*ParseGpuShare("0.001"), 1);
  EXPECT_EQ(*ParseGpuShare("0.3333"), 333);
}

TEST(ParseGpuShareTest, OutOfRangeSaysTheRange) {
  for (const char* bad : {"1.5", "0", "-0.5", "150%"}) {
    EXPECT_EQ(ParseGpuShare(bad).status().message(), "a share must be in (0, 1]") << bad;
  }
  EXPECT_NE(ParseGpuShare("0.0001").status().message().find("at least 0.001"), std::string::npos);
  EXPECT_NE(ParseGpuShare("half").status().message().find("such as 0.25"), std::string::npos);
  EXPECT_FALSE(ParseGpuShare("").ok());
  EXPECT_FALSE(ParseGpuShare("nan").ok());
}

TEST(ParseCpusTest, WholeAndFractional) {
  EXPECT_EQ(*ParseCpus("2"), 2000);
  EXPECT_EQ(*ParseCpus("0.5"), 500);
  // No CPU asked would be none counted (a hostile user's jobs piled up on one node).
  EXPECT_NE(ParseCpus("0").status().message().find("at least 0.001"), std::string::npos);
  EXPECT_NE(ParseCpus("-1").status().message().find("at least 0.001"), std::string::npos);
  EXPECT_NE(ParseCpus("two").status().message().find("e.g. 2 or 0.5"), std::string::npos);
  EXPECT_NE(ParseCpus("0.0001").status().message().find("at least 0.001"), std::string::npos);
  EXPECT_NE(ParseCpus("1e9").status().message().find("at most"), std::string::npos);
}

TEST(ParseTimePointTest, DatesAreUtcAndDurationsAreAgo) {
  const int64_t now = 1'800'000'000'000'000;
  EXPECT_EQ(*ParseTimePoint("2026-11-01", now), 1'793'491'200'000'000);
  EXPECT_EQ(*ParseTimePoint("2026-11-01T08:30", now), 1'793'491'200'000'000 + 30'600'000'000);
  EXPECT_EQ(*ParseTimePoint("2026-11-01 08:30:15Z", now), 1'793'491'200'000'000 + 30'615'000'000);
  EXPECT_EQ(*ParseTimePoint("7d", now), now - 7 * 86'400'000'000);
  EXPECT_EQ(*ParseTimePoint("12h", now), now - 12 * 3'600'000'000);
  EXPECT_EQ(*ParseTimePoint("now", now), now);
}

TEST(ParseTimePointTest, RejectsImpossibleDatesAndJunk) {
  for (const char* bad : {"2026-02-30", "2026-13-01", "2026-11-01T25:00", "2026-11-01T8:00",
                          "11/01/2026", "yesterday", "7", "2026-11-01X"}) {
    EXPECT_FALSE(ParseTimePoint(bad, 0).ok()) << bad;
  }
  EXPECT_NE(ParseTimePoint("2026-02-30", 0).status().message().find("not a valid date"),
            std::string::npos);
}

TEST(FormatTest, MilliBytesDurationsTimes) {
  EXPECT_EQ(FormatMilli(250), "0.25");
  EXPECT_EQ(FormatMilli(1000), "1");
  EXPECT_EQ(FormatMilli(2500), "2.5");
  EXPECT_EQ(FormatMilli(125), "0.125");
  EXPECT_EQ(FormatMilli(0), "0");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(20ull << 30), "20 GiB");
  EXPECT_EQ(FormatBytes(3ull << 29), "1.5 GiB");
  EXPECT_EQ(FormatDuration(45), "45s");
  EXPECT_EQ(FormatDuration(192), "3m12s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatDuration(2 * 86400 + 3 * 3600), "2d03h");
  EXPECT_EQ(FormatDuration(-5), "0s");
  EXPECT_EQ(FormatTimeUtc(1'793'491'200'000'000), "2026-11-01T00:00:00Z");
  EXPECT_EQ(FormatTimeUtc(0), "-");
}

}  // namespace
}  // namespace gpupool::cli
