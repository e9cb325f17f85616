// The agent's side of GPU telemetry that needs no controller: mapping a process to the
// job whose cgroup it runs in.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "agent/launcher.h"
#include "daemon/agent_loop.h"

namespace gpupool::daemon {
namespace {

namespace fs = std::filesystem;

class JobOfProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "job_of_process.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void Cgroup(int pid, const std::string& text) {
    fs::create_directories(root_ / std::to_string(pid));
    std::ofstream(root_ / std::to_string(pid) / "cgroup") << text;
  }
  fs::path root_;
};

TEST_F(JobOfProcessTest, FindsTheJobOfV1AndV2CgroupsAndNothingElse) {
  Cgroup(10, "0::/gpupool/job-42-1-777\n");
  Cgroup(11,
         "12:memory:/gpupool/job-43-2-5\n11:devices:/gpupool/job-43-2-5\n"
         "1:name=systemd:/system.slice/gpupool-agent.service\n");
  Cgroup(12, "0::/user.slice/user-1000.slice/session-3.scope\n");
  Cgroup(13, "0::/gpupool/job-x-1-2\n");
  Cgroup(14, "0::/gpupool/job-\n");
  // A task of a gang: the cgroup is named by the task's launcher key.
  const int64_t key = agent::TaskKey(44, 3, 4);
  Cgroup(15, "0::/gpupool/job-" + std::to_string(key) + "-1-9\n");
  EXPECT_EQ(JobOfProcess(root_.string(), 10), 42);
  EXPECT_EQ(JobOfProcess(root_.string(), 11), 43);
  EXPECT_EQ(JobOfProcess(root_.string(), 12), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 13), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 14), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 15), 44);
  EXPECT_EQ(JobOfProcess(root_.string(), 99), 0);  // gone
}

}  // namespace
}  // namespace gpupool::daemon
