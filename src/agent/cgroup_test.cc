#include "agent/cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>

namespace gpupool::agent {
namespace {

TEST(CgroupTest, DeviceRuleForCharacterDevice) {
  Result<std::string> rule = DeviceRuleFor("/dev/null");
  ASSERT_TRUE(rule.ok()) << rule.status().ToString();
  EXPECT_EQ(*rule, "c 1:3 rwm");
}

TEST(CgroupTest, DeviceRuleRejectsMissingAndPlainFiles) {
  EXPECT_EQ(DeviceRuleFor("/no/such/device").status().code(), StatusCode::kNotFound);
  Result<std::string> r = DeviceRuleFor("/etc/hostname");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a device node"), std::string::npos);
}

TEST(CgroupTest, CpuQuota) {
  EXPECT_EQ(CpuQuotaMicros(1000, 100000), 100000);
  EXPECT_EQ(CpuQuotaMicros(2500, 100000), 250000);
  EXPECT_EQ(CpuQuotaMicros(1, 100000), 1000);  // kernel minimum
}

TEST(CgroupTest, DisabledAndMissingRootsAreNotesNotErrors) {
  CgroupRequest req;
  req.id.job = 1;
  auto cg = JobCgroup::Create("", req);
  EXPECT_NE(cg->note().find("skipped"), std::string::npos);
  EXPECT_TRUE(cg->dirs().empty());
  EXPECT_TRUE(cg->JoinFromChild());  // nothing to join
  EXPECT_TRUE(cg->Destroy(100).ok());

  char tmpl[] = "/tmp/gpupool-nocg-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  cg = JobCgroup::Create(tmpl, req);
  EXPECT_NE(cg->note().find("skipped"), std::string::npos) << cg->note();
  EXPECT_FALSE(cg->devices_enforced());
  ::rmdir(tmpl);
}

// Real cgroup v1 hierarchies: only as root on a host that mounts them.
TEST(CgroupTest, V1CreatesConfiguresAndRemoves) {
  if (::geteuid() != 0 || ::access("/sys/fs/cgroup/devices/devices.deny", F_OK) != 0 ||
      ::access("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", F_OK) != 0) {
    GTEST_SKIP() << "needs root and cgroup v1 devices+cpu controllers at /sys/fs/cgroup";
  }
  CgroupRequest req;
  req.id = {900000 + ::getpid() % 1000, 0, 1, 0};
  req.deny_device_nodes = {"/dev/zero", "/no/such/node"};
  req.cpu_milli = 1500;
  req.memory_bytes = 256ull << 20;
  req.instance = "t" + std::to_string(::getpid());
  auto cg = JobCgroup::Create("/sys/fs/cgroup", req);
  EXPECT_NE(cg->note().find("cgroup v1"), std::string::npos) << cg->note();
  EXPECT_NE(cg->note().find("/no/such/node"), std::string::npos) << cg->note();
  EXPECT_FALSE(cg->devices_enforced());  // one node could not be denied
  ASSERT_FALSE(cg->dirs().empty());
  const std::string leaf = "job-" + std::to_string(req.id.job) + "-0.1-" + req.instance;
  // The kernel enforces the rule: a process in the cgroup cannot open /dev/zero.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!cg->JoinFromChild()) ::_exit(10);
    // The whole process is listed in every cgroup (v1 joins by thread through `tasks`).
    for (const std::string& dir : cg->dirs()) {
      std::ifstream procs(dir + "/cgroup.procs");
      bool listed = false;
      for (int p = 0; procs >> p;) listed = listed || p == ::getpid();
      if (!listed) ::_exit(14);
    }
    int zero = ::open("/dev/zero", O_RDONLY);
    if (zero >= 0) ::_exit(11);
    if (errno != EPERM) ::_exit(12);
    int null_fd = ::open("/dev/null", O_RDONLY);
    ::_exit(null_fd >= 0 ? 0 : 13);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: join failed, 11: /dev/zero opened, 12: wrong errno, "
                                       "13: /dev/null denied, 14: not in a cgroup's procs";
  std::ifstream quota("/sys/fs/cgroup/cpu/gpupool/" + leaf + "/cpu.cfs_quota_us");
  int64_t q = 0;
  quota >> q;
  EXPECT_EQ(q, 150000);
  EXPECT_TRUE(cg->Destroy(2000).ok());
  EXPECT_NE(::access(("/sys/fs/cgroup/cpu/gpupool/" + leaf).c_str(), F_OK), 0);
}

// gpupool exec: a second process joins a job's cgroups, is held by their rules, and
// leaves them (and the job) alone when it is done.
TEST(CgroupTest, JoinUsesTheTasksCgroupsAndLeavesThemToIt) {
  auto none = JobCgroup::Join({});
  EXPECT_FALSE(none->devices_enforced());  // nothing to join: nothing is enforced
  auto foreign = JobCgroup::Join({"/sys/fs/cgroup/cpu", "/tmp/gpupool/job-1/../../etc"});
  EXPECT_FALSE(foreign->devices_enforced());
  if (::geteuid() != 0 || ::access("/sys/fs/cgroup/devices/devices.deny", F_OK) != 0) {
    GTEST_SKIP() << "needs root and the cgroup v1 devices controller at /sys/fs/cgroup";
  }
  EXPECT_NE(foreign->note().find("cannot join"), std::string::npos) << foreign->note();
  CgroupRequest req;
  req.id = {910000 + ::getpid() % 1000, 0, 1, 0};
  req.deny_device_nodes = {"/dev/zero"};
  req.instance = "j" + std::to_string(::getpid());
  auto task = JobCgroup::Create("/sys/fs/cgroup", req);
  ASSERT_TRUE(task->devices_enforced()) << task->note();
  auto exec = JobCgroup::Join(task->dirs());
  EXPECT_TRUE(exec->devices_enforced()) << exec->note();
  EXPECT_TRUE(exec->dirs().empty());  // not its to remove
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!exec->JoinFromChild()) ::_exit(10);
    ::_exit(::open("/dev/zero", O_RDONLY) >= 0 ? 11 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "10: join failed, 11: opened";
  EXPECT_TRUE(exec->Destroy(2000).ok());
  for (const std::string& dir : task->dirs()) {
    EXPECT_EQ(::access(dir.c_str(), F_OK), 0) << dir << " went with the exec";
  }
  EXPECT_TRUE(task->Destroy(2000).ok());
}

// A cgroup v2 hierarchy: the hybrid host mounts one at /sys/fs/cgroup/unified, usually
// without controllers, which exercises creation, joining, notes and removal.
TEST(CgroupTest, V2DeniesDevicesThroughEbpf) {
  struct statfs fs;
  if (::geteuid() != 0 || ::statfs("/sys/fs/cgroup/unified", &fs) != 0 ||
      fs.f_type != CGROUP2_SUPER_MAGIC) {
    GTEST_SKIP() << "needs root and a cgroup v2 mount at /sys/fs/cgroup/unified";
  }
  CgroupRequest req;
  req.id = {910000 + ::getpid() % 1000, 0, 2, 0};
  req.deny_device_nodes = {"/dev/zero", "/no/such/node"};
  req.cpu_milli = 500;
  auto cg = JobCgroup::Create("/sys/fs/cgroup/unified", req);
  EXPECT_EQ(cg->note().rfind("cgroup v2", 0), 0u) << cg->note();
  ASSERT_NE(cg->note().find("devices denied 1 (eBPF)"), std::string::npos) << cg->note();
  EXPECT_NE(cg->note().find("/no/such/node"), std::string::npos) << cg->note();
  EXPECT_FALSE(cg->devices_enforced());  // one node could not be denied
  ASSERT_EQ(cg->dirs().size(), 1u);
  // The kernel runs the program: a process in the cgroup cannot open /dev/zero.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!cg->JoinFromChild()) ::_exit(10);
    int zero = ::open("/dev/zero", O_RDONLY);
    if (zero >= 0) ::_exit(11);
    if (errno != EPERM) ::_exit(12);
    int null_fd = ::open("/dev/null", O_RDONLY);
    ::_exit(null_fd >= 0 ? 0 : 13);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: join failed, 11: /dev/zero opened, 12: wrong errno, "
                                       "13: /dev/null denied";
  // Outside the cgroup nothing changed.
  int zero = ::open("/dev/zero", O_RDONLY);
  EXPECT_GE(zero, 0);
  if (zero >= 0) ::close(zero);
  const std::string dir = cg->dirs()[0];
  EXPECT_TRUE(cg->Destroy(2000).ok());
  EXPECT_NE(::access(dir.c_str(), F_OK), 0);
}

TEST(CgroupTest, RemoveCgroupDirsOfADeadShim) {
  if (::geteuid() != 0 || ::access("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", F_OK) != 0) {
    GTEST_SKIP() << "needs root and the cgroup v1 cpu controller at /sys/fs/cgroup";
  }
  CgroupRequest req;
  req.id = {920000 + ::getpid() % 1000, 0, 1, 0};
  req.cpu_milli = 100;
  auto cg = JobCgroup::Create("/sys/fs/cgroup", req);
  ASSERT_FALSE(cg->dirs().empty()) << cg->note();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char joined = cg->JoinFromChild() ? 'y' : 'n';
    (void)!::write(ready[1], &joined, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char joined = 0;
  ASSERT_EQ(::read(ready[0], &joined, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(joined, 'y');
  const std::vector<std::string> dirs = cg->dirs();
  cg.reset();  // like a shim that died: the cgroups stay, with the job in them
  ASSERT_EQ(::access(dirs[0].c_str(), F_OK), 0);
  EXPECT_TRUE(RemoveCgroupDirs({"/sys/fs/cgroup/cpu", "/etc"}, 100).ok());  // not ours: ignored
  ASSERT_EQ(::access("/sys/fs/cgroup/cpu", F_OK), 0);
  EXPECT_TRUE(RemoveCgroupDirs(dirs, 2000).ok());
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (const std::string& d : dirs) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d;
  EXPECT_TRUE(RemoveCgroupDirs(dirs, 100).ok());  // idempotent
}

// A container job's cgroup holds the cgroups podman made below it (the container's and
// its conmon's, shim.cc): removing the job's cgroup kills and removes them first, and a
// cgroup with children cannot be removed otherwise (EBUSY).
TEST(CgroupTest, RemovingAJobCgroupRemovesTheCgroupsBelowIt) {
  if (::geteuid() != 0 || ::access("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", F_OK) != 0) {
    GTEST_SKIP() << "needs root and the cgroup v1 cpu controller at /sys/fs/cgroup";
  }
  CgroupRequest req;
  req.id = {930000 + ::getpid() % 1000, 0, 1, 0};
  req.cpu_milli = 100;
  auto cg = JobCgroup::Create("/sys/fs/cgroup", req);
  ASSERT_FALSE(cg->dirs().empty()) << cg->note();
  std::vector<std::string> below;
  for (const std::string& d : cg->dirs()) {
    ASSERT_EQ(::mkdir((d + "/libpod-1").c_str(), 0755), 0) << d;
    ASSERT_EQ(::mkdir((d + "/libpod-1/inner").c_str(), 0755), 0) << d;
    ASSERT_EQ(::mkdir((d + "/conmon").c_str(), 0755), 0) << d;
    below.insert(below.end(), {d + "/libpod-1/inner", d + "/libpod-1", d + "/conmon"});
  }
  // A process in the deepest one, as a container's would be.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string procs = below[0] + "/cgroup.procs";
    const int fd = ::open(procs.c_str(), O_WRONLY);
    char joined = (fd >= 0 && ::write(fd, "0", 1) == 1) ? 'y' : 'n';
    (void)!::write(ready[1], &joined, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char joined = 0;
  ASSERT_EQ(::read(ready[0], &joined, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(joined, 'y');
  const std::vector<std::string> dirs = cg->dirs();
  const Status destroyed = cg->Destroy(2000);
  EXPECT_TRUE(destroyed.ok()) << destroyed.ToString();
  // Destroy waited for the cgroups to empty: the process is gone, or it never will be.
  int status = 0;
  pid_t reaped = ::waitpid(pid, &status, WNOHANG);
  if (reaped == 0) {
    ::kill(pid, SIGKILL);  // not killed by Destroy: end it so the test can fail, not hang
    ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
    for (const std::string& d : below) (void)::rmdir(d.c_str());
    for (const std::string& d : dirs) (void)::rmdir(d.c_str());
    FAIL() << "the process in a cgroup below the job's survived Destroy";
  }
  ASSERT_EQ(reaped, pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (const std::string& d : below) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d;
  for (const std::string& d : dirs) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d;
}

}  // namespace
}  // namespace gpupool::agent
