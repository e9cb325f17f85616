#include "agent/job_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "common/file_util.h"
#include "common/json.h"
#include "common/strings.h"

namespace gpupool::agent {

namespace {

// Readers accept unknown fields: a shim started by one agent version may be adopted by
// the next, and files must stay readable across such an upgrade.

OrderedJson MountToJson(const BindMount& m) {
  OrderedJson j;
  j["source"] = m.source;
  j["target"] = m.target;
  j["read_only"] = m.read_only;
  return j;
}

Status MountFromJson(const Json& j, const std::string& path, BindMount* m) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": expected an object");
  JsonFields f(j, path, /*reject_unknown=*/false);
  f.Required("source", &m->source);
  f.Required("target", &m->target);
  f.Optional("read_only", &m->read_only);
  return f.Finish();
}

OrderedJson ContainerToJson(const ContainerOptions& c) {
  OrderedJson j;
  j["podman"] = c.podman;
  j["global_args"] = c.global_args;
  j["runtime"] = c.runtime;
  j["ulimits"] = c.ulimits;
  j["pull"] = c.pull;
  j["network"] = c.network;
  j["note"] = c.note;
  j["unavailable"] = c.unavailable;
  return j;
}

Status ContainerFromJson(const Json& j, const std::string& path, ContainerOptions* c) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": expected an object");
  JsonFields f(j, path, /*reject_unknown=*/false);
  f.Optional("podman", &c->podman);
  f.Optional("global_args", &c->global_args);
  f.Optional("runtime", &c->runtime);
  f.Optional("ulimits", &c->ulimits);
  f.Optional("pull", &c->pull);
  f.Optional("network", &c->network);
  f.Optional("note", &c->note);
  f.Optional("unavailable", &c->unavailable);
  return f.Finish();
}

// A run's identity, as every file of its directory carries it: {"job", "task", "attempt",
// "exec"}.
OrderedJson RunIdToJson(const RunId& id) {
  OrderedJson j;
  j["job"] = id.job;
  j["task"] = id.task;
  j["attempt"] = id.attempt;
  j["exec"] = id.exec;
  return j;
}

Status RunIdFromJson(const Json& j, const std::string& path, RunId* id) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": expected an object");
  JsonFields f(j, path, /*reject_unknown=*/false);
  f.Required("job", &id->job, 1);
  f.Optional("task", &id->task, 0, 1 << 20);
  f.Required("attempt", &id->attempt, 0);
  f.Optional("exec", &id->exec, 0);
  return f.Finish();
}

// The run a file names: its "run", or (a file of the previous layout, written by an
// older agent or shim) its launcher key "job_id" with "attempt", and for a spec the
// job and task the key stood for.
Status ReadRunId(JsonFields& f, const std::string& source, RunId* id) {
  if (const Json* run = f.Member("run"); run != nullptr) {
    return RunIdFromJson(*run, source + ": run", id);
  }
  int64_t key = 0;
  int attempt = 0;
  int64_t job = 0;
  int task = 0;
  f.Required("job_id", &key, 1);
  f.Required("attempt", &attempt, 0);
  f.Optional("pool_job_id", &job, 0);
  f.Optional("task_index", &task, 0, 1 << 20);
  *id = LegacyRunId(key, job != 0 ? job : key, task, attempt);
  return Status::Ok();
}

Status JobUserFromJson(const Json& j, const std::string& path, JobUser* user) {
  JsonFields uf(j, path, /*reject_unknown=*/false);
  uf.Required("known", &user->known);
  uf.Optional("home", &user->home);
  uf.Optional("shell", &user->shell);
  const Json* groups = uf.Array("groups");
  GP_RETURN_IF_ERROR(uf.Finish());
  for (size_t i = 0; groups != nullptr && i < groups->size(); ++i) {
    const Json& g = (*groups)[i];
    if (!g.is_number_unsigned() || g.get<uint64_t>() > UINT32_MAX - 1) {
      return Status::InvalidArgument(path + ".groups[" + std::to_string(i) +
                                     "]: expected a group id (0 to 4294967294)");
    }
    user->groups.push_back(static_cast<uint32_t>(g.get<uint64_t>()));
  }
  if (user->groups.empty()) {
    return Status::InvalidArgument(path + ".groups: empty; expected at least the job's group");
  }
  return Status::Ok();
}

void PutOptionalInt(OrderedJson& j, const char* key, const std::optional<int>& v) {
  if (v.has_value()) {
    j[key] = *v;
  } else {
    j[key] = nullptr;
  }
}

}  // namespace

std::string ShimConfigToJson(const ShimConfig& config) {
  const LaunchSpec& s = config.spec;
  OrderedJson j;
  j["run"] = RunIdToJson(s.id);
  j["num_tasks"] = s.num_tasks;
  if (!s.pool_env.empty()) {
    OrderedJson pool_env = OrderedJson::object();
    for (const auto& [k, v] : s.pool_env) pool_env[k] = v;
    j["pool_env"] = std::move(pool_env);
  }
  if (!s.hostfile.empty()) j["hostfile"] = s.hostfile;
  if (!s.join_cgroups.empty()) j["join_cgroups"] = s.join_cgroups;
  if (s.join_job_pid > 0) {
    j["join_job_pid"] = s.join_job_pid;
    j["join_job_start_ticks"] = s.join_job_start_ticks;
  }
  j["user"] = s.user;
  j["uid"] = s.uid;
  j["gid"] = s.gid;
  j["argv"] = s.argv;
  OrderedJson env = OrderedJson::object();
  for (const auto& [k, v] : s.env) env[k] = v;
  j["env"] = std::move(env);
  j["workdir"] = s.workdir;
  OrderedJson gpus = OrderedJson::array();
  for (const GpuGrant& g : s.gpus) gpus.push_back(protocol::EncodeGpuGrant(g));
  j["gpus"] = std::move(gpus);
  j["denied_device_nodes"] = s.denied_device_nodes;
  j["require_device_isolation"] = s.require_device_isolation;
  if (!s.private_dev_shm) j["private_dev_shm"] = false;
  j["cpu_milli"] = s.cpu_milli;
  j["memory_bytes"] = s.memory_bytes;
  j["time_limit_s"] = s.time_limit_s;
  j["grace_s"] = s.grace_s;
  if (s.warn_signal != 0) {
    j["warn_signal"] = s.warn_signal;
    j["warn_time_s"] = s.warn_time_s;
    if (s.warn_main_only) j["warn_main_only"] = true;
  }
  if (s.preemptible) j["preemptible"] = true;
  j["image"] = s.image;
  OrderedJson mounts = OrderedJson::array();
  for (const BindMount& m : s.mounts) mounts.push_back(MountToJson(m));
  j["mounts"] = std::move(mounts);
  j["cdi_devices"] = s.cdi_devices;
  j["shm_bytes"] = s.shm_bytes;
  j["init"] = s.init;
  if (s.stdio_relayed) j["stdio_relayed"] = true;
  if (s.tty) j["tty"] = true;
  j["env_dir"] = s.env_dir;
  if (!s.share_enforcement.empty()) {
    j["share_enforcement"] = s.share_enforcement;
    j["share_memory_bytes"] = s.share_memory_bytes;
  }
  if (!s.mps_pipe_dir.empty()) j["mps_pipe_dir"] = s.mps_pipe_dir;
  if (!s.dmem_region.empty()) j["dmem_region"] = s.dmem_region;
  if (!s.nvml_library.empty()) j["nvml_library"] = s.nvml_library;
  if (!s.cu_mask.empty()) j["cu_mask"] = s.cu_mask;
  if (!s.script.empty()) j["script"] = s.script;
  if (!s.stdout_file.empty()) j["stdout_file"] = s.stdout_file;
  if (!s.stderr_file.empty()) j["stderr_file"] = s.stderr_file;
  if (!s.lease_file.empty()) j["lease_file"] = s.lease_file;
  if (s.lease_grace_s > 0) j["lease_grace_s"] = s.lease_grace_s;
  if (!s.node_name.empty()) j["node_name"] = s.node_name;
  j["cgroup_root"] = config.cgroup_root;
  j["container"] = ContainerToJson(config.container);
  if (config.user) {
    OrderedJson u;
    u["known"] = config.user->known;
    u["home"] = config.user->home;
    u["shell"] = config.user->shell;
    u["groups"] = config.user->groups;
    j["job_user"] = std::move(u);
  }
  return DumpJson(j, 2);
}

Result<ShimConfig> ShimConfigFromJson(const std::string& text, const std::string& source) {
  GP_ASSIGN_OR_RETURN(Json j, ParseJson(text, source));
  if (!j.is_object()) return Status::InvalidArgument(source + ": expected a JSON object");
  ShimConfig config;
  LaunchSpec& s = config.spec;
  JsonFields f(j, source, /*reject_unknown=*/false);
  GP_RETURN_IF_ERROR(ReadRunId(f, source, &s.id));
  f.Optional("num_tasks", &s.num_tasks, 1, 1 << 20);
  if (const Json* env = f.Member("pool_env"); env != nullptr) {
    if (!env->is_object()) {
      f.Fail("pool_env", "expected an object of strings");
    } else {
      for (auto it = env->begin(); it != env->end(); ++it) {
        if (!it.value().is_string()) {
          f.Fail("pool_env." + it.key(), "expected a string");
          break;
        }
        s.pool_env[it.key()] = it.value().get<std::string>();
      }
    }
  }
  f.Optional("hostfile", &s.hostfile);
  f.Optional("join_cgroups", &s.join_cgroups);
  f.Optional("join_job_pid", &s.join_job_pid, 0, INT32_MAX);
  f.Optional("join_job_start_ticks", &s.join_job_start_ticks);
  f.Required("user", &s.user);
  int64_t uid = 0;
  int64_t gid = 0;
  f.Required("uid", &uid, 0, UINT32_MAX - 1);
  f.Required("gid", &gid, 0, UINT32_MAX - 1);
  s.uid = static_cast<uint32_t>(uid);
  s.gid = static_cast<uint32_t>(gid);
  f.Optional("argv", &s.argv);
  if (const Json* env = f.Member("env"); env != nullptr) {
    if (!env->is_object()) {
      f.Fail("env", "expected an object of strings");
    } else {
      for (auto it = env->begin(); it != env->end(); ++it) {
        if (!it.value().is_string()) {
          f.Fail("env." + it.key(), "expected a string");
          break;
        }
        s.env[it.key()] = it.value().get<std::string>();
      }
    }
  }
  f.Optional("workdir", &s.workdir);
  if (const Json* gpus = f.Array("gpus"); gpus != nullptr) {
    for (size_t i = 0; i < gpus->size(); ++i) {
      Result<GpuGrant> g =
          protocol::DecodeGpuGrant((*gpus)[i], f.PathOf("gpus") + "[" + std::to_string(i) + "]");
      if (!g.ok()) return g.status();
      s.gpus.push_back(std::move(*g));
    }
  }
  f.Optional("denied_device_nodes", &s.denied_device_nodes);
  f.Optional("require_device_isolation", &s.require_device_isolation);
  f.Optional("private_dev_shm", &s.private_dev_shm);
  f.Optional("cpu_milli", &s.cpu_milli, 0);
  f.Optional("memory_bytes", &s.memory_bytes);
  f.Optional("time_limit_s", &s.time_limit_s, 0);
  f.Optional("grace_s", &s.grace_s, 0, int64_t{24} * 3600);
  f.Optional("warn_signal", &s.warn_signal, 0, 64);
  f.Optional("warn_time_s", &s.warn_time_s, 0, 65535);
  f.Optional("warn_main_only", &s.warn_main_only);
  f.Optional("preemptible", &s.preemptible);
  f.Optional("image", &s.image);
  if (const Json* mounts = f.Array("mounts"); mounts != nullptr) {
    for (size_t i = 0; i < mounts->size(); ++i) {
      BindMount m;
      GP_RETURN_IF_ERROR(
          MountFromJson((*mounts)[i], f.PathOf("mounts") + "[" + std::to_string(i) + "]", &m));
      s.mounts.push_back(std::move(m));
    }
  }
  f.Optional("cdi_devices", &s.cdi_devices);
  f.Optional("shm_bytes", &s.shm_bytes);
  f.Optional("init", &s.init);
  f.Optional("stdio_relayed", &s.stdio_relayed);
  f.Optional("script", &s.script);
  f.Optional("stdout_file", &s.stdout_file);
  f.Optional("stderr_file", &s.stderr_file);
  f.Optional("lease_file", &s.lease_file);
  f.Optional("lease_grace_s", &s.lease_grace_s, 0, int64_t{24} * 3600);
  f.Optional("node_name", &s.node_name);
  f.Optional("tty", &s.tty);
  f.Optional("env_dir", &s.env_dir);
  f.Optional("share_enforcement", &s.share_enforcement);
  f.Optional("share_memory_bytes", &s.share_memory_bytes);
  f.Optional("mps_pipe_dir", &s.mps_pipe_dir);
  f.Optional("dmem_region", &s.dmem_region);
  f.Optional("nvml_library", &s.nvml_library);
  f.Optional("cu_mask", &s.cu_mask);
  f.Optional("cgroup_root", &config.cgroup_root);
  if (const Json* c = f.Member("container"); c != nullptr) {
    GP_RETURN_IF_ERROR(ContainerFromJson(*c, f.PathOf("container"), &config.container));
  }
  if (const Json* u = f.Member("job_user"); u != nullptr) {
    JobUser user;
    GP_RETURN_IF_ERROR(JobUserFromJson(*u, f.PathOf("job_user"), &user));
    config.user = std::move(user);
  }
  GP_RETURN_IF_ERROR(f.Finish());
  if (s.argv.empty()) return Status::InvalidArgument(source + ": argv: the command is empty");
  return config;
}

std::string ShimRecordToJson(const ShimRecord& r) {
  OrderedJson j;
  j["run"] = RunIdToJson(r.id);
  j["pid"] = r.pid;
  j["start_ticks"] = r.start_ticks;
  j["boot_id"] = r.boot_id;
  j["job_pid"] = r.job_pid;
  j["job_start_ticks"] = r.job_start_ticks;
  j["start_time_us"] = r.start_time_us;
  j["isolation"] = r.isolation;
  j["cgroup_dirs"] = r.cgroup_dirs;
  if (r.signal_requests) j["signal_requests"] = true;
  return DumpJson(j, 2);
}

Result<ShimRecord> ShimRecordFromJson(const std::string& text, const std::string& source) {
  GP_ASSIGN_OR_RETURN(Json j, ParseJson(text, source));
  if (!j.is_object()) return Status::InvalidArgument(source + ": expected a JSON object");
  ShimRecord r;
  JsonFields f(j, source, /*reject_unknown=*/false);
  GP_RETURN_IF_ERROR(ReadRunId(f, source, &r.id));
  f.Required("pid", &r.pid, 1);
  f.Required("start_ticks", &r.start_ticks);
  f.Optional("boot_id", &r.boot_id);
  f.Optional("job_pid", &r.job_pid, 0);
  f.Optional("job_start_ticks", &r.job_start_ticks);
  f.Optional("start_time_us", &r.start_time_us, 0);
  f.Optional("isolation", &r.isolation);
  f.Optional("cgroup_dirs", &r.cgroup_dirs);
  f.Optional("signal_requests", &r.signal_requests);
  GP_RETURN_IF_ERROR(f.Finish());
  return r;
}

std::string FinalStatusToJson(const FinalStatus& s) {
  OrderedJson j;
  j["run"] = RunIdToJson(s.id);
  j["started"] = s.started;
  j["start_time_us"] = s.start_time_us;
  j["end_time_us"] = s.end_time_us;
  PutOptionalInt(j, "exit_code", s.exit_code);
  PutOptionalInt(j, "signal", s.signal);
  j["timed_out"] = s.timed_out;
  j["cancelled"] = s.cancelled;
  j["reason"] = s.reason;
  j["isolation"] = s.isolation;
  if (s.kill_cause) j["kill_cause"] = protocol::KillCauseName(*s.kill_cause);
  if (!s.kill_detail.empty()) j["kill_detail"] = s.kill_detail;
  if (s.node_fault) j["node_fault"] = true;
  return DumpJson(j, 2);
}

Result<FinalStatus> FinalStatusFromJson(const std::string& text, const std::string& source) {
  GP_ASSIGN_OR_RETURN(Json j, ParseJson(text, source));
  if (!j.is_object()) return Status::InvalidArgument(source + ": expected a JSON object");
  FinalStatus s;
  JsonFields f(j, source, /*reject_unknown=*/false);
  GP_RETURN_IF_ERROR(ReadRunId(f, source, &s.id));
  f.Required("started", &s.started);
  f.Optional("start_time_us", &s.start_time_us, 0);
  f.Optional("end_time_us", &s.end_time_us, 0);
  f.Optional("exit_code", &s.exit_code, 0, 255);
  f.Optional("signal", &s.signal, 1, 128);
  f.Optional("timed_out", &s.timed_out);
  f.Optional("cancelled", &s.cancelled);
  f.Optional("reason", &s.reason);
  f.Optional("isolation", &s.isolation);
  const bool has_cause = f.Member("kill_cause") != nullptr;
  std::string cause;
  f.Optional("kill_cause", &cause);
  f.Optional("kill_detail", &s.kill_detail);
  f.Optional("node_fault", &s.node_fault);
  GP_RETURN_IF_ERROR(f.Finish());
  // A newer shim's name is reported as unknown (the controller then reads the reason).
  if (has_cause)
    s.kill_cause = protocol::ParseKillCause(cause).value_or(protocol::KillCause::kUnknown);
  return s;
}

JobEvent EventFromFinalStatus(const FinalStatus& s, const RunId& id, const std::string& dir) {
  JobEvent e;
  e.id = id;
  e.dir = dir;
  e.kind = s.started ? JobEvent::Kind::kExited : JobEvent::Kind::kFailed;
  if (!s.started && s.node_fault) {  // the node's fault: the job goes back to the queue
    e.kind = JobEvent::Kind::kLost;
    e.not_started = true;
  }
  e.time_us = s.end_time_us;
  e.start_time_us = s.start_time_us;
  e.exit_code = s.exit_code;
  e.signal = s.signal;
  e.timed_out = s.timed_out;
  e.cancelled = s.cancelled;
  e.reason = s.reason;
  e.isolation = s.isolation;
  e.kill_cause = s.kill_cause;
  e.kill_detail = s.kill_detail;
  return e;
}

Status WriteFileDurably(const std::string& path, const std::string& contents, mode_t mode,
                        bool sync) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) {
    return Status::Unavailable("cannot create '" + tmp + "': " + std::strerror(errno));
  }
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::Unavailable("cannot write '" + tmp + "': " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  // The umask may have narrowed the mode at creation; make it exact.
  if (::fchmod(fd, mode) != 0 || (sync && ::fsync(fd) != 0)) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::Unavailable("cannot sync '" + tmp + "': " + std::strerror(err));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::Unavailable("cannot rename '" + tmp + "' to '" + path +
                               "': " + std::strerror(err));
  }
  return Status::Ok();
}

Status RewriteFileLocked(const std::string& path, const std::string& contents, bool lock) {
  // Unlocked, the file may be a job user's, who may hold a lease on it (F_SETLEASE), which
  // would block an open for writing for up to the kernel's lease-break-time: not waited for.
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | (lock ? 0 : O_NONBLOCK));
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("'" + path + "' does not exist");
    return Status::Unavailable("cannot open '" + path + "': " + std::strerror(err));
  }
  while (lock && ::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  size_t done = 0;
  int err = 0;
  while (done < contents.size()) {
    ssize_t n =
        ::pwrite(fd, contents.data() + done, contents.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && ::ftruncate(fd, static_cast<off_t>(contents.size())) != 0) err = errno;
  ::close(fd);  // releases the lock
  if (err != 0) return Status::Unavailable("cannot write '" + path + "': " + std::strerror(err));
  return Status::Ok();
}

namespace {

// Reads `path` under a shared flock, so that a RewriteFileLocked in progress is never
// seen half done.
Result<std::string> ReadFileLocked(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("'" + path + "' does not exist");
    return Status::Unavailable("cannot open '" + path + "': " + std::strerror(err));
  }
  while (::flock(fd, LOCK_SH) != 0 && errno == EINTR) {
  }
  std::string text;
  char buf[4096];
  int err = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      return Status::Unavailable("'" + path + "' is larger than " + std::to_string(max_bytes) +
                                 " bytes");
    }
  }
  ::close(fd);
  if (err != 0) return Status::Unavailable("cannot read '" + path + "': " + std::strerror(err));
  return text;
}

Result<std::string> ReadJobFile(const std::string& job_dir, const char* name) {
  const std::string path = job_dir + "/" + name;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return Status::NotFound("'" + path + "' does not exist");
  }
  return ReadFileToString(path, 16u << 20);
}

}  // namespace

Result<ShimConfig> ReadShimConfig(const std::string& job_dir) {
  GP_ASSIGN_OR_RETURN(std::string text, ReadJobFile(job_dir, kSpecFile));
  return ShimConfigFromJson(text, job_dir + "/" + kSpecFile);
}

Result<ShimRecord> ReadShimRecord(const std::string& job_dir) {
  GP_ASSIGN_OR_RETURN(std::string text, ReadFileLocked(job_dir + "/" + kShimFile, 1u << 20));
  return ShimRecordFromJson(text, job_dir + "/" + kShimFile);
}

Result<FinalStatus> ReadFinalStatus(const std::string& job_dir) {
  GP_ASSIGN_OR_RETURN(std::string text, ReadJobFile(job_dir, kStatusFile));
  return FinalStatusFromJson(text, job_dir + "/" + kStatusFile);
}

namespace {

// Whether `dir` (resolved, without links) is a run's directory under `jobs_dir` (resolved):
// JOBS_DIR/<job>/<RunDirName>, or JOBS_DIR/<name> one level below (the previous layout).
bool IsRunDirectory(const std::string& jobs_dir, const std::string& dir) {
  if (dir.size() <= jobs_dir.size() + 1 || dir.compare(0, jobs_dir.size(), jobs_dir) != 0 ||
      dir[jobs_dir.size()] != '/') {
    return false;
  }
  const std::string rest = dir.substr(jobs_dir.size() + 1);
  const size_t slash = rest.find('/');
  if (slash == std::string::npos) return true;  // the previous layout
  const std::string job = rest.substr(0, slash);
  const std::string run = rest.substr(slash + 1);
  std::optional<int64_t> id = ParseInt64(job);
  return id.has_value() && *id > 0 && std::to_string(*id) == job && IsRunDirName(run);
}

}  // namespace

namespace {

// Bytes of `file` (named `path` in errors): a regular file reached without a link in its
// last component, of `owner` when given.
Result<LogSlice> ReadSlice(const std::string& file, const std::string& path,
                           std::optional<uint32_t> owner, int64_t offset, int64_t max_bytes) {
  int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no file '" + path + "' on this node");
    if (errno == ELOOP) return Status::PermissionDenied("'" + path + "' is a symbolic link");
    return Status::Unavailable("cannot open '" + path + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::PermissionDenied("'" + path + "' is not a regular file");
  }
  if (owner && st.st_uid != *owner) {
    ::close(fd);
    return Status::PermissionDenied("'" + path + "' no longer belongs to the job's user");
  }
  LogSlice out;
  out.size = st.st_size;
  if (offset < out.size && max_bytes > 0) {
    out.data.resize(static_cast<size_t>(std::min<int64_t>(out.size - offset, max_bytes)));
    size_t done = 0;
    while (done < out.data.size()) {
      ssize_t n = ::pread(fd, out.data.data() + done, out.data.size() - done,
                          static_cast<off_t>(offset + static_cast<int64_t>(done)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return Status::Unavailable("cannot read '" + path + "': " + std::strerror(err));
      }
      if (n == 0) break;  // truncated meanwhile
      done += static_cast<size_t>(n);
    }
    out.data.resize(done);
  }
  ::close(fd);
  return out;
}

}  // namespace

Result<LogSlice> ReadJobLogSlice(const std::string& state_dir, const std::string& path,
                                 int64_t offset, int64_t max_bytes) {
  const size_t slash = path.find_last_of('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (slash == std::string::npos || (name != kStdoutFile && name != kStderrFile)) {
    return Status::PermissionDenied("'" + path + "' is not a job's stdout or stderr file");
  }
  char real_jobs[PATH_MAX];
  char real_dir[PATH_MAX];
  if (::realpath((state_dir + "/jobs").c_str(), real_jobs) == nullptr) {
    return Status::NotFound("this node has no job directory under '" + state_dir + "'");
  }
  if (::realpath(path.substr(0, slash).c_str(), real_dir) == nullptr) {
    return Status::NotFound("no job directory '" + path.substr(0, slash) + "' on this node");
  }
  // The file's directory must be a run's: JOBS/<job>/<run> (run_id.h), or JOBS/<key> of
  // the previous layout, whose ended jobs' records still name their logs there.
  const std::string jobs_dir = real_jobs;
  const std::string dir = real_dir;
  if (!IsRunDirectory(jobs_dir, dir)) {
    return Status::PermissionDenied("'" + path + "' is not inside a job directory of this node");
  }
  return ReadSlice(dir + "/" + name, path, std::nullopt, offset, max_bytes);
}

Result<LogSlice> ReadOutputFileSlice(const std::string& path, std::optional<uint32_t> owner,
                                     int64_t offset, int64_t max_bytes) {
  if (path.empty() || path[0] != '/') {
    return Status::PermissionDenied("'" + path + "' is not an absolute path");
  }
  return ReadSlice(path, path, owner, offset, max_bytes);
}

}  // namespace gpupool::agent
