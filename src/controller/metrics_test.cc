#include "controller/metrics.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "common/strings.h"

namespace gpupool::controller {
namespace {

// The value of the sample line `series` (name and labels as printed), or -1.
double ValueOf(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

TEST(MetricsTest, PendingReasonsFallIntoTheirClasses) {
  EXPECT_EQ(PendingReasonClass("needs 2 idle GPUs on one node; the most idle on a node is 1"),
            "resources");
  EXPECT_EQ(PendingReasonClass("cannot run on any node: no node has 9 GPUs"), "unplaceable");
  EXPECT_EQ(PendingReasonClass("waiting for its turn: jobs ahead of it in the queue (3)"), "queue");
  EXPECT_EQ(PendingReasonClass("waits for job 12 (RUNNING) to succeed (--after-ok 12)"),
            "dependency");
  EXPECT_EQ(PendingReasonClass("held by alice: `gpupool release 4` lets it start"), "held");
  EXPECT_EQ(PendingReasonClass("waits: user bob has 4 GPUs in use (max_gpus 4, `gpupool "
                               "limits`)"),
            "limit");
  EXPECT_EQ(PendingReasonClass("array 7 runs at most 2 elements at once (--array ...%2)"),
            "array_limit");
  EXPECT_EQ(PendingReasonClass(""), "other");
}

TEST(MetricsTest, RendersEveryFamilyOnceWithCumulativeBucketsAndEscapedLabels) {
  PoolMetrics m;
  m.ObservePass(0.0003, 2);
  m.ObservePass(0.2, 1);
  m.ObservePass(7.0, 0);  // a long pass (issue 31): in the 10 s bucket, not the 5 s one
  m.ObserveRequest("GET", "/v1/jobs", 0.002);
  m.ObserveRequest("GET", "/v1/jobs", 0.0001);
  m.CountPreemption();
  m.CountPreemption();
  m.CountPreemptedGpuHours(1.5);
  m.CountPreemptedGpuHours(0.25);
  PoolSnapshot pool;
  pool.jobs_by_state = {{"PENDING", 3}, {"RUNNING", 1}, {"SUCCEEDED", 7}};
  pool.pending_by_reason = {{"resources", 2}, {"held", 1}};
  pool.nodes_by_state = {{"up", 2}, {"down", 1}};
  pool.gpus_total = 8;
  pool.gpus_allocated = 2.5;
  pool.gpus_by_health = {{"healthy", 7}, {"cordoned", 1}};
  pool.unhealthy_gpus = {{"n\"1", 3, "GPU-x", "cordoned"}};
  pool.node_disks = {{"n1", uint64_t{12} << 20, uint64_t{50} << 30, true},
                     {"n2", uint64_t{40} << 30, uint64_t{50} << 30, false}};
  pool.gpu_hours[{"alice", "vision"}] = 1.25;
  pool.gpu_hours[{"bo\"b\\", "(none)"}] = 0.5;
  const std::string text = m.Render(pool);

  EXPECT_EQ(ValueOf(text, "gpupool_jobs{state=\"PENDING\"}"), 3);
  EXPECT_EQ(ValueOf(text, "gpupool_jobs{state=\"LOST\"}"), 0);  // every state, 0 included
  EXPECT_EQ(ValueOf(text, "gpupool_jobs{state=\"SUCCEEDED\"}"), 7);
  EXPECT_EQ(ValueOf(text, "gpupool_jobs_pending{reason=\"held\"}"), 1);
  EXPECT_EQ(ValueOf(text, "gpupool_nodes{state=\"down\"}"), 1);
  EXPECT_EQ(ValueOf(text, "gpupool_gpus"), 8);
  EXPECT_EQ(ValueOf(text, "gpupool_gpus_allocated"), 2.5);
  EXPECT_EQ(ValueOf(text, "gpupool_gpu_health{state=\"cordoned\"}"), 1);
  EXPECT_EQ(ValueOf(text, "gpupool_gpu_health{state=\"failed\"}"), 0);  // every state
  EXPECT_EQ(ValueOf(text,
                    "gpupool_gpu_health_state{Hostname=\"n\\\"1\",gpu=\"3\",UUID=\"GPU-x\","
                    "state=\"cordoned\"}"),
            1);
  EXPECT_EQ(ValueOf(text, "gpupool_allocated_gpu_seconds_total{user=\"alice\",project=\"vision\"}"),
            4500);
  EXPECT_EQ(
      ValueOf(text, "gpupool_allocated_gpu_seconds_total{user=\"bo\\\"b\\\\\",project=\"(none)\"}"),
      1800);
  EXPECT_EQ(ValueOf(text, "gpupool_node_disk_free_bytes{Hostname=\"n1\"}"), 12 << 20);
  EXPECT_EQ(ValueOf(text, "gpupool_node_disk_size_bytes{Hostname=\"n2\"}"), 50.0 * (1 << 30));
  EXPECT_EQ(ValueOf(text, "gpupool_node_disk_pressure{Hostname=\"n1\"}"), 1);
  EXPECT_EQ(ValueOf(text, "gpupool_node_disk_pressure{Hostname=\"n2\"}"), 0);
  EXPECT_EQ(ValueOf(text, "gpupool_placement_failures_total"), 3);
  EXPECT_EQ(ValueOf(text, "gpupool_preemptions_total"), 2);
  EXPECT_EQ(ValueOf(text, "gpupool_preempted_gpu_seconds_total"), 1.75 * 3600);
  EXPECT_EQ(ValueOf(text, "gpupool_scheduling_pass_seconds_count"), 3);
  EXPECT_EQ(ValueOf(text, "gpupool_scheduling_pass_seconds_bucket{le=\"0.0001\"}"), 0);
  EXPECT_EQ(ValueOf(text, "gpupool_scheduling_pass_seconds_bucket{le=\"0.0005\"}"), 1);
  EXPECT_EQ(ValueOf(text, "gpupool_scheduling_pass_seconds_bucket{le=\"2.5\"}"), 2);
  EXPECT_EQ(ValueOf(text, "gpupool_scheduling_pass_seconds_bucket{le=\"5\"}"), 2);
  EXPECT_EQ(ValueOf(text, "gpupool_scheduling_pass_seconds_bucket{le=\"10\"}"), 3);
  EXPECT_EQ(ValueOf(text, "gpupool_scheduling_pass_seconds_bucket{le=\"+Inf\"}"), 3);
  EXPECT_EQ(ValueOf(text,
                    "gpupool_api_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/"
                    "jobs\",le=\"0.0005\"}"),
            1);
  EXPECT_EQ(
      ValueOf(text,
              "gpupool_api_request_duration_seconds_count{method=\"GET\",route=\"/v1/jobs\"}"),
      2);
  // One HELP and one TYPE per family, before its samples.
  std::set<std::string> helped;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string family = Split(line.substr(7), ' ')[0];
      EXPECT_TRUE(helped.insert(family).second) << "HELP twice for " << family;
    } else if (line.rfind("# ", 0) != 0) {
      const std::string name = line.substr(0, line.find_first_of("{ "));
      bool known = false;
      for (const std::string& f : helped) {
        known = known || name == f || name == f + "_bucket" || name == f + "_sum" ||
                name == f + "_count";
      }
      EXPECT_TRUE(known) << "sample before its family: " << line;
    }
  }
  EXPECT_EQ(helped.size(), 19u);  // no GPU telemetry in this snapshot: no DCGM_FI_DEV_*
}

// Issue 17: dcgm-exporter's names and labels, job labels only while a job holds the GPU,
// absent figures left out, and the used GPU time next to the allocated.
TEST(MetricsTest, DcgmGaugesAndUsedGpuSeconds) {
  PoolMetrics m;
  PoolSnapshot pool;
  pool.used_gpu_hours[{"alice", "vision"}] = 1.5;
  GpuGauges busy;
  busy.gpu = 0;
  busy.uuid = "GPU-a";
  busy.device = "nvidia0";
  busy.model_name = "NVIDIA H100 80GB HBM3";
  busy.hostname = "gpu07";
  busy.hpc_job = "42";
  busy.user = "alice";
  busy.util_pct = 93;
  busy.fb_used_mib = 30720;
  busy.fb_free_mib = 50839;
  busy.power_w = 612.5;
  busy.temp_c = 64;
  busy.xid_errors = 79;
  busy.ecc_dbe_vol_total = 2;
  GpuGauges free_gpu = busy;
  free_gpu.gpu = 1;
  free_gpu.uuid = "GPU-b";
  free_gpu.device = "nvidia1";
  free_gpu.hpc_job.clear();
  free_gpu.user.clear();
  free_gpu.util_pct = 0;
  free_gpu.power_w.reset();
  free_gpu.xid_errors = 0;
  free_gpu.ecc_dbe_vol_total.reset();
  pool.gpus = {busy, free_gpu};
  const std::string text = m.Render(pool);
  const std::string labels =
      "gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\","
      "Hostname=\"gpu07\"";
  EXPECT_EQ(ValueOf(text, "DCGM_FI_DEV_GPU_UTIL{" + labels + ",hpc_job=\"42\",user=\"alice\"}"),
            93);
  EXPECT_EQ(ValueOf(text, "DCGM_FI_DEV_FB_USED{" + labels + ",hpc_job=\"42\",user=\"alice\"}"),
            30720);
  EXPECT_EQ(ValueOf(text, "DCGM_FI_DEV_POWER_USAGE{" + labels + ",hpc_job=\"42\",user=\"alice\"}"),
            612.5);
  EXPECT_EQ(ValueOf(text,
                    "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\","
                    "modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu07\"}"),
            0);
  EXPECT_EQ(text.find("DCGM_FI_DEV_POWER_USAGE{gpu=\"1\""), std::string::npos);
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"), std::string::npos);
  EXPECT_EQ(ValueOf(text, "DCGM_FI_DEV_XID_ERRORS{" + labels + ",hpc_job=\"42\",user=\"alice\"}"),
            79);
  EXPECT_EQ(ValueOf(text,
                    "DCGM_FI_DEV_XID_ERRORS{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\","
                    "modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu07\"}"),
            0);
  // dcgm-exporter's type for it: a counter.
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"), std::string::npos);
  EXPECT_EQ(
      ValueOf(text, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{" + labels + ",hpc_job=\"42\",user=\"alice\"}"),
      2);
  EXPECT_EQ(text.find("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"1\""), std::string::npos);
  EXPECT_EQ(ValueOf(text, "gpupool_used_gpu_seconds_total{user=\"alice\",project=\"vision\"}"),
            5400);
}

}  // namespace
}  // namespace gpupool::controller
