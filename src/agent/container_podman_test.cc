// Container jobs through the real Launcher, real shims and real rootful podman.
//
// Needs root, podman, runc and a static busybox; skips with the reason otherwise. All
// podman state is private: a busybox image imported into --root/--runroot under a
// temporary directory with the vfs driver (plain directories, no overlay mounts left
// behind). GPUs are stand-in device nodes (mknod with /dev/null's numbers) described by
// a CDI spec that gpu::ExportCdi writes under a kind unique to this run; podman 4.3 reads
// specs only from /var/run/cdi and /etc/cdi, so it goes to /var/run/cdi and is removed at
// the end.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/container.h"
#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_util.h"
#include "common/strings.h"
#include "gpu/export/exporters.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using testing::ReadWholeFile;
using testing::TaskRun;
using testing::WaitForEvent;
using Kind = JobEvent::Kind;

constexpr uint32_t kNobody = 65534;
const char kUuid0[] = "GPU-0a0a0a0a-1111-2222-3333-444444444444";
const char kUuid1[] = "GPU-1b1b1b1b-5555-6666-7777-888888888888";

// Shared by every test of the suite: building the image takes a few seconds.
struct World {
  std::string skip;  // non-empty: why the suite is skipped
  std::string dir;   // the temporary directory holding everything
  std::string image;
  std::string kind;
  std::string cdi_spec;
  std::string lib;  // the stand-in driver library
  ContainerOptions container;
};
World* g_world = nullptr;

bool Run(const std::vector<std::string>& argv, std::string* out = nullptr,
         int timeout_ms = 120'000) {
  Result<std::string> r = RunCommand(argv, timeout_ms);
  if (out != nullptr) *out = r.ok() ? *r : r.status().message();
  return r.ok();
}

std::string BuildWorld(World& w) {
  if (::geteuid() != 0) return "needs root (rootful podman, mknod, jobs as another user)";
  const std::string busybox = fs::exists("/bin/busybox") ? "/bin/busybox" : "/usr/bin/busybox";
  if (!fs::exists(busybox)) return "busybox is not installed (apt-get install busybox-static)";
  if (Run({"ldd", busybox})) return "busybox is dynamically linked; install busybox-static";
  if (!Run({"sh", "-c", "command -v podman"})) return "podman is not installed";
  if (!Run({"sh", "-c", "command -v runc"})) return "runc is not installed";

  char tmpl[] = "/tmp/gpupool-podman-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return "cannot create a temporary directory";
  w.dir = tmpl;
  ::chmod(w.dir.c_str(), 0755);  // the job's user (nobody) traverses it

  // A minimal image: busybox and its applets, imported into private storage.
  const std::string rootfs = w.dir + "/rootfs";
  for (const char* d : {"/bin", "/proc", "/sys", "/dev", "/etc", "/tmp"}) {
    fs::create_directories(rootfs + d);
  }
  fs::copy_file(busybox, rootfs + "/bin/busybox");
  for (const char* tool :
       {"sh", "ls", "env", "cat", "id", "sleep", "pwd", "touch", "echo", "stat", "readlink"}) {
    fs::create_symlink("busybox", rootfs + "/bin/" + tool);
  }
  std::string out;
  if (!Run({"tar", "-C", rootfs, "-cf", w.dir + "/rootfs.tar", "."}, &out)) return "tar: " + out;
  w.container.global_args = {"--root",       w.dir + "/storage", "--runroot",
                             w.dir + "/run", "--storage-driver", "vfs"};
  w.container.pull = "never";  // a missing image fails at once instead of asking registries
  w.container = DetectContainerOptions(w.container);
  if (!w.container.unavailable.empty()) return "podman is unusable: " + w.container.unavailable;
  w.image = "localhost/gpupool-test-" + std::to_string(::getpid()) + ":1";
  if (!Run(PodmanArgv(w.container, {"import", "--quiet", w.dir + "/rootfs.tar", w.image}), &out)) {
    return "podman import failed: " + out;
  }

  // Stand-in device nodes and driver library.
  struct stat null_st;
  if (::stat("/dev/null", &null_st) != 0) return "no /dev/null";
  fs::create_directories(w.dir + "/dev");
  for (const char* n : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"}) {
    const std::string path = w.dir + "/dev/" + n;
    if (::mknod(path.c_str(), S_IFCHR | 0666, null_st.st_rdev) != 0) return "mknod " + path;
    ::chmod(path.c_str(), 0666);
  }
  fs::create_directories(w.dir + "/lib");
  w.lib = w.dir + "/lib/libnvidia-ml.so.999.99";
  std::ofstream(w.lib) << "stand-in driver library\n";
  ::chmod(w.lib.c_str(), 0644);

  // The CDI spec the agent would write, under this run's own kind.
  gpu::NodeInfo node;
  node.hostname = "podman-test";
  node.nvidia = gpu::DriverInfo{"999.99", "12.4", {w.lib}, {"/dev/nvidiactl", "/dev/nvidia-uvm"}};
  for (int i = 0; i < 2; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.uuid = i == 0 ? kUuid0 : kUuid1;
    g.pci_bus_id = i == 0 ? "0000:18:00.0" : "0000:2a:00.0";
    g.minor_number = i;
    g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
    node.gpus.push_back(g);
  }
  w.kind = "gpupool-test-" + std::to_string(::getpid()) + ".example/gpu";
  gpu::CdiOptions cdi;
  cdi.kind = w.kind;
  cdi.host_dev_root = w.dir + "/dev";
  Result<std::string> spec = gpu::ExportCdi(node, cdi);
  if (!spec.ok()) return "ExportCdi: " + spec.status().message();
  // Left in place afterwards (tmpfs, harmless): a parallel run may be using it.
  fs::create_directories("/var/run/cdi");
  w.cdi_spec = "/var/run/cdi/gpupool-test-" + std::to_string(::getpid()) + ".json";
  std::ofstream(w.cdi_spec) << *spec;
  return "";
}

void DestroyWorld(World& w) {
  if (!w.dir.empty()) {
    (void)RunCommand(PodmanArgv(w.container, {"rm", "--all", "--force", "--time", "0"}), 60'000);
    (void)RunCommand(PodmanArgv(w.container, {"rmi", "--all", "--force"}), 60'000);
    std::error_code ec;
    fs::remove_all(w.dir, ec);
  }
  if (!w.cdi_spec.empty()) ::unlink(w.cdi_spec.c_str());
}

std::vector<std::string> Containers() {
  std::string out;
  EXPECT_TRUE(Run(PodmanArgv(g_world->container, {"ps", "--all", "--format", "{{.Names}}"}), &out))
      << out;
  std::vector<std::string> names;
  for (const std::string& line : Split(std::string(Trim(out)), '\n')) {
    if (!line.empty()) names.push_back(line);
  }
  return names;
}

// The job's podman client has started by its kStarted event, but the container it makes
// may not exist yet (`podman wait` would refuse an unknown name): polled.
bool WaitForRunningContainer(const std::string& name, int timeout_ms) {
  return testing::PollUntil(
      [&] {
        std::string out;
        return Run(PodmanArgv(g_world->container, {"ps", "--filter", "name=" + name, "--filter",
                                                   "status=running", "--format", "{{.Names}}"}),
                   &out) &&
               Trim(out) == name;
      },
      timeout_ms, 100);
}

bool HasLine(const std::string& text, const std::string& line) {
  for (const std::string& l : Split(text, '\n')) {
    if (l == line) return true;
  }
  return false;
}

class ContainerPodmanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_world = new World;
    g_world->skip = BuildWorld(*g_world);
  }
  static void TearDownTestSuite() {
    DestroyWorld(*g_world);
    delete g_world;
    g_world = nullptr;
  }
  void SetUp() override {
    if (!g_world->skip.empty()) GTEST_SKIP() << g_world->skip;
    state_ = g_world->dir + "/state-" + std::to_string(++counter_);
    LauncherOptions o = testing::TestOptions(state_);
    o.container = g_world->container;
    o.start_timeout_ms = 60'000;
    launcher_ = NewProcessLauncher(o);
  }
  void TearDown() override {
    if (launcher_ == nullptr) return;
    launcher_.reset();
    testing::KillLeftoverJobs(state_);
  }

  LaunchSpec Spec(int64_t id, std::vector<std::string> argv) {
    LaunchSpec s = testing::TestSpec(id, std::move(argv));
    s.user = "nobody";
    s.uid = kNobody;
    s.gid = kNobody;
    s.workdir = "";
    s.image = g_world->image;
    s.grace_s = 2;
    return s;
  }
  // Launches, expects kStarted, returns the final event.
  JobEvent RunToEnd(const LaunchSpec& spec, int timeout_ms = 60'000) {
    Status st = launcher_->Launch(spec);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::optional<JobEvent> e = WaitForEvent(*launcher_, spec.id, timeout_ms);
    EXPECT_TRUE(e.has_value());
    if (!e || e->kind != Kind::kStarted) return e.value_or(JobEvent{});
    std::optional<JobEvent> end = WaitForEvent(*launcher_, spec.id, timeout_ms);
    EXPECT_TRUE(end.has_value()) << "no final event for " << ToString(spec.id);
    return end.value_or(JobEvent{});
  }
  std::string Log(int64_t id, const char* name) {
    return ReadWholeFile(JobDir(state_, TaskRun(id)) + "/" + name);
  }

  static inline int counter_ = 0;
  std::string state_;
  std::unique_ptr<Launcher> launcher_;
};

TEST_F(ContainerPodmanTest, SeesOnlyItsGpuAndItsVariablesAsItsUser) {
  LaunchSpec s =
      Spec(201, {"sh", "-c",
                 "ls /dev; echo ENV; env; echo ID; id -u; id -g; echo LIB; cat " + g_world->lib +
                     "; touch " + g_world->lib + " 2>/dev/null && echo LIB-WRITABLE; true"});
  s.env = {{"FOO", "bar baz"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  s.gpus = {{"nvidia", 1, kUuid1, {"/dev/nvidia1"}, 1000}};
  s.cdi_devices = {g_world->kind + "=" + kUuid1};
  JobEvent e = RunToEnd(s);
  ASSERT_EQ(e.kind, Kind::kExited) << e.reason << "\n" << Log(201, kStderrFile);
  EXPECT_EQ(e.exit_code, 0) << e.reason << "\n" << Log(201, kStderrFile);
  const std::string out = Log(201, kStdoutFile);
  EXPECT_TRUE(HasLine(out, "nvidia1")) << out;
  EXPECT_FALSE(HasLine(out, "nvidia0")) << out;
  EXPECT_TRUE(HasLine(out, "nvidiactl")) << out;
  EXPECT_TRUE(HasLine(out, "nvidia-uvm")) << out;
  EXPECT_TRUE(HasLine(out, std::string("GPUPOOL_GPU_1=") + kUuid1)) << out;
  EXPECT_FALSE(HasLine(out, std::string("GPUPOOL_GPU_0=") + kUuid0)) << out;
  EXPECT_TRUE(HasLine(out, std::string("CUDA_VISIBLE_DEVICES=") + kUuid1)) << out;
  EXPECT_TRUE(HasLine(out, "FOO=bar baz")) << out;
  EXPECT_TRUE(HasLine(out, "GPUPOOL_JOB_ID=201")) << out;
  EXPECT_TRUE(HasLine(out, "GPUPOOL_CDI_KIND=" + g_world->kind)) << out;
  EXPECT_FALSE(HasLine(out, "HOME=/root")) << out;  // not the host's (the shim's) HOME
  EXPECT_TRUE(HasLine(out, "stand-in driver library")) << out;
  EXPECT_FALSE(HasLine(out, "LIB-WRITABLE")) << out;
  const size_t id = out.find("ID\n");
  ASSERT_NE(id, std::string::npos) << out;
  EXPECT_EQ(out.substr(id, 15), "ID\n65534\n65534\n") << out;
  EXPECT_NE(e.isolation.find("podman:"), std::string::npos) << e.isolation;
  EXPECT_TRUE(Containers().empty());
}

TEST_F(ContainerPodmanTest, WorkdirAndReadOnlyMount) {
  const std::string work = g_world->dir + "/work-202";
  const std::string data = g_world->dir + "/data-202";
  fs::create_directories(work);
  fs::create_directories(data);
  ASSERT_EQ(::chown(work.c_str(), kNobody, kNobody), 0);
  std::ofstream(data + "/input.txt") << "input data\n";
  LaunchSpec s = Spec(202, {"sh", "-c",
                            "pwd; cat /data/input.txt; touch /data/new 2>/dev/null && echo "
                            "DATA-WRITABLE; touch out.txt && echo WORKDIR-WRITABLE"});
  s.workdir = work;
  s.mounts = {{data, "/data", true}};
  JobEvent e = RunToEnd(s);
  ASSERT_EQ(e.kind, Kind::kExited) << e.reason;
  EXPECT_EQ(e.exit_code, 0) << e.reason << "\n" << Log(202, kStderrFile);
  const std::string out = Log(202, kStdoutFile);
  EXPECT_TRUE(HasLine(out, work)) << out;
  EXPECT_TRUE(HasLine(out, "input data")) << out;
  EXPECT_FALSE(HasLine(out, "DATA-WRITABLE")) << out;
  EXPECT_TRUE(HasLine(out, "WORKDIR-WRITABLE")) << out;
  struct stat st;
  ASSERT_EQ(::stat((work + "/out.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);  // written as the job's user
}

// A preemptible container job (docs/preemption.md) finds its deadline file mounted at its
// node path, empty at the start, and the deadline in it when its SIGTERM comes: the pool
// writes it in place, so the container's mount of the file sees it.
TEST_F(ContainerPodmanTest, APreemptibleContainerReadsItsDeadlineOnSigterm) {
  LaunchSpec s = Spec(
      211, {"sh", "-c",
            "echo \"file=$GPUPOOL_PREEMPT_DEADLINE_FILE [$(cat $GPUPOOL_PREEMPT_DEADLINE_FILE)]\"; "
            "trap 'echo term:$(cat $GPUPOOL_PREEMPT_DEADLINE_FILE); exit 0' TERM; echo ready; "
            "while :; do sleep 0.05; done"});
  s.preemptible = true;
  s.grace_s = 30;
  s.env["GPUPOOL_PREEMPT_DEADLINE_FILE"] = "/etc/passwd";  // only the pool sets it
  ASSERT_TRUE(launcher_->Launch(s).ok());
  std::optional<JobEvent> started = WaitForEvent(*launcher_, s.id, 60'000);
  ASSERT_TRUE(started.has_value());
  ASSERT_EQ(started->kind, Kind::kStarted) << started->reason;
  const std::string out = JobDir(state_, TaskRun(211)) + "/" + kStdoutFile;
  ASSERT_TRUE(testing::WaitForFileContaining(out, "ready", 60'000)) << ReadWholeFile(out);
  const std::string path = JobDir(state_, TaskRun(211)) + "/" + kPreemptDeadlineFile;
  EXPECT_TRUE(HasLine(ReadWholeFile(out), "file=" + path + " []")) << ReadWholeFile(out);
  ASSERT_TRUE(launcher_->Stop(TaskRun(211), StopRequest{20, 1'700'000'211}).ok());
  std::optional<JobEvent> end = WaitForEvent(*launcher_, s.id, 60'000);
  ASSERT_TRUE(end.has_value());
  EXPECT_TRUE(HasLine(ReadWholeFile(out), "term:1700000211")) << ReadWholeFile(out);
  EXPECT_TRUE(end->cancelled);
}

// A share on a GPU in MPS mode (docs/sharing.md) is a client of its GPU's daemon inside
// its container too: the daemon's pipe folder at the same path, writable by the job's
// user, the MPS variables of its share, and the host's IPC namespace, where MPS clients
// and server share memory. A --shm-size cannot apply there and is left out (podman
// refuses the two together).
TEST_F(ContainerPodmanTest, AnMpsShareIsAClientOnTheHostsIpcNamespace) {
  const std::string pipe = g_world->dir + "/mps-212/pipe";
  fs::create_directories(pipe);
  ::chmod((g_world->dir + "/mps-212").c_str(), 0755);
  ASSERT_EQ(::chown(pipe.c_str(), kNobody, kNobody), 0);
  ::chmod(pipe.c_str(), 0700);
  LaunchSpec s = Spec(212, {"sh", "-c",
                            "env | grep -E '^(CUDA_MPS|GPUPOOL_GPU)'; echo ipc=$(readlink "
                            "/proc/self/ns/ipc); touch $CUDA_MPS_PIPE_DIRECTORY/client && echo "
                            "PIPE-WRITABLE"});
  s.gpus = {{"nvidia", 1, kUuid1, {"/dev/nvidia1"}, 250}};
  s.cdi_devices = {g_world->kind + "=" + kUuid1};
  s.share_enforcement = "mps";
  s.share_memory_bytes = uint64_t{20} << 30;
  s.mps_pipe_dir = pipe;
  s.shm_bytes = 64 << 20;
  JobEvent e = RunToEnd(s);
  ASSERT_EQ(e.kind, Kind::kExited) << e.reason << "\n" << Log(212, kStderrFile);
  EXPECT_EQ(e.exit_code, 0) << Log(212, kStderrFile);
  const std::string out = Log(212, kStdoutFile);
  EXPECT_TRUE(HasLine(out, "CUDA_MPS_PIPE_DIRECTORY=" + pipe)) << out;
  EXPECT_TRUE(HasLine(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25")) << out;
  EXPECT_TRUE(HasLine(out, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M")) << out;
  EXPECT_TRUE(HasLine(out, "GPUPOOL_GPU_ENFORCEMENT=mps")) << out;
  char host_ipc[64] = {};
  ASSERT_GT(::readlink("/proc/self/ns/ipc", host_ipc, sizeof host_ipc - 1), 0);
  EXPECT_TRUE(HasLine(out, std::string("ipc=") + host_ipc)) << out;
  EXPECT_TRUE(HasLine(out, "PIPE-WRITABLE")) << out;
  struct stat st;
  ASSERT_EQ(::stat((pipe + "/client").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
}

// A container share on a GPU of mode none runs below a gpupool job cgroup of its own
// (podman's --cgroup-parent), so /proc/PID/cgroup of the container's processes names the
// job, and the agent's GPU memory watch attributes them (docs/sharing.md): in podman's own
// cgroup it would see no job. The parent goes with the job.
TEST_F(ContainerPodmanTest, AShareOfModeNoneRunsBelowItsJobCgroup) {
  LaunchSpec s = Spec(213, {"sleep", "600"});
  s.gpus = {{"nvidia", 1, kUuid1, {"/dev/nvidia1"}, 250}};
  s.cdi_devices = {g_world->kind + "=" + kUuid1};
  s.share_enforcement = "none";
  s.share_memory_bytes = uint64_t{20} << 30;
  ASSERT_TRUE(launcher_->Launch(s).ok());
  std::optional<JobEvent> started = WaitForEvent(*launcher_, s.id, 60'000);
  ASSERT_TRUE(started && started->kind == Kind::kStarted);
  ASSERT_TRUE(WaitForRunningContainer("gpupool-job-213-1", 30'000)) << Log(213, kStderrFile);
  std::string pid;
  ASSERT_TRUE(agent::Run(PodmanArgv(g_world->container,
                                    {"inspect", "--format", "{{.State.Pid}}", "gpupool-job-213-1"}),
                         &pid))
      << pid;
  const std::string cgroups = ReadWholeFile("/proc/" + std::string(Trim(pid)) + "/cgroup");
  EXPECT_NE(cgroups.find("/gpupool/job-213-"), std::string::npos) << cgroups;
  ASSERT_TRUE(launcher_->Cancel(TaskRun(213)).ok());
  std::optional<JobEvent> end = WaitForEvent(*launcher_, s.id, 60'000);
  ASSERT_TRUE(end.has_value());
  EXPECT_NE(end->isolation.find(", under /gpupool/job-213-"), std::string::npos) << end->isolation;
  EXPECT_TRUE(Containers().empty());
  // The parent goes with the job, in every hierarchy.
  std::error_code ec;
  std::vector<fs::path> mids = {"/sys/fs/cgroup/gpupool"};
  for (const fs::directory_entry& h : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    mids.push_back(h.path() / "gpupool");
  }
  for (const fs::path& mid : mids) {
    for (const fs::directory_entry& e : fs::directory_iterator(mid, ec)) {
      EXPECT_FALSE(e.path().filename().string().starts_with("job-213-")) << e.path();
    }
  }
}

// Where no job cgroup can be made (here: cgroups off), a share of mode none still starts,
// in podman's own cgroup, and its isolation note says the GPU memory watch cannot see it.
TEST_F(ContainerPodmanTest, AShareWithoutAJobCgroupStartsAndSaysTheWatchCannotSeeIt) {
  LauncherOptions o = testing::TestOptions(state_);
  o.container = g_world->container;
  o.start_timeout_ms = 60'000;
  o.cgroup_root = "";
  launcher_ = NewProcessLauncher(o);
  LaunchSpec s = Spec(214, {"sh", "-c", "exit 0"});
  s.gpus = {{"nvidia", 1, kUuid1, {"/dev/nvidia1"}, 250}};
  s.cdi_devices = {g_world->kind + "=" + kUuid1};
  s.share_enforcement = "none";
  s.share_memory_bytes = uint64_t{20} << 30;
  JobEvent e = RunToEnd(s);
  ASSERT_EQ(e.kind, Kind::kExited) << e.reason << "\n" << Log(214, kStderrFile);
  EXPECT_EQ(e.exit_code, 0) << Log(214, kStderrFile);
  EXPECT_NE(e.isolation.find("; no job cgroup (isolation skipped: disabled by configuration): the "
                             "GPU memory watch and telemetry cannot attribute its processes"),
            std::string::npos)
      << e.isolation;
}

// A container past its --mem is said to have been killed by the OOM killer, not only by
// SIGKILL: it runs below a job cgroup of its own, as every container does (not only
// shares), which holds its memory limit too and tells its OOM kill.
TEST_F(ContainerPodmanTest, AContainerPastItsMemoryIsSaidToBeKilledByTheOomKiller) {
  LaunchSpec s =
      Spec(215, {"sh", "-c", "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo kept"});
  s.memory_bytes = 64ull << 20;
  JobEvent e = RunToEnd(s);
  ASSERT_NE(e.kind, Kind::kStarted);
  EXPECT_FALSE(e.exit_code == 0) << Log(215, kStdoutFile);
  EXPECT_TRUE(
      e.reason.starts_with("killed by the kernel's OOM killer: the memory limit of "
                           "67108864 bytes was reached"))
      << e.reason << "\n"
      << Log(215, kStderrFile);
  EXPECT_NE(e.isolation.find(", under /gpupool/job-215-"), std::string::npos) << e.isolation;
  EXPECT_TRUE(Containers().empty());
}

TEST_F(ContainerPodmanTest, ExitCodePropagates) {
  JobEvent e = RunToEnd(Spec(203, {"sh", "-c", "echo to-stderr >&2; exit 3"}));
  ASSERT_EQ(e.kind, Kind::kExited) << e.reason;
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_FALSE(e.signal);
  EXPECT_NE(Log(203, kStderrFile).find("to-stderr"), std::string::npos);
}

TEST_F(ContainerPodmanTest, CancelStopsTheContainerWithinTheGrace) {
  LaunchSpec s = Spec(204, {"sleep", "600"});
  s.init = false;  // the command itself is PID 1 (--no-init)
  ASSERT_TRUE(launcher_->Launch(s).ok());
  std::optional<JobEvent> started = WaitForEvent(*launcher_, 204, 60'000);
  ASSERT_TRUE(started && started->kind == Kind::kStarted);
  ASSERT_TRUE(WaitForRunningContainer("gpupool-job-204-1", 30'000));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher_->Cancel(TaskRun(204)).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher_, 204, 60'000);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kExited);
  EXPECT_TRUE(e->cancelled);
  // busybox sleep as PID 1 ignores SIGTERM: podman stop kills it after the grace.
  EXPECT_TRUE(e->signal.has_value()) << e->reason;
  EXPECT_NE(e->reason.find("cancelled"), std::string::npos) << e->reason;
  EXPECT_LT(took, s.grace_s + 4.0) << e->reason;
  EXPECT_TRUE(Containers().empty());
}

// Issue 15 B.8: with an init as PID 1 (the default), a cancel's SIGTERM reaches the
// command, which ends at once instead of being killed after the grace period.
TEST_F(ContainerPodmanTest, WithInitCancelEndsTheCommandBySigtermAtOnce) {
  LaunchSpec s = Spec(210, {"sleep", "600"});
  s.grace_s = 8;
  ASSERT_TRUE(s.init);
  ASSERT_TRUE(launcher_->Launch(s).ok());
  std::optional<JobEvent> started = WaitForEvent(*launcher_, 210, 60'000);
  ASSERT_TRUE(started && started->kind == Kind::kStarted);
  ASSERT_TRUE(WaitForRunningContainer("gpupool-job-210-1", 30'000));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher_->Cancel(TaskRun(210)).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher_, 210, 60'000);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->cancelled);
  EXPECT_LT(took, 6.0) << "SIGKILL after the 8 s grace? " << e->reason;
  EXPECT_TRUE(Containers().empty());
}

TEST_F(ContainerPodmanTest, ShmSizeSizesDevShm) {
  LaunchSpec s = Spec(211, {"sh", "-c", "df -k /dev/shm | tail -1"});
  s.shm_bytes = 256ull << 20;
  JobEvent e = RunToEnd(s);
  ASSERT_EQ(e.kind, Kind::kExited) << e.reason << Log(211, kStderrFile);
  EXPECT_EQ(e.exit_code, 0) << Log(211, kStderrFile);
  EXPECT_NE(Log(211, kStdoutFile).find(" 262144 "), std::string::npos) << Log(211, kStdoutFile);
}

TEST_F(ContainerPodmanTest, TimeLimitStopsTheContainer) {
  LaunchSpec s = Spec(205, {"sleep", "600"});
  s.time_limit_s = 2;
  s.grace_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  JobEvent e = RunToEnd(s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_TRUE(e.timed_out) << e.reason;
  EXPECT_NE(e.reason.find("time limit of 2 s reached"), std::string::npos) << e.reason;
  EXPECT_LT(took, 2 + 1 + 6.0);
  EXPECT_TRUE(Containers().empty());
}

TEST_F(ContainerPodmanTest, KilledPodmanClientLeavesNoContainer) {
  LaunchSpec s = Spec(206, {"sleep", "600"});
  ASSERT_TRUE(launcher_->Launch(s).ok());
  std::optional<JobEvent> started = WaitForEvent(*launcher_, 206, 60'000);
  ASSERT_TRUE(started && started->kind == Kind::kStarted);
  ASSERT_TRUE(WaitForRunningContainer("gpupool-job-206-1", 30'000));
  Result<ShimRecord> rec = ReadShimRecord(JobDir(state_, TaskRun(206)));
  ASSERT_TRUE(rec.ok() && rec->job_pid > 0);
  ASSERT_EQ(::kill(rec->job_pid, SIGKILL), 0);  // the podman client; conmon keeps the container
  std::optional<JobEvent> e = WaitForEvent(*launcher_, 206, 60'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kExited);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_TRUE(Containers().empty());
}

TEST_F(ContainerPodmanTest, MissingImageFailsWithAClearReason) {
  LaunchSpec s = Spec(207, {"true"});
  s.image = "localhost/gpupool-no-such-image:1";
  JobEvent e = RunToEnd(s);
  EXPECT_EQ(e.exit_code, 125) << e.reason;
  EXPECT_NE(e.reason.find("podman could not run the container"), std::string::npos) << e.reason;
  EXPECT_NE(e.reason.find("image not known"), std::string::npos) << e.reason;
}

TEST_F(ContainerPodmanTest, CommandNotFoundInImage) {
  JobEvent e = RunToEnd(Spec(208, {"no-such-command"}));
  EXPECT_EQ(e.exit_code, 127) << e.reason << Log(208, kStderrFile);
  EXPECT_NE(e.reason.find("command 'no-such-command' not found in image"), std::string::npos)
      << e.reason;
}

TEST_F(ContainerPodmanTest, MountTheUserCannotReadIsRefused) {
  const std::string secret = g_world->dir + "/secret-209";
  fs::create_directories(secret + "/inner");
  ::chmod(secret.c_str(), 0700);  // root's; the inner directory itself is open
  ::chmod((secret + "/inner").c_str(), 0755);
  LaunchSpec s = Spec(209, {"ls", "/data"});
  s.mounts = {{secret + "/inner", "/data", true}};
  ASSERT_TRUE(launcher_->Launch(s).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher_, 209, 60'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kFailed);
  EXPECT_NE(e->reason.find("mount /data"), std::string::npos) << e->reason;
  EXPECT_NE(e->reason.find("user 'nobody'"), std::string::npos) << e->reason;
  EXPECT_TRUE(Containers().empty());
}

// Issue 25: the shim checked a mount's source as the user, and podman mounted the same
// path later as root, following symbolic links. A user swapping a symbolic link to a file
// of root's with a file of their own between the two got root's file mounted (4 of 8
// containers). What is checked must be what is mounted: whatever the race, a container
// sees only the user's own file, or the job is refused.
TEST_F(ContainerPodmanTest, ASwappedSymlinkNeverGetsAForeignFileMounted) {
  const std::string dir = g_world->dir + "/race-210";
  fs::create_directories(dir);
  ASSERT_EQ(::chown(dir.c_str(), kNobody, kNobody), 0);
  const std::string secret = g_world->dir + "/secret-210";  // root's, unreadable to nobody
  std::ofstream(secret) << "root only\n";
  ::chmod(secret.c_str(), 0600);
  const std::string src = dir + "/src";    // the mount source the jobs name
  const std::string other = dir + "/alt";  // swapped with it again and again
  std::ofstream(src) << "mine\n";
  ASSERT_EQ(::chown(src.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(::symlink(secret.c_str(), other.c_str()), 0);

  // The attacker: `src` is the user's file and a link to root's, in turn, atomically.
  std::atomic<bool> stop{false};
  std::atomic<long> swaps{0};
  std::thread swapper([&] {
    while (!stop.load()) {
      if (::renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, other.c_str(), RENAME_EXCHANGE) == 0) {
        ++swaps;
      }
    }
  });
  constexpr int kJobs = 20;
  int mounted_own = 0;
  int refused = 0;
  int foreign = 0;
  for (int i = 0; i < kJobs; ++i) {
    const int64_t id = 2100 + i;
    // The owner (uid) of what the container sees at /data.
    LaunchSpec s = Spec(id, {"stat", "-c", "uid=%u", "/data"});
    s.mounts = {{src, "/data", true}};
    Status st = launcher_->Launch(s);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::optional<JobEvent> e = WaitForEvent(*launcher_, id, 60'000);
    ASSERT_TRUE(e.has_value());
    if (e->kind == Kind::kStarted) e = WaitForEvent(*launcher_, id, 60'000);
    ASSERT_TRUE(e.has_value());
    const std::string out = Log(id, kStdoutFile);
    if (out.find("uid=0") != std::string::npos) {
      ++foreign;
      ADD_FAILURE() << "job " << id << " had root's file mounted: " << out;
    } else if (e->kind == Kind::kExited && HasLine(out, "uid=65534")) {
      ++mounted_own;
    } else {
      // Refused when the link to root's file was there as the shim opened the path.
      ++refused;
      EXPECT_EQ(e->kind, Kind::kFailed) << e->reason << "\n" << out << Log(id, kStderrFile);
      EXPECT_NE(e->reason.find("mount /data: '" + src + "' is not readable by user 'nobody'"),
                std::string::npos)
          << e->reason;
    }
  }
  stop = true;
  swapper.join();
  std::printf(
      "[ info ] %d jobs: %d mounted the user's own file, %d refused, %d root's file; %ld swaps\n",
      kJobs, mounted_own, refused, foreign, swaps.load());
  EXPECT_GT(swaps.load(), 0);

  // Left alone, the user's own file is mounted.
  struct stat st;
  ASSERT_EQ(::lstat(src.c_str(), &st), 0);
  if (S_ISLNK(st.st_mode)) {
    ASSERT_EQ(::renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, other.c_str(), RENAME_EXCHANGE), 0);
  }
  LaunchSpec s = Spec(2199, {"stat", "-c", "uid=%u", "/data"});
  s.mounts = {{src, "/data", true}};
  JobEvent e = RunToEnd(s);
  EXPECT_EQ(e.exit_code, 0) << e.reason << "\n" << Log(2199, kStderrFile);
  EXPECT_TRUE(HasLine(Log(2199, kStdoutFile), "uid=65534")) << Log(2199, kStdoutFile);
  EXPECT_TRUE(Containers().empty());
  // The staged sources are unmounted and gone with their jobs.
  EXPECT_EQ(ReadWholeFile("/proc/self/mounts").find(state_), std::string::npos);
  EXPECT_FALSE(fs::exists(JobDir(state_, TaskRun(2199)) + "/mounts"));
}

}  // namespace
}  // namespace gpupool::agent
