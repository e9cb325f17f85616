#include "common/json.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(JsonTest, ParseErrorsNameTheSourceAndByte) {
  Result<Json> r = ParseJson("{\"a\": 1,", "node.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("node.json: invalid JSON at byte"), std::string::npos)
      << r.status().message();
}

TEST(JsonTest, RejectsOversizedAndDeepDocuments) {
  EXPECT_EQ(ParseJson(std::string(100, ' '), "x", 10).status().code(),
            StatusCode::kResourceExhausted);
  std::string deep(1000, '[');
  deep += std::string(1000, ']');
  Result<Json> r = ParseJson(deep, "deep.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nests deeper"), std::string::npos);
  // Brackets inside strings do not count.
  EXPECT_TRUE(
      ParseJson("{\"s\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}",
                "s", 1 << 20, 4)
          .ok());
}

// Which submissions name an image (Api's blocking rule): a key of the object itself,
// never the same word in a value or a nested object; bad JSON has no keys.
TEST(JsonTest, TopLevelKeysAreFoundWithoutReadingValuesAsKeys) {
  EXPECT_TRUE(JsonHasTopLevelKey(R"({"command": ["x"], "image": "ubuntu"})", {"image"}));
  EXPECT_TRUE(JsonHasTopLevelKey(R"({"environment": "t:1"})", {"image", "environment"}));
  EXPECT_FALSE(JsonHasTopLevelKey(R"({"command": ["echo", "image"]})", {"image"}));
  EXPECT_FALSE(JsonHasTopLevelKey(R"({"command": [""image""]})", {"image"}));
  EXPECT_FALSE(JsonHasTopLevelKey(R"({"request": {"image": "x"}})", {"image"}));
  EXPECT_FALSE(JsonHasTopLevelKey(R"([{"image": "x"}])", {"image"}));
  EXPECT_FALSE(JsonHasTopLevelKey("not json", {"image"}));
  EXPECT_FALSE(JsonHasTopLevelKey("", {"image"}));
  // Stops at the key: what follows it is not read.
  EXPECT_TRUE(JsonHasTopLevelKey(R"({"a": {"b": [1, 2]}, "image": "x", garbage)", {"image"}));
}

TEST(JsonTest, FieldsReportPathAndType) {
  Json j = Json::parse(R"({"name": "A100", "count": "eight", "mem": -5, "extra": 1})");
  std::string name;
  int64_t count = 0;
  JsonFields f(j, "gpus[2]");
  f.Required("name", &name);
  f.Required("count", &count);
  Status s = f.Finish();
  EXPECT_EQ(name, "A100");
  EXPECT_EQ(s.message(), "gpus[2].count: expected an integer, found string");
}

TEST(JsonTest, FieldsRangeMissingAndUnknown) {
  Json j = Json::parse(R"({"mem": -5, "ok": true, "surprise": 1})");
  {
    uint64_t mem = 0;
    JsonFields f(j, "gpu");
    f.Required("mem", &mem);
    EXPECT_NE(f.Finish().message().find("gpu.mem: -5 is negative"), std::string::npos);
  }
  {
    bool ok = false;
    std::string missing;
    JsonFields f(j, "");
    f.Required("ok", &ok);
    f.Required("name", &missing);
    EXPECT_EQ(f.Finish().message(), "name: required field is missing");
  }
  {
    bool ok = false;
    int64_t mem = 0;
    JsonFields f(j, "gpu");
    f.Required("ok", &ok);
    f.Optional("mem", &mem, -10, 10);
    Status s = f.Finish();
    EXPECT_NE(s.message().find("gpu.surprise: unknown field"), std::string::npos) << s.message();
    EXPECT_EQ(mem, -5);
  }
}

// Finish() counts the members asked for: one asked twice (an Optional reads it twice),
// or a null one, is counted once, and an unknown one is still found.
TEST(JsonTest, UnknownFieldFoundWhateverTheKnownWereAskedFor) {
  const Json j = Json::parse(R"({"name": "a", "gone": null, "surprise": 1})");
  {
    std::string name;
    int64_t gone = 7;
    JsonFields f(j, "job");
    f.Optional("name", &name);  // reads it twice: three members asked for, of three
    f.Optional("gone", &gone);
    f.Optional("absent", &gone);
    EXPECT_EQ(f.Finish().message(),
              "job.surprise: unknown field; the known fields here are absent, gone, name");
    EXPECT_EQ(gone, 7);
  }
  {
    std::string name;
    int64_t n = 0;
    JsonFields f(j, "job");
    f.Optional("name", &name);
    f.Member("gone");
    f.Optional("surprise", &n);
    EXPECT_TRUE(f.Finish().ok());
    EXPECT_EQ(n, 1);
  }
}

TEST(JsonTest, MinimumAppliesToNonNegativeValues) {
  // Regression: non-negative JSON integers are parsed as unsigned and skipped the minimum.
  Json j = Json::parse(R"({"tasks": 0})");
  int tasks = 1;
  JsonFields f(j, "req");
  f.Optional("tasks", &tasks, 1, 10);
  EXPECT_EQ(f.Finish().message(), "req.tasks: 0 is outside the range 1..10");
  EXPECT_EQ(tasks, 1);
}

TEST(JsonTest, FractionalWhereIntegerExpected) {
  Json j = Json::parse(R"({"n": 1.5})");
  int n = 0;
  JsonFields f(j, "x");
  f.Required("n", &n);
  EXPECT_EQ(f.Finish().message(), "x.n: expected an integer, found a fractional number");
  // Whole numbers too large for an integer are read as doubles: out of range, not
  // fractional (the red team's 99999999999999999999 grace).
  for (const char* big : {R"({"n": 99999999999999999999})", R"({"n": 1e30})", R"({"n": -1e30})"}) {
    const Json parsed = Json::parse(big);
    JsonFields g(parsed, "x");
    g.Required("n", &n);
    EXPECT_NE(g.Finish().message().find("is outside the range -2147483648..2147483647"),
              std::string::npos)
        << big;
  }
}

TEST(JsonTest, NonObjectIsAnError) {
  Json j = Json::parse("[1,2]");
  JsonFields f(j, "node");
  EXPECT_EQ(f.Finish().message(), "node: expected an object, found array");
}

TEST(JsonTest, DumpReplacesInvalidUtf8) {
  Json j = {{"name", std::string("bad\xff")}};
  EXPECT_EQ(DumpJson(j), "{\"name\":\"bad\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace gpupool
