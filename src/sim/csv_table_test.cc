#include "sim/csv_table.h"

#include <gtest/gtest.h>

namespace gpupool::sim {
namespace {

TEST(CsvTable, FindsColumnsByNameAndCountsLines) {
  auto t = CsvTable::Parse("b,a\r\n\n2,1\n\"x,y\",\"say \"\"hi\"\"\"\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->num_rows(), 2u);
  EXPECT_EQ(t->Field(0, "a"), "1");
  EXPECT_EQ(t->Line(0), 3);
  EXPECT_EQ(t->Field(1, "b"), "x,y");
  EXPECT_EQ(t->Field(1, "a"), "say \"hi\"");
  EXPECT_EQ(t->Field(0, "absent"), "");
  EXPECT_EQ(t->Where(1, "a"), "t.csv:4: field 'a'");
}

TEST(CsvTable, RejectsBrokenStructure) {
  auto short_row = CsvTable::Parse("a,b\n1\n", "s.csv");
  ASSERT_FALSE(short_row.ok());
  EXPECT_EQ(short_row.status().message(),
            "s.csv:2: 1 fields where the header has 2; each line needs one value per column");
  EXPECT_FALSE(CsvTable::Parse("", "e.csv").ok());
  EXPECT_FALSE(CsvTable::Parse("a,a\n", "d.csv").ok());
  EXPECT_FALSE(CsvTable::Parse("a,\n", "n.csv").ok());
  auto quote = CsvTable::Parse("a\n\"open\n", "q.csv");
  ASSERT_FALSE(quote.ok());
  EXPECT_NE(quote.status().message().find("q.csv:2"), std::string::npos);
}

TEST(CsvTable, MissingColumnNamesItAndTheHeader) {
  auto t = CsvTable::Parse("x,y\n1,2\n", "m.csv");
  ASSERT_TRUE(t.ok());
  Status s = t->RequireColumns({"x", "duration"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("m.csv:1: missing column 'duration'"), std::string::npos);
  EXPECT_NE(s.message().find("x,y"), std::string::npos);
}

TEST(CsvTable, TypedReadsNameFileLineAndField) {
  auto t = CsvTable::Parse("n,d\n12,2.5\n-3,abc\n,\n12.0,1e400\n", "v.csv");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Int(0, "n"), 12);
  EXPECT_DOUBLE_EQ(*t->Number(0, "d"), 2.5);
  EXPECT_EQ(t->Int(1, "n").status().message(),
            "v.csv:3: field 'n': negative value -3 is not allowed");
  EXPECT_EQ(t->Number(1, "d").status().message(), "v.csv:3: field 'd': 'abc' is not a number");
  EXPECT_FALSE(t->Int(2, "n").ok());
  EXPECT_EQ(*t->Int(2, "n", 0, INT64_MAX, 7), 7);
  EXPECT_EQ(*t->Int(3, "n"), 12);        // a whole number written as a decimal
  EXPECT_FALSE(t->Number(3, "d").ok());  // infinity
  EXPECT_EQ(t->Int(0, "n", 0, 10).status().message(),
            "v.csv:2: field 'n': 12 is above the maximum 10");
  EXPECT_FALSE(t->Int(0, "d").ok());  // 2.5 is not whole
}

}  // namespace
}  // namespace gpupool::sim
