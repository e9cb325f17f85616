// Helpers for the time-driven tests: jobs in a line of code, clusters from a spec and a
// placement registry holding the predictable first-fit test double.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "sched/policy_registry.h"
#include "sched/queue/first_fit_for_test.h"
#include "sim/timed/cluster_spec.h"
#include "sim/timed/trace_job.h"

namespace gpupool::sim::testing {

inline TraceJob TJob(std::string id, std::string user, int64_t submit, int64_t duration, int gpus,
                     int tasks = 1, int64_t limit = 0) {
  TraceJob j;
  j.id = std::move(id);
  j.user = user;
  j.project = user;
  j.submit_s = submit;
  j.duration_s = duration;
  j.time_limit_s = limit;
  for (int i = 0; i < tasks; ++i) {
    TraceTask t;
    t.num_gpu = gpus;
    t.gpu_milli = gpus > 0 ? 1000 : 0;
    t.cpu_milli = 1000;
    t.memory_mib = 1024;
    j.tasks.push_back(t);
  }
  return j;
}

// The cluster a spec ("2x8:V100,1x4:T4") makes; one that does not parse or build fails
// the test.
inline sched::ClusterState Cluster(const std::string& spec) {
  auto nodes = ParseClusterSpec(spec);
  EXPECT_TRUE(nodes.ok()) << nodes.status().ToString();
  auto c = BuildCluster(*nodes);
  EXPECT_TRUE(c.ok());
  return *c;
}

// ../shared/traces beside the source tree (only in the project workspace); the
// GPUPOOL_SOURCE_DIR variable, which ctest sets, names another checkout's.
inline std::filesystem::path TracesDir() {
  const char* src = std::getenv("GPUPOOL_SOURCE_DIR");
  return std::filesystem::path(src != nullptr ? src : GPUPOOL_SOURCE_DIR) / "../shared/traces";
}

inline const sched::PlacementPolicyRegistry& FirstFitRegistry() {
  static const sched::PlacementPolicyRegistry* r = [] {
    auto* reg = new sched::PlacementPolicyRegistry();
    (void)reg->Register("first-fit", "test double", [](const sched::PolicyConfig&) {
      return std::unique_ptr<sched::PlacementPolicy>(
          std::make_unique<sched::testing::FirstFitForTest>());
    });
    return reg;
  }();
  return *r;
}

}  // namespace gpupool::sim::testing
