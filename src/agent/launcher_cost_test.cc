// What a run costs the node beyond the job itself (issue 31 item 4): the lookups its
// supervisor makes and the files it creates. Real launcher, real shims, real processes.
#include <elf.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
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

// The production shim starts once per job: linked static-pie where GCC and the C library
// allow it, it has no program interpreter, so no dynamic loader runs at each start
// (spawn_floor, start-and-exit: ~0.95 -> ~0.70 ms of CPU).
TEST(ShimBinaryTest, TheShimNeedsNoDynamicLoader) {
#if GPUPOOL_SHIM_CAN_BE_STATIC
  std::ifstream f(GPUPOOL_PRODUCTION_SHIM, std::ios::binary);
  ASSERT_TRUE(f.good()) << GPUPOOL_PRODUCTION_SHIM;
  Elf64_Ehdr eh{};
  ASSERT_TRUE(f.read(reinterpret_cast<char*>(&eh), sizeof eh).good());
  ASSERT_EQ(std::string(reinterpret_cast<const char*>(eh.e_ident), 4), std::string(ELFMAG, 4));
  ASSERT_EQ(eh.e_ident[EI_CLASS], ELFCLASS64);
  EXPECT_EQ(eh.e_type, ET_DYN);  // position independent: ASLR as before
  bool interp = false;
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    f.seekg(static_cast<std::streamoff>(eh.e_phoff + static_cast<uint64_t>(i) * eh.e_phentsize));
    ASSERT_TRUE(f.read(reinterpret_cast<char*>(&ph), sizeof ph).good());
    if (ph.p_type == PT_INTERP) interp = true;
  }
  EXPECT_FALSE(interp) << GPUPOOL_PRODUCTION_SHIM << " asks for a dynamic loader";
#else
  GTEST_SKIP() << "no static-pie link here (not GCC, sanitizers, or no static C library)";
#endif
}

}  // namespace
}  // namespace gpupool::agent
