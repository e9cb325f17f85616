// The notes below `gpupool nodes`' table about its nodes' GPUs: AMD partitions and GPUs
// of unknown memory (render_test.cc has the table itself).
#include <gtest/gtest.h>

#include "cli/client/render.h"

namespace gpupool::cli {
// Named, not anonymous: the unity build puts this beside render_test.cc's helpers.
namespace render_nodes_test {

constexpr int64_t kRenderNow = 1'793'491'200'000'000;  // 2026-11-01T00:00:00Z

Json Parse(const char* text) { return Json::parse(text); }

// AMD GPUs in a partitioned mode (docs/sharing.md, "AMD GPUs"): their modes and CUs,
// grouped per node; both views; nothing for GPUs that report none.
TEST(RenderNodesTest, AmdPartitionsAreListedPerNode) {
  const Json answer = Parse(R"js({"nodes": [{"name": "mi1", "state": "up", "gpus": [
      {"index": 0, "name": "MI300X", "compute_partition": "CPX", "memory_partition": "NPS4",
       "compute_units": 38},
      {"index": 1, "name": "MI300X", "compute_partition": "CPX", "memory_partition": "NPS4",
       "compute_units": 38},
      {"index": 8, "name": "MI300X", "compute_partition": "SPX\u001b[2J",
       "memory_partition": "NPS1"},
      {"index": 9, "name": "MI210"}]}]})js");
  const std::string parts =
      "AMD partitions, each scheduled as a GPU of its own (docs/sharing.md):\n"
      "mi1 GPUs 0,1: CPX, NPS4, 38 CUs\n"
      "mi1 GPU 8: SPX [2J, NPS1\n";
  const std::string all = RenderNodes(answer, kRenderNow);
  EXPECT_NE(all.find(parts), std::string::npos) << all;
  Result<std::string> one = RenderNode(answer, "mi1", kRenderNow);
  ASSERT_TRUE(one.ok());
  EXPECT_NE(one->find(parts), std::string::npos) << *one;
  EXPECT_EQ(RenderNodes(Parse(R"({"nodes": [{"name": "n", "state": "up", "gpus": [
                {"index": 0, "name": "MI210"}]}]})"),
                        kRenderNow)
                .find("AMD partitions"),
            std::string::npos);
}

// A GPU whose memory discovery could not read (0, docs/node-schema.md): its node takes
// no --gpu-mem share, which both views say.
TEST(RenderNodesTest, GpusOfUnknownMemoryAreSaid) {
  const Json answer = Parse(R"js({"nodes": [{"name": "n1", "state": "up", "gpus": [
      {"index": 0, "name": "A100", "memory_total_bytes": 0},
      {"index": 1, "name": "A100", "memory_total_bytes": 0},
      {"index": 2, "name": "A100", "memory_total_bytes": 85899345920}]},
      {"name": "n2", "state": "up", "gpus": [{"index": 0, "name": "A100"}]}]})js");
  const std::string all = RenderNodes(answer, kRenderNow);
  EXPECT_NE(all.find("GPU memory unknown: no --gpu-mem share is placed on these nodes "
                     "(docs/node-schema.md):\nn1 GPUs 0,1: memory unknown\n"),
            std::string::npos)
      << all;
  EXPECT_EQ(all.find("n2 GPU"), std::string::npos) << all;
  Result<std::string> one = RenderNode(answer, "n1", kRenderNow);
  ASSERT_TRUE(one.ok());
  EXPECT_NE(one->find("  0  A100   unknown "), std::string::npos) << *one;
}

}  // namespace render_nodes_test
}  // namespace gpupool::cli
