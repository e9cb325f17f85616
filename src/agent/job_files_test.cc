#include "agent/job_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/file_util.h"

namespace gpupool::agent {
namespace {

TEST(JobFilesTest, ShimConfigRoundTrips) {
  ShimConfig c;
  c.spec.id = {9, 2, 3, 0};
  c.spec.user = "bob";
  c.spec.uid = 1001;
  c.spec.gid = 1002;
  c.spec.argv = {"python", "train.py", "--lr=0.1"};
  c.spec.env = {{"A", "1"}, {"B", "two words"}};
  c.spec.workdir = "/work";
  c.spec.gpus = {{"nvidia", 1, "GPU-1", {"/dev/nvidia1"}, 250}};
  c.spec.denied_device_nodes = {"/dev/nvidia0"};
  c.spec.cpu_milli = 1500;
  c.spec.memory_bytes = 1ull << 30;
  c.spec.time_limit_s = 60;
  c.spec.grace_s = 5;
  c.cgroup_root = "/sys/fs/cgroup";
  Result<ShimConfig> back = ShimConfigFromJson(ShimConfigToJson(c), "spec.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->spec, c.spec);
  EXPECT_EQ(back->cgroup_root, c.cgroup_root);
  EXPECT_EQ(*back, c);
  EXPECT_FALSE(back->user.has_value());  // the shim then looks the user up itself
  // The user as the launcher looked it up (LookUpJobUser).
  c.user = JobUser{true, "/home/bob", "/bin/bash", {1002, 27, 4000000000u}};
  back = ShimConfigFromJson(ShimConfigToJson(c), "spec.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);
}

// The node lease's file (node_lease.h) travels in spec.json; a spec without it (an older
// agent's) reads as a run that is never fenced.
TEST(JobFilesTest, TheLeaseFileRoundTripsAndIsOptional) {
  ShimConfig c;
  c.spec.id = {9, 0, 1, 0};
  c.spec.user = "bob";
  c.spec.argv = {"sleep", "5"};
  c.spec.lease_file = "/var/lib/gpupool/agent/node_lease";
  c.spec.node_name = "gpu-07";
  const std::string json = ShimConfigToJson(c);
  EXPECT_NE(json.find("\"lease_file\": \"/var/lib/gpupool/agent/node_lease\""), std::string::npos)
      << json;
  Result<ShimConfig> back = ShimConfigFromJson(json, "spec.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->spec.lease_file, c.spec.lease_file);
  EXPECT_EQ(back->spec.node_name, "gpu-07");
  c.spec.lease_file.clear();
  EXPECT_EQ(ShimConfigToJson(c).find("lease_file"), std::string::npos);
  Result<ShimConfig> old = ShimConfigFromJson(
      R"({"job_id":1,"attempt":1,"user":"u","uid":1,"gid":1,"argv":["x"]})", "spec.json");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->spec.lease_file, "");
}

TEST(JobFilesTest, BadJobUserIsNamed) {
  const std::string head = R"({"job_id":1,"attempt":1,"user":"u","uid":1,"gid":1,"argv":["x"],)";
  for (const char* bad :
       {R"("job_user":{"known":true,"groups":[1,-2]}})",
        R"("job_user":{"known":true,"groups":["wheel"]}})",
        R"("job_user":{"known":true,"groups":[]}})", R"("job_user":{"groups":[1]}})"}) {
    Result<ShimConfig> r = ShimConfigFromJson(head + bad, "spec.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("job_user."), std::string::npos) << r.status().message();
  }
  Result<ShimConfig> r = ShimConfigFromJson(head + R"("job_user":5})", "spec.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("job_user"), std::string::npos) << r.status().message();
}

TEST(JobFilesTest, ContainerSpecAndOptionsRoundTrip) {
  ShimConfig c;
  c.spec.id = {12, 0, 1, 77};
  c.spec.user = "bob";
  c.spec.uid = 1001;
  c.spec.gid = 1002;
  c.spec.argv = {"python", "train.py"};
  c.spec.image = "localhost/train:1";
  c.spec.mounts = {{"/data/set", "/data", true}, {"/scratch/bob", "/scratch", false}};
  c.spec.cdi_devices = {"gpupool.local/gpu=GPU-1", "gpupool.local/gpu=3"};
  c.spec.env_dir = "/opt/envs/torch";
  c.spec.share_enforcement = "mps";
  c.spec.share_memory_bytes = 123456789;
  c.spec.mps_pipe_dir = "/var/lib/gpupool/mps/GPU-1/pipe";
  c.spec.cu_mask = "0-9,20-29";  // kept across an agent restart, so shares stay apart
  c.container.podman = "/usr/bin/podman";
  c.container.global_args = {"--root", "/tmp/r", "--storage-driver", "vfs"};
  c.container.runtime = "runc";
  c.container.ulimits = {"nofile=20000:20000", "nproc=32768:32768"};
  c.container.pull = "never";
  c.container.network = "none";
  c.container.note = "podman: --runtime runc (crun missing)";
  c.container.unavailable = "";
  Result<ShimConfig> back = ShimConfigFromJson(ShimConfigToJson(c), "spec.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, c);

  // Every field takes part in equality, so a field the JSON forgot would show above.
  ShimConfig other = c;
  other.spec.mounts[0].read_only = false;
  EXPECT_NE(other, c);
  other = c;
  other.container.ulimits.pop_back();
  EXPECT_NE(other, c);
}

TEST(JobFilesTest, SpecWithoutContainerFieldsReadsAsProcessJob) {
  // A spec.json written by an agent from before container jobs.
  Result<ShimConfig> r = ShimConfigFromJson(
      R"({"job_id":1,"attempt":1,"user":"u","uid":1,"gid":1,"argv":["x"]})", "spec.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->spec.image.empty());
  EXPECT_TRUE(r->spec.mounts.empty());
  EXPECT_EQ(r->container, ContainerOptions{});
}

TEST(JobFilesTest, BadMountIsNamed) {
  Result<ShimConfig> r = ShimConfigFromJson(
      R"({"job_id":1,"attempt":1,"user":"u","uid":1,"gid":1,"argv":["x"],
          "mounts":[{"source":"/a"}]})",
      "spec.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mounts[0]"), std::string::npos) << r.status().message();
}

TEST(JobFilesTest, ShimConfigErrorsNameTheField) {
  Result<ShimConfig> r = ShimConfigFromJson(
      R"({"job_id":1,"attempt":1,"user":"u","uid":1,"gid":1,"argv":["x"],"env":{"A":3}})",
      "spec.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("env.A"), std::string::npos) << r.status().message();
  r = ShimConfigFromJson(R"({"job_id":1,"attempt":1,"user":"u","uid":1,"gid":1,"argv":[]})",
                         "spec.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("argv"), std::string::npos);
  r = ShimConfigFromJson(R"({"job_id":1,"attempt":1,"user":"u","uid":-5,"gid":1,"argv":["x"]})",
                         "spec.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("uid"), std::string::npos);
  EXPECT_FALSE(ShimConfigFromJson("not json", "spec.json").ok());
  // A field from a newer agent version is no error.
  EXPECT_TRUE(
      ShimRecordFromJson(R"({"job_id":1,"attempt":1,"pid":5,"start_ticks":9,"new":1})", "shim.json")
          .ok());
}

TEST(JobFilesTest, FinalStatusRoundTripsAndBecomesAnEvent) {
  FinalStatus s;
  s.id = {5, 1, 2, 0};
  s.started = true;
  s.start_time_us = 100;
  s.end_time_us = 200;
  s.signal = 9;
  s.timed_out = true;
  s.reason = "time limit of 1 s reached";
  Result<FinalStatus> back = FinalStatusFromJson(FinalStatusToJson(s), "status.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, s.id);
  JobEvent e = EventFromFinalStatus(*back, s.id, "/state/jobs/5/1.2");
  EXPECT_EQ(e.id, s.id);
  EXPECT_EQ(e.dir, "/state/jobs/5/1.2");
  EXPECT_EQ(e.kind, JobEvent::Kind::kExited);
  EXPECT_EQ(e.signal, 9);
  EXPECT_FALSE(e.exit_code.has_value());
  EXPECT_TRUE(e.timed_out);
  EXPECT_EQ(e.time_us, 200);
  EXPECT_EQ(e.reason, s.reason);
  EXPECT_EQ(e.kill_cause, std::nullopt);  // a status of a shim older than the field

  s.kill_cause = protocol::KillCause::kTimeLimit;
  s.kill_detail = "time limit of 1 s reached";
  back = FinalStatusFromJson(FinalStatusToJson(s), "status.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  e = EventFromFinalStatus(*back, s.id, "/state/jobs/5/1.2");
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kTimeLimit);
  EXPECT_EQ(e.kill_detail, "time limit of 1 s reached");
  // A newer shim's cause this agent does not know is reported as unknown.
  std::string newer = FinalStatusToJson(s);
  newer.replace(newer.find("\"time_limit\""), 12, "\"oom_gpu\"");
  back = FinalStatusFromJson(newer, "status.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->kill_cause, protocol::KillCause::kUnknown);

  s.started = false;
  s.signal.reset();
  e = EventFromFinalStatus(s, s.id, "");
  EXPECT_EQ(e.kind, JobEvent::Kind::kFailed);
  EXPECT_FALSE(e.not_started);
  EXPECT_EQ(FinalStatusToJson(s).find("node_fault"), std::string::npos);
  // Not started by the node's fault: lost with not_started, and it round-trips.
  s.node_fault = true;
  back = FinalStatusFromJson(FinalStatusToJson(s), "status.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->node_fault);
  e = EventFromFinalStatus(*back, s.id, "");
  EXPECT_EQ(e.kind, JobEvent::Kind::kLost);
  EXPECT_TRUE(e.not_started);
}

TEST(JobFilesTest, WriteFileDurablySetsModeAndReplaces) {
  char tmpl[] = "/tmp/gpupool-files-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/x.json";
  ASSERT_TRUE(WriteFileDurably(path, "one", 0600).ok());
  ASSERT_TRUE(WriteFileDurably(path, "two", 0640).ok());
  EXPECT_EQ(ReadFileToString(path).value_or(""), "two");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_FALSE(WriteFileDurably(std::string(tmpl) + "/no/such/dir/x", "x", 0600).ok());
  EXPECT_EQ(ReadFinalStatus(tmpl).status().code(), StatusCode::kNotFound);
  ::unlink(path.c_str());
  ::rmdir(tmpl);
}

// shim.json's second write replaces its contents in the same inode (no file created or
// deleted), longer or shorter, and never through a link; readers see whole records.
TEST(JobFilesTest, RewriteFileLockedKeepsTheInode) {
  char tmpl[] = "/tmp/gpupool-files-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/" + kShimFile;
  ShimRecord first;
  first.id = RunId{7, 0, 1, 0};
  first.pid = 11;
  first.boot_id = "b";
  ASSERT_TRUE(WriteFileDurably(path, ShimRecordToJson(first), 0600, false).ok());
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  ShimRecord second = first;
  second.job_pid = 12345;
  second.start_time_us = 99;
  ASSERT_TRUE(RewriteFileLocked(path, ShimRecordToJson(second)).ok());
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mode & 0777, 0600u);
  Result<ShimRecord> read = ReadShimRecord(dir);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->job_pid, 12345);
  ASSERT_TRUE(RewriteFileLocked(path, "{}").ok());  // shorter: no old tail left
  EXPECT_EQ(ReadFileToString(path).value_or(""), "{}");

  EXPECT_EQ(RewriteFileLocked(dir + "/none.json", "x").code(), StatusCode::kNotFound);
  const std::string link = dir + "/link.json";
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_FALSE(RewriteFileLocked(link, "x").ok());
  EXPECT_EQ(ReadFileToString(path).value_or(""), "{}");

  // A reader racing the rewrites gets one record or the other, never a torn one.
  ShimRecord longer = second;
  longer.isolation = std::string(3000, 'i');
  ASSERT_TRUE(RewriteFileLocked(path, ShimRecordToJson(second)).ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      (void)RewriteFileLocked(path, ShimRecordToJson(i % 2 == 0 ? longer : second));
    }
  });
  int bad = 0;
  std::string why;
  for (int i = 0; i < 2000; ++i) {
    Result<ShimRecord> r = ReadShimRecord(dir);
    if (!r.ok() || r->job_pid != 12345) {
      ++bad;
      why = r.ok() ? "job_pid " + std::to_string(r->job_pid) : r.status().ToString();
    }
  }
  stop = true;
  writer.join();
  EXPECT_EQ(bad, 0) << why;
  std::filesystem::remove_all(dir);
}

// Files written by an agent and shims of the previous layout name their run by its
// launcher key; the run they stand for is read back (run_id.h, LegacyRunId).
TEST(JobFilesTest, FilesOfThePreviousLayoutNameTheirRun) {
  const std::string rest = R"("user":"u","uid":1,"gid":1,"argv":["x"]})";
  struct Case {
    std::string fields;
    RunId want;
  } cases[] = {
      // A single task: its job's id.
      {R"({"job_id":12,"attempt":2,"pool_job_id":12,"task_index":0,)", {12, 0, 2, 0}},
      // Before pool_job_id existed.
      {R"({"job_id":13,"attempt":1,)", {13, 0, 1, 0}},
      // A gang's task 3 of job 44: 2^50 + 44 * 4096 + 3.
      {R"({"job_id":1125899907022851,"attempt":1,"pool_job_id":44,"task_index":3,)", {44, 3, 1, 0}},
      // Exec session 7 in task 1 of job 44: 2^61 + 7, the task's fields copied.
      {R"({"job_id":2305843009213693959,"attempt":2,"pool_job_id":44,"task_index":1,)",
       {44, 1, 2, 7}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fields);
    Result<ShimConfig> r = ShimConfigFromJson(c.fields + rest, "spec.json");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->spec.id, c.want);
  }
  Result<FinalStatus> st =
      FinalStatusFromJson(R"({"job_id":12,"attempt":2,"started":true})", "status.json");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->id, (RunId{12, 0, 2, 0}));
  EXPECT_EQ(JobOfLegacyKey(1125899907022851), 44);
  EXPECT_EQ(JobOfLegacyKey(12), 12);
  EXPECT_EQ(JobOfLegacyKey(2305843009213693959), 0);
}

TEST(RunIdTest, DirectoriesReadAsUsersSeeThem) {
  EXPECT_EQ(JobDir("/s", RunId{12, 0, 1, 0}), "/s/jobs/12/0.1");
  EXPECT_EQ(JobDir("/s", RunId{12, 3, 2, 0}), "/s/jobs/12/3.2");
  EXPECT_EQ(JobDir("/s", RunId{12, 3, 2, 99}), "/s/jobs/12/exec-99");
  EXPECT_EQ(ToString(RunId{12, 3, 2, 0}), "job 12 task 3 attempt 2");
  EXPECT_EQ(ToString(RunId{12, 3, 2, 99}), "exec 99 in job 12 task 3 attempt 2");
  for (const char* good : {"0.1", "12.30", "exec-5"}) EXPECT_TRUE(IsRunDirName(good)) << good;
  for (const char* bad :
       {"", "1", "1.", ".1", "a.1", "1.1.1", "exec-", "exec-x", "..", "1125899906846720"}) {
    EXPECT_FALSE(IsRunDirName(bad)) << bad;
  }
  EXPECT_EQ(RunIdOfDir("/s/jobs/12/3.2"), (RunId{12, 3, 2, 0}));
  EXPECT_EQ(RunIdOfDir("/s/jobs/12/exec-9/"), (RunId{12, 0, 1, 9}));
  EXPECT_EQ(RunIdOfDir("/s/jobs/12"), std::nullopt);
  EXPECT_EQ(RunIdOfDir("/s/jobs/x/0.1"), std::nullopt);
}

// A run's logs in the layout users see (jobs/<job>/<task>.<attempt>, jobs/<job>/exec-<id>)
// are served; anything else in or beside it is not.
TEST(JobFilesTest, ReadJobLogSliceReadsRunLogsOfTheNewLayout) {
  char tmpl[] = "/tmp/gpupool-logslice-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string state = tmpl;
  const std::string run = JobDir(state, RunId{12, 0, 1, 0});
  const std::string exec = JobDir(state, RunId{12, 0, 1, 5});
  std::filesystem::create_directories(run + "/mounts");
  std::filesystem::create_directories(exec);
  std::filesystem::create_directories(state + "/jobs/12/other");
  std::filesystem::create_directories(state + "/jobs/x/0.1");
  ASSERT_TRUE(WriteFileDurably(run + "/stdout.log", "hello", 0600).ok());
  ASSERT_TRUE(WriteFileDurably(exec + "/stderr.log", "oops", 0600).ok());
  ASSERT_TRUE(WriteFileDurably(run + "/mounts/stdout.log", "deep", 0600).ok());
  ASSERT_TRUE(WriteFileDurably(state + "/jobs/12/other/stdout.log", "o", 0600).ok());
  ASSERT_TRUE(WriteFileDurably(state + "/jobs/x/0.1/stdout.log", "x", 0600).ok());
  Result<LogSlice> s = ReadJobLogSlice(state, run + "/stdout.log", 1, 3);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->data, "ell");
  s = ReadJobLogSlice(state, exec + "/stderr.log", 0, 10);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->data, "oops");
  for (const std::string& bad : {run + "/mounts/stdout.log", state + "/jobs/12/other/stdout.log",
                                 state + "/jobs/x/0.1/stdout.log"}) {
    EXPECT_EQ(ReadJobLogSlice(state, bad, 0, 10).status().code(), StatusCode::kPermissionDenied)
        << bad;
  }
  // A run directory that is a link to elsewhere is outside the jobs directory.
  std::filesystem::create_directories(state + "/elsewhere");
  ASSERT_TRUE(WriteFileDurably(state + "/elsewhere/stdout.log", "x", 0600).ok());
  std::filesystem::create_directory_symlink(state + "/elsewhere", state + "/jobs/12/0.2");
  EXPECT_EQ(ReadJobLogSlice(state, state + "/jobs/12/0.2/stdout.log", 0, 10).status().code(),
            StatusCode::kPermissionDenied);
  std::filesystem::remove_all(state);
}

// The previous layout's directories (jobs/<key>/): an ended job's record names its logs
// there, and `gpupool logs` reads them after an upgrade.
TEST(JobFilesTest, ReadJobLogSliceReadsOnlyJobLogs) {
  char tmpl[] = "/tmp/gpupool-logslice-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string state = tmpl;
  const std::string job = state + "/jobs/7";
  std::filesystem::create_directories(job);
  ASSERT_TRUE(WriteFileDurably(job + "/stdout.log", "0123456789", 0600).ok());
  ASSERT_TRUE(WriteFileDurably(job + "/spec.json", "{}", 0600).ok());
  ASSERT_TRUE(WriteFileDurably(state + "/secret", "s", 0600).ok());

  Result<LogSlice> s = ReadJobLogSlice(state, job + "/stdout.log", 3, 4);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->data, "3456");
  EXPECT_EQ(s->size, 10);
  s = ReadJobLogSlice(state, job + "/stdout.log", 8, 100);  // to the end
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->data, "89");
  s = ReadJobLogSlice(state, job + "/stdout.log", 50, 100);  // past the end: size only
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->data, "");
  EXPECT_EQ(s->size, 10);
  // The same directory through a path with ".." still resolves to the job directory.
  s = ReadJobLogSlice(state, state + "/jobs/../jobs/7/stdout.log", 0, 2);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->data, "01");

  // Not yet written, or no such job: not found.
  EXPECT_EQ(ReadJobLogSlice(state, job + "/stderr.log", 0, 10).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ReadJobLogSlice(state, state + "/jobs/8/stdout.log", 0, 10).status().code(),
            StatusCode::kNotFound);
  // Anything but a job's log file is refused.
  for (const std::string& bad :
       {job + "/spec.json", state + "/secret", std::string("/etc/passwd"),
        std::string("stdout.log"), state + "/jobs/stdout.log", job + "/../../secret"}) {
    EXPECT_EQ(ReadJobLogSlice(state, bad, 0, 10).status().code(), StatusCode::kPermissionDenied)
        << bad;
  }
  // A log file that is a symbolic link (to another file) is not followed.
  std::filesystem::create_directories(state + "/jobs/9");
  std::filesystem::create_symlink(state + "/secret", state + "/jobs/9/stdout.log");
  Result<LogSlice> link = ReadJobLogSlice(state, state + "/jobs/9/stdout.log", 0, 10);
  EXPECT_FALSE(link.ok());
  // A job directory that is a link to elsewhere is outside the jobs directory.
  std::filesystem::create_directories(state + "/elsewhere");
  ASSERT_TRUE(WriteFileDurably(state + "/elsewhere/stdout.log", "x", 0600).ok());
  std::filesystem::create_directory_symlink(state + "/elsewhere", state + "/jobs/10");
  EXPECT_EQ(ReadJobLogSlice(state, state + "/jobs/10/stdout.log", 0, 10).status().code(),
            StatusCode::kPermissionDenied);
  std::filesystem::remove_all(state);
}

}  // namespace
}  // namespace gpupool::agent
