#include "protocol/hardware_health_json.h"

#include <gtest/gtest.h>

#include "protocol/agent_protocol.h"

namespace gpupool::protocol {
namespace {

// The fields ride each telemetry sample and come back as sent; unset ones are left out, so
// an older controller sees nothing new.
TEST(HardwareHealthJsonTest, RoundTripsInATelemetryBatch) {
  TelemetryBatch b;
  b.node = "n1";
  GpuTelemetry g;
  g.index = 0;
  g.uuid = "GPU-1";
  g.at_ms = 5;
  g.hw.retired_pages = 12;
  g.hw.retired_pages_pending = false;
  g.hw.remapped_rows = 3;
  g.hw.remapped_rows_pending = true;
  g.hw.remapped_rows_failed = true;
  g.hw.hw_slowdown = false;
  b.samples.push_back(g);
  GpuTelemetry bare;
  bare.index = 1;
  b.samples.push_back(bare);
  const OrderedJson j = EncodeTelemetryBatch(b);
  EXPECT_EQ(j["samples"][0]["retired_pages"], 12);
  EXPECT_EQ(j["samples"][0]["remapped_rows_failed"], true);
  EXPECT_FALSE(j["samples"][1].contains("hw_slowdown"));
  Result<TelemetryBatch> back = DecodeTelemetryBatch(Json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, b);
}

// Network input: a wrong type or a count out of range is an error naming the field.
TEST(HardwareHealthJsonTest, BadFieldsAreNamed) {
  const struct {
    const char* json;
    const char* field;
  } cases[] = {
      {R"({"retired_pages": -1})", "samples[0].retired_pages"},
      {R"({"retired_pages": 1e300})", "samples[0].retired_pages"},
      {R"({"remapped_rows": "many"})", "samples[0].remapped_rows"},
      {R"({"hw_slowdown": 1})", "samples[0].hw_slowdown"},
      {R"({"remapped_rows_failed": "yes"})", "samples[0].remapped_rows_failed"},
  };
  for (const auto& c : cases) {
    Json sample = Json::parse(c.json);
    sample["index"] = 0;
    sample["at_ms"] = 1;
    Result<TelemetryBatch> r = DecodeTelemetryBatch(Json{{"node", "n1"}, {"samples", {sample}}});
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().ToString();
  }
  gpu::HardwareHealth hw;
  EXPECT_FALSE(DecodeHardwareHealth(Json::array(), "x", &hw).ok());
  ASSERT_TRUE(DecodeHardwareHealth(Json{{"retired_pages", nullptr}}, "x", &hw).ok());
  EXPECT_EQ(hw, gpu::HardwareHealth{});
}

}  // namespace
}  // namespace gpupool::protocol
