// Many short jobs through the real launcher: every one starts, sees its own id and ends
// with its own exit code. Labelled slow (skipped under sanitizers).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_util.h"

namespace gpupool::agent {
namespace {

using testing::ReadWholeFile;
using testing::ScratchDir;
using testing::TaskRun;
using testing::TestOptions;
using testing::TestSpec;

TEST(LauncherSlowTest, HundredsOfShortJobsAllAccountedFor) {
  ScratchDir dir;
  auto launcher = NewProcessLauncher(TestOptions(dir.path()));
  constexpr int kJobs = 200;
  std::vector<double> launch_ms;
  for (int i = 1; i <= kJobs; ++i) {
    LaunchSpec spec = TestSpec(
        1000 + i, {"sh", "-c", "echo $GPUPOOL_JOB_ID; exit $((" + std::to_string(i) + " % 7))"});
    spec.gpus = {{"nvidia", i % 8, "GPU-" + std::to_string(i % 8), {}, 1000}};
    const auto t0 = std::chrono::steady_clock::now();
    Status st = launcher->Launch(spec);
    launch_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::set<int64_t> started;
  std::set<int64_t> ended;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (static_cast<int>(ended.size()) < kJobs && std::chrono::steady_clock::now() < deadline) {
    for (const JobEvent& e : launcher->Wait(1000)) {
      if (e.kind == JobEvent::Kind::kStarted) {
        EXPECT_TRUE(started.insert(e.id.job).second) << "started twice: " << e.id.job;
        continue;
      }
      ASSERT_EQ(e.kind, JobEvent::Kind::kExited) << e.id.job << ": " << e.reason;
      EXPECT_EQ(e.exit_code, (e.id.job - 1000) % 7) << e.id.job;
      EXPECT_TRUE(ended.insert(e.id.job).second) << "ended twice: " << e.id.job;
    }
  }
  EXPECT_EQ(static_cast<int>(started.size()), kJobs);
  EXPECT_EQ(static_cast<int>(ended.size()), kJobs);
  for (int i = 1; i <= kJobs; i += 37) {
    EXPECT_EQ(ReadWholeFile(JobDir(dir.path(), TaskRun(1000 + i)) + "/" + kStdoutFile),
              std::to_string(1000 + i) + "\n");
  }
  launcher.reset();
  testing::KillLeftoverJobs(dir.path());
  std::sort(launch_ms.begin(), launch_ms.end());
  std::printf("Launch latency over %d jobs: p50 %.2f ms, p99 %.2f ms\n", kJobs,
              launch_ms[launch_ms.size() / 2], launch_ms[launch_ms.size() * 99 / 100]);
}

}  // namespace
}  // namespace gpupool::agent
