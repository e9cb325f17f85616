#include "agent/container.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

namespace gpupool::agent {
namespace {

LaunchSpec ImageSpec() {
  LaunchSpec s;
  s.id = {7, 0, 2, 0};
  s.user = "alice";
  s.uid = 1001;
  s.gid = 1002;
  s.argv = {"python", "train.py", "--epochs", "3"};
  s.image = "localhost/train:1";
  return s;
}

// The value after the first `flag` in argv, or "" when absent.
std::string After(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() || it + 1 == argv.end() ? "" : *(it + 1);
}

std::vector<std::string> AllAfter(const std::vector<std::string>& argv, const std::string& flag) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) out.push_back(argv[i + 1]);
  }
  return out;
}

bool Has(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

TEST(PodmanRunArgvTest, FullJob) {
  LaunchSpec s = ImageSpec();
  s.workdir = "/home/alice/proj";
  s.mounts = {{"/data/imagenet", "/data", true}, {"/scratch/alice", "/scratch", false}};
  s.cdi_devices = {"gpupool.local/gpu=GPU-1111"};
  s.gpus = {{"nvidia", 1, "GPU-1111", {"/dev/nvidia1"}, 1000}};
  s.env = {{"FOO", "bar baz"}};
  s.cpu_milli = 1500;
  s.memory_bytes = 2ull << 30;
  ContainerOptions o;
  o.podman = "/usr/bin/podman";
  o.global_args = {"--root", "/tmp/r", "--storage-driver", "vfs"};
  o.runtime = "runc";
  o.ulimits = {"nofile=20000:20000", "nproc=32768:32768"};
  Result<std::vector<std::string>> r = BuildPodmanRunArgv(s, o, {1002, 27, 1002, 100});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<std::string>& a = *r;

  // podman, global args, then the subcommand; image and command last, in order.
  ASSERT_GE(a.size(), 6u);
  EXPECT_EQ(a[0], "/usr/bin/podman");
  EXPECT_EQ(std::vector<std::string>(a.begin() + 1, a.begin() + 5), o.global_args);
  EXPECT_EQ(a[5], "run");
  EXPECT_EQ(
      std::vector<std::string>(a.end() - 6, a.end()),
      (std::vector<std::string>{"--", "localhost/train:1", "python", "train.py", "--epochs", "3"}));

  EXPECT_TRUE(Has(a, "--rm"));
  EXPECT_EQ(After(a, "--name"), "gpupool-job-7-2");
  EXPECT_EQ(After(a, "--runtime"), "runc");
  EXPECT_EQ(AllAfter(a, "--ulimit"), o.ulimits);
  EXPECT_EQ(After(a, "--user"), "1001:1002");
  EXPECT_EQ(AllAfter(a, "--group-add"), (std::vector<std::string>{"27", "100"}));
  EXPECT_EQ(After(a, "--cap-drop"), "all");
  EXPECT_EQ(After(a, "--security-opt"), "no-new-privileges");
  EXPECT_EQ(After(a, "--workdir"), "/home/alice/proj");
  EXPECT_EQ(AllAfter(a, "--mount"), (std::vector<std::string>{
                                        "type=bind,source=/home/alice/proj,target=/home/alice/proj",
                                        "type=bind,source=/data/imagenet,target=/data,ro=true",
                                        "type=bind,source=/scratch/alice,target=/scratch",
                                    }));
  EXPECT_EQ(AllAfter(a, "--device"), (std::vector<std::string>{"gpupool.local/gpu=GPU-1111"}));
  EXPECT_EQ(After(a, "--cpus"), "1.500");
  EXPECT_EQ(After(a, "--memory"), std::to_string(2ull << 30) + "b");
  EXPECT_EQ(After(a, "--network"), "host");
  EXPECT_EQ(After(a, "--pull"), "missing");

  // Every job variable, and none of the host's login defaults.
  const std::vector<std::string> env = AllAfter(a, "--env");
  EXPECT_TRUE(Has(env, "FOO=bar baz"));
  EXPECT_TRUE(Has(env, "CUDA_VISIBLE_DEVICES=GPU-1111"));
  EXPECT_TRUE(Has(env, "GPUPOOL_JOB_ID=7"));
  EXPECT_TRUE(Has(env, "GPUPOOL_ATTEMPT=2"));
  for (const std::string& e : env) {
    EXPECT_NE(e.rfind("PATH=", 0), 0u) << e;
    EXPECT_NE(e.rfind("HOME=", 0), 0u) << e;
  }
}

// Regression: `submit --image=--user=0:0` reached podman as its --user option and ran the
// container as root; --image=--privileged exposed every host device.
TEST(PodmanRunArgvTest, ImageThatLooksLikeAnOptionIsRefused) {
  for (const char* image : {"--user=0:0", "--privileged", "-v/:/host"}) {
    LaunchSpec s = ImageSpec();
    s.image = image;
    Result<std::vector<std::string>> r = BuildPodmanRunArgv(s, ContainerOptions{}, {}, "");
    ASSERT_FALSE(r.ok()) << image;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("image"), std::string::npos);
  }
}

TEST(PodmanRunArgvTest, MinimalCpuJobHasNoOptionalFlags) {
  LaunchSpec s = ImageSpec();
  s.uid = 0;
  s.gid = 0;
  Result<std::vector<std::string>> r = BuildPodmanRunArgv(s, ContainerOptions{}, {0});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<std::string>& a = *r;
  EXPECT_EQ(a[0], "podman");
  EXPECT_EQ(a[1], "run");
  for (const char* flag : {"--runtime", "--ulimit", "--workdir", "--mount", "--device", "--cpus",
                           "--memory", "--group-add", "--cap-drop", "--shm-size"}) {
    EXPECT_FALSE(Has(a, flag)) << flag;
  }
  EXPECT_EQ(After(a, "--user"), "0:0");
  // No GPU: the visibility variables say so.
  EXPECT_TRUE(Has(AllAfter(a, "--env"), "CUDA_VISIBLE_DEVICES="));
  EXPECT_TRUE(Has(AllAfter(a, "--env"), "NVIDIA_VISIBLE_DEVICES=void"));
}

// Issue 15 B.8: an init as PID 1 by default (signals reach the command), /dev/shm sized
// on request.
TEST(PodmanRunArgvTest, InitByDefaultAndShmSizeOnRequest) {
  LaunchSpec s = ImageSpec();
  Result<std::vector<std::string>> r = BuildPodmanRunArgv(s, ContainerOptions{}, {0});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Has(*r, "--init"));
  EXPECT_FALSE(Has(*r, "--shm-size"));
  s.init = false;
  s.shm_bytes = 8ull << 30;
  r = BuildPodmanRunArgv(s, ContainerOptions{}, {0});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(Has(*r, "--init"));
  EXPECT_EQ(After(*r, "--shm-size"), "8589934592b");
  // Both before the image: after it they would be the command's arguments.
  const auto image = std::find(r->begin(), r->end(), s.image);
  EXPECT_LT(std::find(r->begin(), r->end(), "--shm-size"), image);
}

TEST(PodmanRunArgvTest, MountOnTheWorkdirReplacesTheWorkdirMount) {
  LaunchSpec s = ImageSpec();
  s.workdir = "/work";
  s.mounts = {{"/srv/alice/work", "/work", false}};
  Result<std::vector<std::string>> r = BuildPodmanRunArgv(s, ContainerOptions{}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(AllAfter(*r, "--mount"),
            (std::vector<std::string>{"type=bind,source=/srv/alice/work,target=/work"}));
}

TEST(PodmanRunArgvTest, EnvFileKeepsVariablesOffTheCommandLine) {
  LaunchSpec s = ImageSpec();
  s.env = {{"TOKEN", "secret"}, {"MULTI", "line1\nline2"}};
  Result<std::vector<std::string>> r =
      BuildPodmanRunArgv(s, ContainerOptions{}, {}, "/state/jobs/7/container.env");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(After(*r, "--env-file"), "/state/jobs/7/container.env");
  // Only what the file format cannot hold stays on the command line.
  EXPECT_EQ(AllAfter(*r, "--env"), (std::vector<std::string>{"MULTI=line1\nline2"}));
  const std::string file = ContainerEnvFile(s);
  EXPECT_NE(file.find("TOKEN=secret\n"), std::string::npos);
  EXPECT_NE(file.find("GPUPOOL_JOB_ID=7\n"), std::string::npos);
  EXPECT_EQ(file.find("MULTI"), std::string::npos);
}

TEST(PodmanRunArgvTest, EnvFileCan) {
  EXPECT_TRUE(EnvFileCan("A", "x y # z "));
  EXPECT_TRUE(EnvFileCan("A", ""));
  EXPECT_FALSE(EnvFileCan("#A", "x"));
  EXPECT_FALSE(EnvFileCan("A B", "x"));
  EXPECT_FALSE(EnvFileCan("A", "x\ny"));
  EXPECT_FALSE(EnvFileCan("A", std::string(70'000, 'x')));
}

// A dmem share's container goes below the job's own cgroup, which holds the cap: podman
// takes a cgroup path as the parent under the cgroupfs manager only.
TEST(PodmanRunArgvTest, ACgroupParentComesWithTheCgroupfsManager) {
  ContainerOptions o;
  o.podman = "/usr/bin/podman";
  o.global_args = {"--root", "/tmp/r"};
  Result<std::vector<std::string>> r =
      BuildPodmanRunArgv(ImageSpec(), o, {}, "", "/gpupool/job-7-0.1-42");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<std::string>& a = *r;
  const auto at = [&](const std::string& v) {
    return std::find(a.begin(), a.end(), v) - a.begin();
  };
  const auto run = at("run");
  ASSERT_LT(run, static_cast<long>(a.size()));
  EXPECT_LT(at("--root"), run);  // global options before the subcommand
  ASSERT_LT(at("--cgroup-manager"), run);
  EXPECT_EQ(a[at("--cgroup-manager") + 1], "cgroupfs");
  const auto parent = at("--cgroup-parent");
  ASSERT_GT(parent, run);
  EXPECT_LT(parent, at("--"));
  EXPECT_EQ(a[parent + 1], "/gpupool/job-7-0.1-42");
  // Without a parent podman keeps its own manager and cgroups.
  Result<std::vector<std::string>> plain = BuildPodmanRunArgv(ImageSpec(), o, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(std::count(plain->begin(), plain->end(), "--cgroup-manager"), 0);
  EXPECT_EQ(std::count(plain->begin(), plain->end(), "--cgroup-parent"), 0);
  EXPECT_FALSE(BuildPodmanRunArgv(ImageSpec(), o, {}, "", "gpupool/job-7").ok());
}

TEST(PodmanRunArgvTest, RefusesPathsPodmanWouldMisread) {
  LaunchSpec s = ImageSpec();
  s.mounts = {{"relative/dir", "/data", true}};
  EXPECT_FALSE(BuildPodmanRunArgv(s, ContainerOptions{}, {}).ok());
  s.mounts = {{"/data,ro=false", "/data", true}};
  Result<std::vector<std::string>> r = BuildPodmanRunArgv(s, ContainerOptions{}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("comma"), std::string::npos) << r.status().message();
  s.mounts = {};
  s.workdir = "/a,b";
  EXPECT_FALSE(BuildPodmanRunArgv(s, ContainerOptions{}, {}).ok());
  s.workdir = "";
  s.image = "";
  EXPECT_FALSE(BuildPodmanRunArgv(s, ContainerOptions{}, {}).ok());
}

TEST(MapPodmanExitTest, CommandExitCodesPassThrough) {
  ContainerExit e = MapPodmanExit(0, "", "img", "cmd");
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_FALSE(e.signal);
  EXPECT_EQ(e.reason, "");
  e = MapPodmanExit(3, "some output\n", "img", "cmd");
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_EQ(e.reason, "");
}

TEST(MapPodmanExitTest, PodmanFailureIsAFailureWithItsError) {
  ContainerExit e =
      MapPodmanExit(125, "Trying to pull x...\nError: localhost/nope:1: image not known\n",
                    "localhost/nope:1", "sh");
  EXPECT_EQ(e.exit_code, 125);
  EXPECT_EQ(e.reason, "podman could not run the container: localhost/nope:1: image not known");
  e = MapPodmanExit(125, "", "img", "sh");
  EXPECT_EQ(e.reason, "podman could not run the container: see the job's stderr.log");
}

TEST(MapPodmanExitTest, WhatCatatonitSaysWhenItCannotRunTheCommand) {
  ContainerExit e = MapPodmanExit(
      1, "ERROR (catatonit:6): failed to exec pid1: No such file or directory\n", "img", "x");
  EXPECT_EQ(e.exit_code, 127);
  EXPECT_EQ(e.reason, "command 'x' not found in image 'img': No such file or directory");
  e = MapPodmanExit(1, "ERROR (catatonit:6): failed to exec pid1: Permission denied\n", "img", "x");
  EXPECT_EQ(e.exit_code, 126);
  // The command's own exit 1, whatever it printed before its last line.
  e = MapPodmanExit(1, "ERROR (catatonit:6): failed to exec pid1: x\nlater output\n", "img", "x");
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_EQ(e.reason, "");
}

TEST(MapPodmanExitTest, NotFoundAndNotExecutable) {
  const std::string nf =
      "Error: runc: runc create failed: unable to start container process: exec: \"nonexist\": "
      "executable file not found in $PATH: OCI runtime attempted to invoke a command that was "
      "not found\n";
  ContainerExit e = MapPodmanExit(127, nf, "img:1", "nonexist");
  EXPECT_EQ(e.exit_code, 127);
  EXPECT_EQ(e.reason.rfind("command 'nonexist' not found in image 'img:1': runc: ", 0), 0u)
      << e.reason;
  e = MapPodmanExit(126, "Error: runc: ... exec: \"/etc\": permission denied\n", "img:1", "/etc");
  EXPECT_EQ(e.reason.rfind("command '/etc' could not be executed in image 'img:1'", 0), 0u)
      << e.reason;
  // Without podman's error line, 126/127 are the command's own codes (a shell's).
  e = MapPodmanExit(127, "sh: foo: not found\n", "img:1", "sh");
  EXPECT_EQ(e.exit_code, 127);
  EXPECT_EQ(e.reason, "");
}

TEST(MapPodmanExitTest, SignalsAre128PlusN) {
  ContainerExit e = MapPodmanExit(137, "", "img", "sleep");
  EXPECT_FALSE(e.exit_code);
  EXPECT_EQ(e.signal, 9);
  e = MapPodmanExit(143, "", "img", "sleep");
  EXPECT_EQ(e.signal, 15);
  e = MapPodmanExit(128, "", "img", "sleep");
  EXPECT_EQ(e.exit_code, 128);
  EXPECT_FALSE(e.signal);
  e = MapPodmanExit(200, "", "img", "sleep");
  EXPECT_EQ(e.exit_code, 200);
}

TEST(LastPodmanErrorTest, PicksTheLastErrorLine) {
  EXPECT_EQ(LastPodmanError("Error: first\nwarn\nError: second\nmore\n"), "second");
  EXPECT_EQ(LastPodmanError("no errors here\n"), "");
}

PodmanFacts ThisMachine() {
  // The facts of this project's CI host: rootful podman in a container without
  // CAP_SYS_RESOURCE, no crun, cgroup v1.
  PodmanFacts f;
  f.podman_path = "/usr/bin/podman";
  f.default_runtime = "runc";
  f.cgroup_version = "v1";
  f.runc_present = true;
  f.nofile_hard = 20000;
  f.nproc_hard = 96343;
  f.pid_max = 32768;
  return f;
}

TEST(DecideContainerOptionsTest, CiHostNeedsRuncAndUlimits) {
  ContainerOptions o = DecideContainerOptions(ThisMachine(), ContainerOptions{});
  EXPECT_EQ(o.podman, "/usr/bin/podman");
  EXPECT_EQ(o.unavailable, "");
  EXPECT_EQ(o.runtime, "runc");
  EXPECT_EQ(o.ulimits, (std::vector<std::string>{"nofile=20000:20000", "nproc=32768:32768"}));
  EXPECT_EQ(o.note.rfind("podman: --runtime runc (crun missing); --ulimit nofile=20000:20000", 0),
            0u)
      << o.note;
  EXPECT_NE(o.note.find("--ulimit nproc=32768:32768"), std::string::npos) << o.note;
}

TEST(DecideContainerOptionsTest, CapableHostWithCrunNeedsNothing) {
  PodmanFacts f = ThisMachine();
  f.crun_present = true;
  f.cgroup_version = "v2";
  f.cap_sys_resource = true;
  ContainerOptions o = DecideContainerOptions(f, ContainerOptions{});
  EXPECT_EQ(o.runtime, "");
  EXPECT_TRUE(o.ulimits.empty());
  EXPECT_EQ(o.note, "podman: no adjustments");
}

TEST(DecideContainerOptionsTest, HighLimitsNeedNoUlimit) {
  PodmanFacts f = ThisMachine();
  f.nofile_hard = 1 << 21;
  f.nproc_hard = UINT64_MAX;
  f.pid_max = 4'194'304;
  ContainerOptions o = DecideContainerOptions(f, ContainerOptions{});
  EXPECT_TRUE(o.ulimits.empty());
}

TEST(DecideContainerOptionsTest, CgroupV1WithBothRuntimesPicksRunc) {
  PodmanFacts f = ThisMachine();
  f.crun_present = true;
  ContainerOptions o = DecideContainerOptions(f, ContainerOptions{});
  EXPECT_EQ(o.runtime, "runc");
  EXPECT_NE(o.note.find("cgroup v1"), std::string::npos) << o.note;
}

TEST(DecideContainerOptionsTest, ConfiguredValuesWin) {
  ContainerOptions base;
  base.runtime = "crun";
  base.ulimits = {"nofile=1024:1024"};
  ContainerOptions o = DecideContainerOptions(ThisMachine(), base);
  EXPECT_EQ(o.runtime, "crun");
  EXPECT_EQ(o.ulimits, (std::vector<std::string>{"nofile=1024:1024", "nproc=32768:32768"}));
  EXPECT_NE(o.note.find("--runtime crun (configured)"), std::string::npos) << o.note;
}

TEST(DecideContainerOptionsTest, MissingPodmanMakesContainersUnavailable) {
  PodmanFacts f = ThisMachine();
  f.podman_path = "";
  f.missing_reason = "'podman' not found (install podman, e.g. apt-get install podman)";
  ContainerOptions o = DecideContainerOptions(f, ContainerOptions{});
  EXPECT_EQ(o.unavailable, f.missing_reason);
  EXPECT_EQ(o.podman, "podman");
}

TEST(ProbePodmanTest, MissingBinaryIsReported) {
  ContainerOptions base;
  base.podman = "/nonexistent/podman";
  ContainerOptions o = DetectContainerOptions(base);
  EXPECT_NE(o.unavailable.find("/nonexistent/podman"), std::string::npos) << o.unavailable;
}

TEST(RunCommandTest, OutputErrorsAndTimeout) {
  Result<std::string> r = RunCommand({"sh", "-c", "echo hello"}, 5000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "hello\n");
  r = RunCommand({"sh", "-c", "echo 'Error: it broke' >&2; exit 2"}, 5000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("it broke"), std::string::npos) << r.status().message();
  r = RunCommand({"sleep", "10"}, 200);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("did not finish"), std::string::npos);
  EXPECT_FALSE(RunCommand({"/nonexistent/cmd"}, 1000).ok());
}

TEST(CheckUserAccessTest, OwnFilesAreReadable) {
  EXPECT_TRUE(CheckUserAccess("/", "me", ::geteuid(), ::getegid(), {}, false).ok());
  Status st = CheckUserAccess("/nonexistent/x", "me", ::geteuid(), ::getegid(), {}, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("does not exist"), std::string::npos) << st.message();
}

TEST(CheckUserAccessTest, RootChecksAsTheUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to check access as another user";
  // /root is 0700 on Debian: nobody may not read it, root may.
  Status st = CheckUserAccess("/root", "nobody", 65534, 65534, {65534}, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not readable by user 'nobody'"), std::string::npos) << st.message();
  EXPECT_TRUE(CheckUserAccess("/tmp", "nobody", 65534, 65534, {65534}, false).ok());
}

}  // namespace
}  // namespace gpupool::agent
