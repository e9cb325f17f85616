// AgentLoop's exec sessions (agent_loop.h; `gpupool exec`, mpirun's rsh agent, the
// command of `gpupool run`): each runs as a launcher run of its own in its task's
// cgroups and mount namespace. A session is refused when its cancel or its job's came
// first (a cancel read before its request is remembered), or when its task does not run
// here; one that started while such an order came is stopped at once; a task's end ends
// its sessions.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/job_files.h"
#include "agent/runtime/agent_loop.h"

namespace gpupool::agent {

void AgentLoop::StartExec(const protocol::ExecRequest& x) {
  const agent::TaskId task_id{x.job_id, x.task_index, x.attempt};
  const RunId id = RunId::ExecIn(task_id, x.id);
  agent::LaunchSpec spec;
  std::string task_dir;
  std::string error;
  bool cancelled = false;
  {
    std::lock_guard lock(mu_);
    if (!launched_.insert(id).second) return;  // resent
    cancelled = exec_cancelled_.count(x.id) != 0;
    error = cancelled ? "cancelled before it started" : ExecRefusalLocked(x);
    if (error.empty()) {
      const Held& task = held_.at(RunId::Of(task_id));
      spec = task.spec;
      task_dir = task.dir;
    }
  }
  if (!error.empty()) {
    FailLaunch(id, error, cancelled);
    return;
  }
  // The task's user, GPUs, device rules, limits and variables, in the task's own
  // cgroups; its own command.
  Result<agent::ShimRecord> task_shim = agent::ReadShimRecord(task_dir);
  if (task_shim.ok()) {
    spec.join_cgroups = task_shim->cgroup_dirs;  // and its /dev/shm (agent/job_mounts.h):
    spec.join_job_pid = task_shim->job_pid;
    spec.join_job_start_ticks = task_shim->job_start_ticks;
  }
  spec.id = id;
  spec.argv = x.argv;
  // Its output is its own, in its directory: not the task's script or output files.
  spec.script.clear();
  spec.stdout_file.clear();
  spec.stderr_file.clear();
  spec.time_limit_s = 0;  // it ends with its job (cancelled with it), and is not fenced
  spec.lease_file.clear();
  // GPUPOOL_HOSTFILE (and a container's mount of it) names the task's host file, written
  // when the task started: the session needs no copy of its own.
  spec.hostfile.clear();
  if (x.master_port > 0 && spec.pool_env.count("MASTER_PORT") == 0) {
    // A held task of an --mpi job started before task 0 had picked the port.
    spec.pool_env["PET_MASTER_PORT"] = std::to_string(x.master_port);
    spec.pool_env["MASTER_PORT"] = std::to_string(x.master_port);
  }
  if (!spec.image.empty()) {
    // A container task: the command runs in a container of the same image, GPUs and
    // mounts beside the task's.
    spec.pool_env.erase("OMPI_MCA_plm_rsh_agent");
  }
  std::unique_ptr<SessionStreams> streams;
  if (x.interactive()) {
    // Its terminal (or pipes) stay with this agent, relayed to the controller.
    Result<std::unique_ptr<SessionStreams>> made =
        MakeSessionStreams(x.tty, x.rows, x.cols, spec.uid);
    if (!made.ok()) {
      FailLaunch(id, made.status().message());
      return;
    }
    streams = std::move(*made);
    spec.stdio_relayed = true;
    spec.tty = x.tty;
    for (const auto& [name, value] : x.env) spec.env[name] = value;  // the client's terminal
  }
  const std::string dir = agent::JobDir(options_.state_dir, id);
  {
    std::lock_guard lock(mu_);
    held_[id] = {spec, dir};
    if (streams) relays_[id] = nullptr;
  }
  Status s = streams ? launcher_->Launch(spec, streams->child) : launcher_->Launch(spec);
  if (!s.ok()) {
    {
      std::lock_guard lock(mu_);
      relays_.erase(id);
      ended_before_relay_.erase(id);
    }
    FailLaunch(id, "could not start: " + s.message());
    return;
  }
  StopIfStaleExec(x, id);
  if (!streams) return;
  std::shared_ptr<ExecRelay> relay = ExecRelay::Start(
      x.id, options_.node_name, std::move(streams), link_,
      [dir] {
        Result<agent::ShimRecord> rec = agent::ReadShimRecord(dir);
        return rec.ok() ? static_cast<int>(rec->job_pid) : 0;
      },
      clock_);
  std::lock_guard lock(mu_);
  if (ended_before_relay_.erase(id) != 0 || stopping_) {
    relay->Finish();
    relays_.erase(id);
  } else {
    relays_[id] = std::move(relay);
  }
}

std::string AgentLoop::ExecRefusalLocked(const protocol::ExecRequest& x) const {
  const RunId task = RunId::Of({x.job_id, x.task_index, x.attempt});
  const std::string which =
      "task " + std::to_string(x.task_index) + " of job " + std::to_string(x.job_id);
  if (exec_cancelled_.count(x.id) != 0) return "cancelled before it started";
  if (cancelled_.count({x.job_id, x.attempt}) != 0) {
    return "job " + std::to_string(x.job_id) + " is stopping";
  }
  if (held_.count(task) == 0) return which + " does not run on node " + options_.node_name;
  // Held until its end is acknowledged: a session must not start in a task that ended.
  const std::vector<RunId> running = launcher_->Running();
  if (std::find(running.begin(), running.end(), task) == running.end()) {
    return which + " has ended on node " + options_.node_name;
  }
  return "";
}

void AgentLoop::StopIfStaleExec(const protocol::ExecRequest& x, const RunId& id) {
  std::string why;
  {
    std::lock_guard lock(mu_);
    why = ExecRefusalLocked(x);
  }
  if (why.empty()) return;
  spdlog::info("agent: {} started while it was told to stop ({}): stopping it", agent::ToString(id),
               why);
  if (Status s = launcher_->Cancel(id); !s.ok() && s.code() != StatusCode::kNotFound) {
    spdlog::warn("agent: cancel {}: {}", agent::ToString(id), s.message());
  }
}

void AgentLoop::StopExecSessionsOf(const RunId& task) {
  std::vector<RunId> sessions;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, held] : held_) {
      if (id.is_exec() && id.job == task.job && id.task == task.task &&
          id.attempt == task.attempt) {
        sessions.push_back(id);
      }
    }
  }
  if (sessions.empty()) return;
  const std::vector<RunId> running = launcher_->Running();
  for (const RunId& id : sessions) {
    if (std::find(running.begin(), running.end(), id) == running.end()) continue;
    spdlog::info("agent: stopping {}: its task has ended", agent::ToString(id));
    if (Status s = launcher_->Cancel(id); !s.ok() && s.code() != StatusCode::kNotFound) {
      spdlog::warn("agent: cancel {}: {}", agent::ToString(id), s.message());
    }
  }
}

void AgentLoop::RememberExecCancelLocked(int64_t exec_id) {
  if (!exec_cancelled_.insert(exec_id).second) return;
  exec_cancel_order_.push_back(exec_id);
  if (exec_cancel_order_.size() > kMaxExecCancels) {
    exec_cancelled_.erase(exec_cancel_order_.front());
    exec_cancel_order_.pop_front();
  }
}

void AgentLoop::SessionEndedLocked(const RunId& id) {
  auto it = relays_.find(id);
  if (it == relays_.end()) return;
  if (it->second == nullptr) {
    ended_before_relay_.insert(id);
    return;
  }
  it->second->Finish();
  relays_.erase(it);
}

}  // namespace gpupool::agent
