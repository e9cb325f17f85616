// What a run costs the node beyond the job itself (issue 31 item 4): the lookups its
// supervisor makes and the files it creates. Real launcher, real shims, real processes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "agent/job_env.h"
#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_util.h"
#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace {

using testing::ReadWholeFile;
using testing::ScratchDir;
using testing::TaskRun;
using testing::TestOptions;
using testing::TestSpec;
using testing::WaitForEvent;
using Kind = JobEvent::Kind;

class LauncherCostTest : public ::testing::Test {
 protected:
  void SetUp() override { launcher_ = NewProcessLauncher(TestOptions(dir_.path())); }
  void TearDown() override {
    launcher_.reset();
    testing::KillLeftoverJobs(dir_.path());
  }
  JobEvent Run(const LaunchSpec& spec) {
    Status st = launcher_->Launch(spec);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::optional<JobEvent> started = WaitForEvent(*launcher_, spec.id, 5000);
    EXPECT_TRUE(started.has_value());
    if (started && started->kind != Kind::kStarted) return *started;
    std::optional<JobEvent> ended = WaitForEvent(*launcher_, spec.id, 10'000);
    EXPECT_TRUE(ended.has_value());
    return ended.value_or(JobEvent{});
  }

  ScratchDir dir_;
  std::unique_ptr<Launcher> launcher_;
};

// The launcher looks the job's user up once, in the agent, and hands the result to the
// shim in the spec: no shim loads the NSS modules (with `passwd: files systemd` that was
// libnss_systemd and libcap, about 0.4 ms of CPU per job).
TEST_F(LauncherCostTest, TheLauncherPassesTheUsersLookupToTheShim) {
  const LaunchSpec spec = TestSpec(501, {"sh", "-c", "echo \"$HOME $SHELL\""});
  JobEvent e = Run(spec);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  const std::string dir = JobDir(dir_.path(), TaskRun(501));
  Result<ShimConfig> config = ReadShimConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const JobUser expected = LookUpJobUser(spec.uid, spec.gid);
  ASSERT_TRUE(config->user.has_value());
  EXPECT_EQ(*config->user, expected);
  ASSERT_TRUE(expected.known);  // the test's own user has a passwd entry
  // The job's login variables are those of the lookup, as before.
  EXPECT_EQ(ReadWholeFile(dir + "/" + kStdoutFile), expected.home + " " + expected.shell + "\n");
}

// The shim takes what the spec says about the user and looks nothing up itself: a home
// only the spec names becomes the job's HOME (and working directory).
TEST_F(LauncherCostTest, TheShimUsesTheUserItWasGiven) {
  const std::string home = dir_.path() + "/home-from-spec";
  std::filesystem::create_directories(home);
  const RunId id = TaskRun(502);
  const std::string dir = JobDir(dir_.path(), id);
  std::filesystem::create_directories(dir);
  ShimConfig config;
  config.spec = TestSpec(502, {"sh", "-c", "echo \"$HOME $SHELL $(pwd)\""});
  config.spec.workdir = "";  // the user's home
  JobUser user;
  user.known = true;
  user.home = home;
  user.shell = "/bin/spec-shell";
  user.groups = {config.spec.gid};
  config.user = user;
  ASSERT_TRUE(WriteFileDurably(dir + "/" + kSpecFile, ShimConfigToJson(config), 0600).ok());
  Result<int> shim = testing::StartShimIn(dir);
  ASSERT_TRUE(shim.ok()) << shim.status().ToString();
  ASSERT_TRUE(testing::WaitForExit(*shim, 10'000));
  ::waitpid(*shim, nullptr, 0);
  Result<FinalStatus> final_status = ReadFinalStatus(dir);
  ASSERT_TRUE(final_status.ok()) << final_status.status().ToString();
  EXPECT_EQ(final_status->exit_code, 0) << final_status->reason;
  EXPECT_EQ(ReadWholeFile(dir + "/" + kStdoutFile), home + " /bin/spec-shell " + home + "\n");
}

}  // namespace
}  // namespace gpupool::agent
