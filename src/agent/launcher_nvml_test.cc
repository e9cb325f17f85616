// A GPU share capped through NVML's per-cgroup memory limits (nvml_memory.h), launched by
// the real launcher and shim with the fake libnvidia-ml (tests/fakelib/nvml) on a real
// cgroup v2 hierarchy: the limit is set on the job's own cgroup before the job runs in it,
// and a share whose limit cannot be set never starts. Skips without root or cgroup v2.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <string>

#include "agent/launcher_test_fixture.h"
#include "common/strings.h"

namespace gpupool::agent::testing {
namespace {

constexpr char kGpu0[] = "GPU-c2000000-0000-4000-8000-000000000000";
constexpr char kGpu1[] = "GPU-c2000000-0000-4000-8000-000000000001";  // refuses (4)

// The cgroup v2 hierarchy: /sys/fs/cgroup, or a hybrid host's /sys/fs/cgroup/unified.
std::string CgroupV2Root() {
  for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    struct statfs fs {};
    if (::statfs(root, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC) return root;
  }
  return "";
}

class NvmlShareTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    root_ = CgroupV2Root();
    if (::geteuid() != 0 || root_.empty()) GTEST_SKIP() << "needs root and cgroup v2";
    record_ = dir_.path() + "/limits";
    ::setenv("FAKE_NVML_SCENARIO", FAKE_NVML_SCENARIO_DIR "/memory_limits.json", 1);
    ::setenv("FAKE_NVML_MEMORY_LIMITS", record_.c_str(), 1);
    LauncherOptions o = TestOptions(dir_.path());
    o.cgroup_root = root_;
    // Only a shim that can load NVML runs these shares.
    o.shim_command = {"/no/such/slim-shim"};
    o.nvml_shim_command = {GPUPOOL_TEST_SHIM};
    launcher_ = NewProcessLauncher(o);
  }
  void TearDown() override {
    ::unsetenv("FAKE_NVML_SCENARIO");
    ::unsetenv("FAKE_NVML_MEMORY_LIMITS");
    LauncherTest::TearDown();
  }
  LaunchSpec Share(int64_t job, const char* gpu, const std::string& script) const {
    LaunchSpec spec = TestSpec(job, {"sh", "-c", script});
    spec.gpus = {{"nvidia", 0, gpu, {}, 500}};
    spec.share_enforcement = "dmem";
    spec.share_memory_bytes = uint64_t{2} << 30;
    spec.nvml_library = FAKE_NVML_LIBRARY;
    return spec;
  }
  std::string root_, record_;
};

TEST_F(NvmlShareTest, AShareRunsInItsOwnCgroupWithTheLimitSetOnIt) {
  const std::string cgroup = dir_.path() + "/cgroup";
  Start(Share(301, kGpu0, "grep '^0::' /proc/self/cgroup > " + cgroup));
  JobEvent e = Finish(301);
  ASSERT_EQ(e.kind, JobEvent::Kind::kExited) << e.reason;
  EXPECT_EQ(e.exit_code, 0);
  const std::string line = ReadWholeFile(cgroup);
  const std::string path = std::string(Trim(line)).substr(3);  // "0::/gpupool/job-..."
  ASSERT_NE(path.find("/gpupool/job-301-"), std::string::npos) << path;
  EXPECT_EQ(ReadWholeFile(record_),
            std::string(kGpu0) + " " + root_ + path + " 2147483648 2147483648\n");
}

TEST_F(NvmlShareTest, AShareWhoseLimitCannotBeSetNeverStarts) {
  const std::string ran = dir_.path() + "/ran";
  ASSERT_TRUE(launcher_->Launch(Share(302, kGpu1, "touch " + ran)).ok());
  JobEvent e = Finish(302);
  EXPECT_EQ(e.kind, JobEvent::Kind::kFailed);
  for (const std::string& part :
       {std::string("2147483648 B of GPU ") + kGpu1 +
            ", NVML's per-cgroup memory limits) could not be set",
        std::string("nvmlDeviceSetMemoryLimits_v1: Insufficient Permissions"),
        std::string("not started")}) {
    EXPECT_NE(e.reason.find(part), std::string::npos) << part << " in " << e.reason;
  }
  EXPECT_NE(::access(ran.c_str(), F_OK), 0) << "the job ran without its cap";
  EXPECT_EQ(ReadWholeFile(record_), "");
}

// A container share gets the cap on a cgroup of its job's own, which podman puts the
// container's cgroups below (--cgroup-parent), as a dmem share does.
TEST_F(NvmlShareTest, AContainerShareIsCappedOnItsJobsOwnCgroup) {
  const std::string podman = dir_.path() + "/podman";
  const std::string ran = dir_.path() + "/podman-ran";
  ASSERT_TRUE(WriteFileDurably(podman, "#!/bin/sh\necho \"$@\" >> " + ran + "\n", 0755,
                               /*sync=*/false)
                  .ok());
  LauncherOptions o = TestOptions(dir_.path());
  o.cgroup_root = root_;
  o.nvml_shim_command = o.shim_command;
  o.container.podman = podman;
  launcher_ = NewProcessLauncher(o);
  LaunchSpec spec = Share(303, kGpu0, "true");
  spec.image = "localhost/some:1";
  Start(spec);
  JobEvent e = Finish(303);
  ASSERT_EQ(e.kind, JobEvent::Kind::kExited) << e.reason;
  const std::string args = ReadWholeFile(ran);
  const size_t at = args.find(" --cgroup-parent /gpupool/job-303-");
  ASSERT_NE(at, std::string::npos) << args;
  const std::string parent = args.substr(at + 17, args.find(' ', at + 17) - at - 17);
  EXPECT_EQ(ReadWholeFile(record_),
            std::string(kGpu0) + " " + root_ + parent + " 2147483648 2147483648\n");
}

}  // namespace
}  // namespace gpupool::agent::testing
