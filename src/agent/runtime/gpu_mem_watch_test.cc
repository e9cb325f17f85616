#include "agent/runtime/gpu_mem_watch.h"

#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr int64_t kGiBInMiB = 1024;

// One GPU's sample: index `index`, processes (pid, job, MiB used; a negative MiB: not
// reported).
protocol::GpuTelemetry Sample(int index, std::vector<std::tuple<int64_t, int64_t, int64_t>> procs) {
  protocol::GpuTelemetry g;
  g.index = index;
  g.uuid = "GPU-" + std::to_string(index);
  for (const auto& [pid, job, mib] : procs) {
    protocol::TelemetryProcess p;
    p.pid = pid;
    p.job_id = job;
    if (mib >= 0) p.used_mib = mib;
    g.processes.push_back(p);
  }
  return g;
}

WatchedShare Share(int64_t job, int task, int gpu, uint64_t limit) {
  return WatchedShare{RunId{job, task, 1, 0}, gpu, limit, "none"};
}

TEST(GpuMemWatchTest, AShareOverItsMemoryAndTheSlackIsOverOthersAreNot) {
  // Job 5 (8 GiB) uses 9.5 GiB in two processes; job 6 (8 GiB) 8.5 GiB, within the slack;
  // job 7 uses 20 GiB but is no share watched here (a whole GPU); a process of no job.
  const std::vector<protocol::GpuTelemetry> round = {Sample(0, {{10, 5, 6 * kGiBInMiB},
                                                                {11, 5, 3584},
                                                                {12, 6, 8704},
                                                                {13, 7, 20 * kGiBInMiB},
                                                                {14, 0, 40 * kGiBInMiB}})};
  const std::vector<MemOverrun> over =
      FindMemOverruns(round, {Share(5, 0, 0, 8 * kGiB), Share(6, 0, 0, 8 * kGiB)}, kGiB);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].runs, (std::vector<RunId>{RunId{5, 0, 1, 0}}));
  EXPECT_EQ(over[0].gpu_index, 0);
  EXPECT_EQ(over[0].reason,
            "its processes used 9728 MiB of GPU 0 (GPU-0)'s memory, more than its share's "
            "8192 MiB and the node's slack of 1024 MiB: stopped by the node's GPU memory watch "
            "(the GPU's enforcement: none)");
}

TEST(GpuMemWatchTest, WithoutSlackOneMiBOverIsOver) {
  const std::vector<protocol::GpuTelemetry> round = {Sample(0, {{10, 5, 2049}})};
  EXPECT_EQ(FindMemOverruns(round, {Share(5, 0, 0, 2 * kGiB)}, 0).size(), 1u);
  const std::vector<protocol::GpuTelemetry> at = {Sample(0, {{10, 5, 2048}})};
  EXPECT_TRUE(FindMemOverruns(at, {Share(5, 0, 0, 2 * kGiB)}, 0).empty());
}

TEST(GpuMemWatchTest, OneJobsSharesOnOneGpuCountTogetherAndEachGpuAlone) {
  // Two tasks of job 5 on GPU 0 (4 GiB each) use 7 GiB between them: within; on GPU 1 its
  // third task (4 GiB) uses 5 GiB: over, and only that task is named.
  const std::vector<protocol::GpuTelemetry> round = {Sample(0, {{10, 5, 7 * kGiBInMiB}}),
                                                     Sample(1, {{11, 5, 5 * kGiBInMiB}})};
  const std::vector<MemOverrun> over = FindMemOverruns(
      round, {Share(5, 0, 0, 4 * kGiB), Share(5, 1, 0, 4 * kGiB), Share(5, 2, 1, 4 * kGiB)}, 0);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].gpu_index, 1);
  EXPECT_EQ(over[0].runs, (std::vector<RunId>{RunId{5, 2, 1, 0}}));
}

TEST(GpuMemWatchTest, UnreportedMemoryAndGpusWithoutASampleFindNothing) {
  // NVML reports no per-process memory (NVML_VALUE_NOT_AVAILABLE, as in some modes), and
  // GPU 1 has no sample in this round.
  const std::vector<protocol::GpuTelemetry> round = {Sample(0, {{10, 5, -1}})};
  EXPECT_TRUE(FindMemOverruns(round, {Share(5, 0, 0, kGiB), Share(6, 0, 1, kGiB)}, 0).empty());
}

}  // namespace
}  // namespace gpupool::agent
