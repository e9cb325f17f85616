// Helpers for the queue tests: hand-built clusters and jobs.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/queue/queued_job.h"

namespace gpupool::sched::testing {

inline ClusterState MakeCluster(int nodes, int gpus, const std::string& model = "V100",
                                int64_t cpu = 64000, int64_t mem = 262144) {
  ClusterState c;
  for (int i = 0; i < nodes; ++i) {
    Status s = c.AddNode(NodeSpec{fmt::format("n{}", i), cpu, mem, gpus, model, 0, 0});
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return c;
}

inline Task GpuTask(int num_gpu, int gpu_milli = 1000, int64_t cpu = 1000, int64_t mem = 1024) {
  Task t;
  t.name = "t";
  t.num_gpu = num_gpu;
  t.gpu_milli = num_gpu > 0 ? gpu_milli : 0;
  t.cpu_milli = cpu;
  t.memory_mib = mem;
  return t;
}

inline QueuedJob Job(std::string id, std::string user, int64_t submit, std::vector<Task> tasks,
                     int64_t time_limit = 0) {
  QueuedJob j;
  j.id = std::move(id);
  j.user = user;
  j.project = fmt::format("p-{}", user);
  j.submit_s = submit;
  j.time_limit_s = time_limit;
  j.tasks = std::move(tasks);
  for (Task& t : j.tasks) t.job_id = j.id;
  return j;
}

// Free amounts of every node, to check that a failed operation changed nothing.
using FreeSnapshot = std::vector<std::tuple<int64_t, int64_t, std::vector<int32_t>>>;
inline FreeSnapshot Snapshot(const ClusterState& c) {
  FreeSnapshot s;
  for (const NodeState& n : c.nodes()) {
    s.emplace_back(n.cpu_free_milli, n.memory_free_mib, n.gpu_free_milli);
  }
  return s;
}

inline std::vector<const QueuedJob*> Pointers(const std::vector<QueuedJob>& jobs) {
  std::vector<const QueuedJob*> out;
  for (const QueuedJob& j : jobs) out.push_back(&j);
  return out;
}

}  // namespace gpupool::sched::testing
