#include "agent/runtime/agent_loop.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "agent/cu_mask.h"
#include "agent/job_files.h"
#include "agent/runtime/agent_identity.h"
#include "agent/runtime/health_check.h"
#include "agent/runtime/rendezvous.h"
#include "common/file_util.h"
#include "common/strings.h"
#include "envcheck/needs.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"

namespace gpupool::agent {
namespace {

bool IsFinal(agent::JobEvent::Kind k) { return k != agent::JobEvent::Kind::kStarted; }

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

AgentLoop::AgentLoop(AgentLoopOptions options, std::shared_ptr<protocol::ControllerLink> link,
                     agent::Launcher* launcher)
    : options_(std::move(options)),
      kill_wait_s_(options_.cancel_grace_s),
      link_(std::move(link)),
      launcher_(launcher),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()) {
  if (options_.cpu_milli <= 0) options_.cpu_milli = sysconf(_SC_NPROCESSORS_ONLN) * 1000;
  if (options_.memory_mib <= 0) {
    options_.memory_mib =
        static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / int64_t{1 << 20};
  }
}

Status AgentLoop::Register() {
  // Jobs this node already runs (from before an agent restart) are reported back.
  GP_ASSIGN_OR_RETURN(std::vector<agent::JobEvent> adopted, launcher_->Adopt());
  protocol::Registration reg;
  reg.node = options_.node_name;
  reg.agent_id = options_.agent_id;
  reg.address = options_.address;
  reg.info = options_.node;
  reg.cpu_milli = options_.cpu_milli;
  reg.memory_mib = options_.memory_mib;
  {
    std::lock_guard lock(mu_);
    for (agent::JobEvent& ev : adopted) {
      launched_.insert(ev.id);
      if (!ev.id.is_exec()) current_[SlotOf(ev.id)] = ev.id.attempt;
      if (held_.count(ev.id) == 0) {
        // The spec it was started with (kept until the agent forgets the run).
        Result<agent::ShimConfig> c = agent::ReadShimConfig(ev.dir);
        if (c.ok()) held_[ev.id] = {c->spec, ev.dir};
      }
      if (auto h = held_.find(ev.id); h != held_.end() && !h->second.spec.stdout_file.empty()) {
        RememberOutputLocked(h->second.spec);
      }
      unsent_.push_back(ev);
    }
    // What runs here now (Adopt supervises the live shims again), not every task ever
    // launched: the controller stops the tasks it does not expect.
    const std::vector<RunId> live = launcher_->Running();
    for (const auto& [slot, attempt] : current_) {
      const RunId id{slot.first, slot.second, attempt, 0};
      if (std::find(live.begin(), live.end(), id) == live.end()) continue;
      reg.running.push_back({id.job, id.task, id.attempt});
    }
    // Ends not yet acknowledged: of tasks that ended while no agent watched (adopted
    // above), or while the controller was away. They are reported once registered; until
    // then the controller must not take those tasks for lost ones.
    for (const agent::JobEvent& ev : unsent_) {
      if (ev.id.is_exec() || !IsFinal(ev.kind)) continue;
      reg.ended.push_back({ev.id.job, ev.id.task, ev.id.attempt});
    }
  }
  // A task that ended while no agent watched ends the exec sessions still running in it.
  for (const agent::JobEvent& ev : adopted) {
    if (!ev.id.is_exec() && IsFinal(ev.kind)) StopExecSessionsOf(ev.id);
  }
  std::vector<int64_t> running;
  for (const protocol::RunningTask& t : reg.running) running.push_back(t.job_id);
  if (Status s = CheckNodeName(options_.state_dir, options_.node_name, running); !s.ok()) {
    incompatible_ = s;  // stops the agent: retrying cannot help until the operator acts
    return s;
  }
  GP_RETURN_IF_ERROR(StopStrays());  // before the node is reported with their GPUs free
  if (!mps_adopted_) {
    AdoptMpsClients();
    mps_adopted_ = true;
  }
  {
    // A verdict of the health program still to send: the controller places nothing here
    // until it has it (it follows the registration at once).
    std::lock_guard lock(health_mu_);
    reg.health_pending = unsent_health_.has_value();
  }
  // A controller too far from our protocol says so (its refusal carries its version, the
  // link answers it as a reply with that version): retrying cannot help, so Run stops.
  const int64_t sent_us = BootNow();  // the node lease counts from here (agent_lease.cc)
  Result<protocol::RegistrationReply> sent = link_->Register(reg);
  GP_ASSIGN_OR_RETURN(protocol::RegistrationReply reply, std::move(sent));
  incompatible_ = protocol::CheckCompatible(protocol::kVersion, reply.version, "the controller",
                                            "this agent (node " + options_.node_name + ")");
  GP_RETURN_IF_ERROR(incompatible_);
  RecordNodeName(options_.state_dir, options_.node_name);
  controller_minor_ = reply.version.major == 1 ? reply.version.minor : 99;
  RenewLease(sent_us, reply.node_lease_ms);
  // The pool's stop grace for the tasks started from now on (running ones keep theirs).
  kill_wait_s_ = reply.kill_wait_s > 0 ? reply.kill_wait_s : options_.cancel_grace_s;
  {
    // Together, as the disk watch reads them: it reports once after each registration.
    std::lock_guard lock(telemetry_mu_);
    registered_ = true;
    ++registrations_;
  }
  SendHealth();  // the health check's verdict, before work comes (a failure is retried)
  telemetry_cv_.notify_all();
  spdlog::info(
      "agent: node {} registered with {} GPUs ({} jobs adopted), address {}, controller "
      "protocol {}",
      options_.node_name, options_.node.gpus.size(), adopted.size(), reply.address,
      protocol::VersionString(reply.version));
  return Status::Ok();
}

void AgentLoop::Launch(const protocol::LaunchOrder& order) {
  const jobs::Job& job = order.job;
  const protocol::Rendezvous& rdzv = order.rendezvous;
  const RunId id{job.id, order.task_index, job.attempt, 0};
  const TaskSlot slot = SlotOf(id);
  {
    std::lock_guard lock(mu_);
    if (auto held = current_.find(slot); held != current_.end() && held->second != job.attempt) {
      if (held->second > job.attempt) return;  // an order of an attempt already replaced
      DeferLocked(order, id, held->second);
      return;
    }
    if (!launched_.insert(id).second) return;  // resent order
    if (cancelled_.count({job.id, job.attempt}) != 0) {
      FailLaunchLocked(id, "cancelled before it started", /*cancelled=*/true);
      return;
    }
  }
  agent::LaunchSpec spec;
  spec.id = id;
  spec.num_tasks = rdzv.num_tasks;
  spec.user = job.user;
  spec.uid = job.uid;
  spec.gid = job.gid;
  spec.argv = job.command;
  spec.env = job.env;
  spec.workdir = job.workdir;
  // The first task on a node of a gang held for mpirun runs all the node's ranks: the
  // limits of every task it covers (its GPUs came in the order).
  const auto covered = static_cast<int64_t>(std::max<size_t>(1, order.node_tasks.size()));
  spec.cpu_milli = job.request.cpu_milli * covered;
  spec.memory_bytes = job.request.memory_bytes * static_cast<uint64_t>(covered);
  spec.time_limit_s = job.time_limit_s;
  spec.grace_s = kill_wait_s_;
  spec.warn_signal = job.warn_signal;
  spec.warn_time_s = job.warn_time_s;
  spec.warn_main_only = job.warn_main_only;
  spec.preemptible = job.preemptible;
  spec.lease_file = LeaseFileFor(job);  // fenced by the node lease (agent_lease.cc)
  spec.lease_grace_s = LeaseGraceFor(job);
  spec.node_name = options_.node_name;  // the shim's messages name the node as ours do
  spec.image = job.image;
  spec.shm_bytes = job.shm_bytes;
  spec.init = job.init;
  for (const jobs::Mount& m : job.mounts) spec.mounts.push_back({m.source, m.target, m.read_only});
  spec.env_dir = job.env_dir;
  spec.gpus = order.gpus;
  spec.denied_device_nodes = order.denied_device_nodes;
  spec.require_device_isolation = !spec.denied_device_nodes.empty() &&
                                  !options_.allow_unisolated_devices && !options_.fake_node;
  // The rendezvous: task 0 picks the port its peers will meet it on.
  protocol::Rendezvous r = rdzv;
  if (r.task_index == 0 && r.master_port == 0) {
    Result<int> port = PickFreePort();
    if (!port.ok()) {
      FailLaunch(id, port.status().message());
      return;
    }
    r.master_port = *port;
  }
  const std::string dir = agent::JobDir(options_.state_dir, id);
  const std::string hostfile = dir + "/" + agent::kHostFile;
  spec.hostfile = HostfileText(r);
  spec.pool_env =
      RendezvousEnv(r, {hostfile, options_.exec_agent, options_.server_for_jobs, job.mpi});
  if (!spec.image.empty()) {
    spec.mounts.push_back({hostfile, hostfile, /*read_only=*/true});
    spec.pool_env.erase("OMPI_MCA_plm_rsh_agent");  // no gpupool binary in the image
    spec.pool_env.erase("GPUPOOL_SERVER");
  }
  if ((job.mpi && r.task_index > 0) || !job.interactive.empty()) {
    // Held for mpirun's daemons or an interactive job's commands (gpupool exec, and the
    // command of gpupool run): the task runs nothing of its own.
    // (In its image, for an image job: exec'd commands run in containers of that image.)
    spec.argv = {"sleep", "infinity"};
  } else if (Status io = BatchIo(job, r.task_index, &spec); !io.ok()) {
    FailLaunch(id, io.message());
    return;
  } else if (!spec.stdout_file.empty()) {
    std::lock_guard lock(mu_);
    RememberOutputLocked(spec);
  }
  if (!spec.image.empty() || !spec.gpus.empty()) {
    if (Status pre = PrepareContainerJob(job, &spec); !pre.ok()) {
      FailLaunch(id, pre.message());
      return;
    }
  }
  if (Status share = PrepareShare(job, &spec); !share.ok()) {
    FailLaunch(id, share.message());
    return;
  }
  {
    std::lock_guard lock(mu_);
    AssignCuMaskLocked(&spec);
    held_[id] = {spec, dir};
    current_[slot] = job.attempt;
  }
  Status s = launcher_->Launch(spec);
  if (!s.ok()) {
    if (options_.mps != nullptr) (void)options_.mps->Release(id);
    // A request the launcher refuses is the job's (or the controller's) to hear; anything
    // else (its files cannot be written, its supervisor cannot start) is this node's fault.
    if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kAlreadyExists) {
      FailLaunch(id, "could not launch: " + s.message());
    } else {
      NodeCannotLaunch(id, s.message());
    }
  }
}

void AgentLoop::DeferLocked(const protocol::LaunchOrder& order, const RunId& id,
                            int earlier_attempt) {
  const TaskSlot slot = SlotOf(id);
  const bool fresh = deferred_.count(slot) == 0;
  deferred_[slot] = order;
  if (!fresh) return;
  spdlog::info("agent: {} waits for attempt {} to end here", agent::ToString(id), earlier_attempt);
  const RunId earlier{id.job, id.task, earlier_attempt, 0};
  const std::vector<RunId> running = launcher_->Running();
  if (std::find(running.begin(), running.end(), earlier) != running.end()) {
    if (Status c = launcher_->Cancel(earlier); !c.ok() && c.code() != StatusCode::kNotFound) {
      spdlog::warn("agent: stopping {}: {}", agent::ToString(earlier), c.message());
    }
  }
}

void AgentLoop::FailLaunch(const RunId& id, const std::string& reason, bool cancelled) {
  std::lock_guard lock(mu_);
  FailLaunchLocked(id, reason, cancelled);
}

void AgentLoop::FailLaunchLocked(const RunId& id, const std::string& reason, bool cancelled) {
  // Nothing was started: report the failure as the task's end.
  agent::JobEvent ev;
  ev.id = id;
  ev.dir = agent::JobDir(options_.state_dir, id);
  ev.kind = agent::JobEvent::Kind::kFailed;
  ev.time_us = NowMicros();
  ev.reason = reason;
  ev.cancelled = cancelled;
  spdlog::info("agent: {} not started: {}", agent::ToString(id), reason);
  unsent_.push_back(std::move(ev));
}

void AgentLoop::NodeCannotLaunch(const RunId& id, const std::string& why) {
  // Nothing ran, and the fault is the node's: lost with not_started, so that the
  // controller puts the job back in the queue and takes the node out of service.
  agent::JobEvent ev;
  ev.id = id;
  ev.dir = agent::JobDir(options_.state_dir, id);
  ev.kind = agent::JobEvent::Kind::kLost;
  ev.not_started = true;
  ev.time_us = NowMicros();
  ev.reason = "node " + options_.node_name + " could not start it: " + why;
  spdlog::error("agent: {} not started, by a fault of this node: {}", agent::ToString(id), why);
  std::lock_guard lock(mu_);
  unsent_.push_back(std::move(ev));
}

Result<jobs::EnvNeeds> AgentLoop::NeedsOf(const jobs::Job& job) {
  if (!job.needs.empty() || job.image.empty()) return job.needs;
  GP_ASSIGN_OR_RETURN(std::string id, envcheck::ImageId(job.image, options_.container.global_args));
  {
    std::lock_guard lock(mu_);
    if (auto it = needs_by_image_id_.find(id); it != needs_by_image_id_.end()) return it->second;
  }
  GP_ASSIGN_OR_RETURN(jobs::EnvNeeds needs,
                      envcheck::InspectImageNeeds(job.image, options_.container.global_args, id));
  std::lock_guard lock(mu_);
  needs_by_image_id_[id] = needs;
  return needs;
}

Status AgentLoop::PrepareContainerJob(const jobs::Job& job, agent::LaunchSpec* spec) {
  const std::string& node = options_.node_name;
  if (!spec->image.empty() && !options_.container.unavailable.empty()) {
    return Status::FailedPrecondition("podman is not installed on node " + node + ": " +
                                      options_.container.unavailable);
  }
  if (!spec->image.empty() && !spec->gpus.empty()) {
    if (!options_.cdi_error.empty() || options_.cdi_kind.empty()) {
      return Status::FailedPrecondition(
          "node " + node + " cannot give GPUs to containers: the agent wrote no CDI spec (" +
          (options_.cdi_error.empty() ? std::string("no CDI kind configured")
                                      : options_.cdi_error) +
          ")");
    }
    for (const agent::GpuGrant& g : spec->gpus) {
      spec->cdi_devices.push_back(options_.cdi_kind + "=" +
                                  (g.uuid.empty() ? std::to_string(g.index) : g.uuid));
    }
  }
  // The environment's needs matter only to jobs that use the node's GPUs.
  if (spec->gpus.empty()) return Status::Ok();
  Result<jobs::EnvNeeds> needs = NeedsOf(job);
  if (!needs.ok()) {
    // Not fatal: the image may be pulled at run time, and podman then says what is wrong.
    spdlog::warn("agent: job {}: cannot inspect image '{}' to check its needs: {}", job.id,
                 job.image, needs.status().message());
    return Status::Ok();
  }
  return envcheck::CheckNeeds(*needs, envcheck::OfferFromNode(options_.node, node));
}

// Log reads the controller relays for `gpupool logs` (the files are on this node). Each
// answer is posted at once; a controller that gave up on one ignores it.
void AgentLoop::AnswerLogReads(const std::vector<protocol::LogRequest>& reads) {
  for (const protocol::LogRequest& read : reads) {
    // A batch job's output file is served only by the path this agent started it with.
    std::optional<std::optional<uint32_t>> output_owner;
    {
      std::lock_guard lock(mu_);
      if (auto o = output_files_.find(read.path); o != output_files_.end()) {
        output_owner = o->second;
      }
    }
    Result<agent::LogSlice> slice =
        output_owner
            ? agent::ReadOutputFileSlice(read.path, *output_owner, read.offset, read.max_bytes)
            : agent::ReadJobLogSlice(options_.state_dir, read.path, read.offset, read.max_bytes);
    protocol::LogAnswer answer;
    answer.node = options_.node_name;
    answer.id = read.id;
    if (slice.ok()) {
      answer.size = slice->size;
      answer.data = std::move(slice->data);
    } else {
      answer.status = slice.status();
      if (answer.status.code() == StatusCode::kPermissionDenied) {
        spdlog::warn("agent: log read refused: {}", answer.status.message());
      }
    }
    if (Status s = link_->AnswerLogRead(answer); !s.ok()) {
      spdlog::warn("agent: answering log read {}: {}", read.id, s.message());
    }
  }
}

std::vector<RunId> AgentLoop::RunsToCancelLocked(const protocol::CancelOrder& c) {
  std::vector<RunId> ids;
  if (c.exec_id != 0) {
    // Its request may still come (queued here, or sent again): it is refused then.
    RememberExecCancelLocked(c.exec_id);
    for (const RunId& id : launched_) {
      if (id.exec == c.exec_id) ids.push_back(id);
    }
    return ids;
  }
  // Launches of this job still queued here are refused from now on. An order for one task
  // (a preempted gang's task that said checkpoint-done) stops that task alone; the job's
  // own order refuses the launches.
  if (c.task < 0) cancelled_.insert({c.job_id, c.attempt});
  for (const RunId& id : launched_) {
    if (id.job != c.job_id || (c.attempt != 0 && id.attempt != c.attempt)) continue;
    if (c.task >= 0 && id.task != c.task) continue;
    // A task holds one attempt at a time: stopping another attempt of the same task
    // would stop the wrong one.
    auto held = current_.find(SlotOf(id));
    if (!id.is_exec() && held != current_.end() && held->second != id.attempt) continue;
    ids.push_back(id);
  }
  // A launch waiting for its earlier attempt to end is cancelled before it starts.
  for (auto d = deferred_.begin(); d != deferred_.end();) {
    const jobs::Job& j = d->second.job;
    if (j.id == c.job_id && (c.attempt == 0 || j.attempt == c.attempt) &&
        (c.task < 0 || d->first.second == c.task)) {
      const RunId id{j.id, d->first.second, j.attempt, 0};
      launched_.insert(id);
      FailLaunchLocked(id, "cancelled before it started", true);
      d = deferred_.erase(d);
    } else {
      ++d;
    }
  }
  return ids;
}

void AgentLoop::CancelOrdered(const protocol::CancelOrder& c) {
  std::vector<RunId> ids;
  {
    std::lock_guard lock(mu_);
    ids = RunsToCancelLocked(c);
  }
  const std::vector<RunId> running = launcher_->Running();
  for (const RunId& id : ids) {
    if (std::find(running.begin(), running.end(), id) == running.end()) continue;
    // A preemption's stop carries its grace and deadline (exec sessions just end).
    const Status s = c.grace_s >= 0 && !id.is_exec()
                         ? launcher_->Stop(id, StopRequest{c.grace_s, c.deadline_s})
                         : launcher_->Cancel(id);
    if (!s.ok() && s.code() != StatusCode::kNotFound) {
      spdlog::warn("agent: cancel {}: {}", agent::ToString(id), s.message());
    }
  }
}

// gpupool cancel --signal: at most once, as the controller sends it; what became of it is
// in the agent's log and the job's shim.log. Delivered at once or never: an order read
// long after the controller answered with it (the agent was frozen, a paused VM, or the
// answer was slow to come) is dropped, as its requester was told it may not arrive, and a
// signal much later would surprise them (job_signal.h).
void AgentLoop::SignalOrdered(const protocol::SignalOrder& o, int64_t age_ms) {
  const RunId id{o.job_id, o.task_index, o.attempt, 0};
  if (age_ms > protocol::kSignalOrderMaxAgeMs) {
    spdlog::warn(
        "agent: signal {} to {} dropped: it reached this agent {} ms after the controller "
        "sent it (more than {} ms: the agent was frozen or cut off meanwhile)",
        o.signal, agent::ToString(id), age_ms, protocol::kSignalOrderMaxAgeMs);
    return;
  }
  const Status s = launcher_->SignalJob(id, o.signal, o.main_only);
  if (!s.ok()) {
    spdlog::warn("agent: signal {} to {}: {}", o.signal, agent::ToString(id), s.message());
    return;
  }
  spdlog::info("agent: signal {} to {}{}", o.signal, agent::ToString(id),
               o.main_only ? " (its main process)" : "");
}

void AgentLoop::ApplyOrders(const protocol::Work& work, int64_t took_ms) {
  for (const protocol::Rejected& r : work.rejected) {
    spdlog::error("agent: unreadable {} from the controller: {}", r.what, r.error);
    if (r.job_id > 0 && r.what.rfind("launch", 0) == 0) {
      // The task is known: it fails with the reason rather than waiting forever.
      FailLaunch({r.job_id, r.task_index, r.attempt, 0},
                 "the launch order could not be read: " + r.error);
    }
  }
  // Signals before stops: a `cancel --signal` given before a cancel arrives with it in one
  // answer when the two came close together, and after the stop's SIGTERM a USR1 (save a
  // checkpoint) would come too late and a STOP freeze the job through its grace (red team
  // 8, finding 4). The shim keeps this order (Shim::TakeSignalRequests).
  for (const protocol::SignalOrder& o : work.signal) SignalOrdered(o, took_ms - o.held_ms);
  for (const protocol::CancelOrder& c : work.cancel) CancelOrdered(c);
  if (!work.logs.empty()) AnswerLogReads(work.logs);
}

Status AgentLoop::PollOnce() {
  int64_t sent_us = BootNow();
  Result<protocol::Work> work = link_->PollWork(options_.node_name, options_.poll_wait_ms);
  if (!work.ok()) {
    if (work.status().code() == StatusCode::kNotFound) registered_ = false;
    return work.status();
  }
  RenewLease(sent_us, lease_ms_);  // the controller knows this node: it answered the poll
  ApplyOrders(*work, (BootNow() - sent_us) / 1000);
  if (!work->launch.empty() || !work->exec.empty()) {
    // The answer may be old: an agent frozen (SIGSTOP, a paused VM) while its poll was
    // answered reads the launch only when it thaws, and a cancel given meanwhile waits at
    // the controller for the next poll; the task would start, and run until that cancel
    // came. So what the controller has now is taken first (a poll that does not wait):
    // its cancels refuse the launches of their jobs (cancelled_, checked by Launch), and
    // exec sessions whose own cancel (exec_cancelled_) or job's came, which are reported
    // ended, cancelled, without starting. The confirming answer's own launches and exec
    // requests are fresh, and go with these.
    sent_us = BootNow();
    if (Result<protocol::Work> now = link_->PollWork(options_.node_name, 0); now.ok()) {
      RenewLease(sent_us, lease_ms_);
      ApplyOrders(*now, (BootNow() - sent_us) / 1000);
      for (protocol::LaunchOrder& o : now->launch) work->launch.push_back(std::move(o));
      for (protocol::ExecRequest& x : now->exec) work->exec.push_back(std::move(x));
    } else if (now.status().code() == StatusCode::kNotFound) {
      registered_ = false;  // registers again; the launches go ahead as they did before
    }
  }
  if (!work->launch.empty() || !work->exec.empty()) {
    std::lock_guard lock(mu_);
    for (protocol::LaunchOrder& o : work->launch) launch_queue_.push_back({std::move(o), {}});
    for (protocol::ExecRequest& x : work->exec) launch_queue_.push_back({{}, std::move(x)});
    launch_cv_.notify_all();
  }
  return Status::Ok();
}

void AgentLoop::LaunchWorker() {
  while (true) {
    WorkItem item;
    {
      std::unique_lock lock(mu_);
      launch_cv_.wait_for(lock, std::chrono::milliseconds(200),
                          [this] { return stopping_ || !launch_queue_.empty(); });
      if (stopping_) return;
      if (launch_queue_.empty()) continue;
      item = std::move(launch_queue_.front());
      launch_queue_.pop_front();
    }
    if (item.launch) Launch(*item.launch);
    if (item.exec) StartExec(*item.exec);
  }
}

void AgentLoop::ToWire(const agent::JobEvent& ev, protocol::EventBatch* batch) {
  // Where its logs are: the run's directory, of either layout.
  const std::string dir = ev.dir.empty() ? agent::JobDir(options_.state_dir, ev.id) : ev.dir;
  if (ev.id.is_exec()) {
    protocol::ExecReport r;
    r.id = ev.id.exec;
    r.started = ev.kind == agent::JobEvent::Kind::kStarted || ev.start_time_us != 0;
    r.ended = IsFinal(ev.kind);
    r.exit_code = ev.exit_code;
    r.signal = ev.signal;
    if (ev.kind == agent::JobEvent::Kind::kFailed || ev.kind == agent::JobEvent::Kind::kLost) {
      r.error = ev.reason.empty() ? "it could not be started" : ev.reason;
    }
    if (ev.kind != agent::JobEvent::Kind::kLost) {
      r.stdout_path = dir + "/stdout.log";
      r.stderr_path = dir + "/stderr.log";
    }
    if (r.ended && r.started && ev.kind != agent::JobEvent::Kind::kLost) {
      // Little output goes with the end: the client's reads are then answered by the
      // controller, without a relay to this node each (docs/benchmarks.md, "Gang start-up").
      Result<std::string> out = ReadFileToString(r.stdout_path, protocol::kMaxInlineExecOutput);
      Result<std::string> err = ReadFileToString(r.stderr_path, protocol::kMaxInlineExecOutput);
      if (out.ok() && err.ok() && out->size() + err->size() <= protocol::kMaxInlineExecOutput) {
        r.output_complete = true;
        r.stdout_data = std::move(*out);
        r.stderr_data = std::move(*err);
      }
    }
    batch->exec.push_back(std::move(r));
    return;
  }
  protocol::Event e;
  e.job_id = ev.id.job;
  e.task_index = ev.id.task;
  e.attempt = ev.id.attempt;
  switch (ev.kind) {
    case agent::JobEvent::Kind::kStarted:
      e.kind = protocol::EventKind::kStarted;
      break;
    case agent::JobEvent::Kind::kExited:
    case agent::JobEvent::Kind::kFailed:
      e.kind = protocol::EventKind::kExited;
      break;
    case agent::JobEvent::Kind::kLost:
      e.kind = protocol::EventKind::kLost;
      break;
  }
  e.time_us = ev.time_us;
  e.exit_code = ev.exit_code;
  e.signal = ev.signal;
  e.timed_out = ev.timed_out;
  e.cancelled = ev.cancelled;
  e.reason = ev.reason;
  e.kill_cause = ev.kill_cause;
  e.kill_detail = ev.kill_detail;
  e.not_started = ev.not_started;
  if (ev.not_started) CheckDiskNow();  // the node's own writes failed: its disk, likely
  if (ev.kind != agent::JobEvent::Kind::kLost) {
    e.stdout_path = ev.stdout_file.empty() ? dir + "/stdout.log" : ev.stdout_file;
    e.stderr_path = ev.stderr_file.empty() ? dir + "/stderr.log" : ev.stderr_file;
  }
  if (e.kind == protocol::EventKind::kStarted && ev.id.task == 0) {
    std::lock_guard lock(mu_);
    if (auto it = held_.find(ev.id); it != held_.end()) {
      const std::map<std::string, std::string>& env = it->second.spec.pool_env;
      if (auto p = env.find("MASTER_PORT"); p != env.end()) {
        e.master_port = static_cast<int>(ParseInt64(p->second).value_or(0));
      }
    }
  }
  batch->events.push_back(std::move(e));
}

void AgentLoop::ReportEvents() {
  int backoff_ms = 100;
  while (!stopping_) {
    std::vector<agent::JobEvent> fresh = launcher_->Wait(200);
    std::vector<agent::JobEvent> batch;
    std::vector<RunId> ended;
    {
      std::lock_guard lock(mu_);
      for (auto& e : fresh) {
        if (IsFinal(e.kind)) {
          SessionEndedLocked(e.id);
          if (!e.id.is_exec()) ended.push_back(e.id);
        }
        unsent_.push_back(std::move(e));
      }
      batch = unsent_;
    }
    // A task's exec sessions end with it (its cgroups took their processes; without
    // cgroups they would run on).
    for (const RunId& id : ended) StopExecSessionsOf(id);
    // A share's MPS daemon goes with its last client (out of the lock: a control command).
    for (const RunId& id : ended) {
      if (options_.mps == nullptr) break;
      if (Status s = options_.mps->Release(id); !s.ok()) {
        spdlog::warn("agent: stopping the MPS daemon {} used: {}", agent::ToString(id),
                     s.message());
      }
    }
    if (batch.empty() || !registered_) continue;
    protocol::EventBatch wire;
    wire.node = options_.node_name;
    for (const agent::JobEvent& ev : batch) ToWire(ev, &wire);
    if (Status ack = link_->PostEvents(wire); !ack.ok()) {
      spdlog::warn("agent: cannot report {} events yet: {}", batch.size(), ack.message());
      Pause(int64_t{backoff_ms} * 1000);
      backoff_ms = std::min(backoff_ms * 2, 5000);
      continue;
    }
    backoff_ms = 100;
    std::lock_guard lock(mu_);
    unsent_.erase(unsent_.begin(), unsent_.begin() + static_cast<std::ptrdiff_t>(batch.size()));
    for (const agent::JobEvent& ev : batch) {
      if (IsFinal(ev.kind)) EndAcknowledgedLocked(ev);
    }
  }
}

void AgentLoop::EndAcknowledgedLocked(const agent::JobEvent& ev) {
  const RunId& id = ev.id;
  // Only the attempt the task holds here is forgotten: the end of an attempt that never
  // started (a refused launch) must not free the task while an earlier one still holds it.
  auto held = id.is_exec() ? current_.end() : current_.find(SlotOf(id));
  if (held != current_.end() && held->second != id.attempt) return;
  held_.erase(id);
  mem_stopped_.erase(id);
  if (held != current_.end()) current_.erase(held);
  if (Status s = launcher_->Forget(id); !s.ok() && s.code() != StatusCode::kNotFound) {
    spdlog::warn("agent: forget {}: {}", agent::ToString(id), s.message());
  }
  // The next attempt of the task may start now.
  if (id.is_exec()) return;
  if (auto d = deferred_.find(SlotOf(id)); d != deferred_.end()) {
    launch_queue_.push_back({std::move(d->second), {}});
    deferred_.erase(d);
    launch_cv_.notify_all();
  }
}

void AgentLoop::Pause(int64_t micros) {
  std::unique_lock lock(pause_mu_);
  clock_->WaitFor(pause_cv_, lock, micros, [this] { return stopping_.load(); });
}

Status AgentLoop::Run() {
  // The health program runs before the node first registers, so that its verdict goes
  // with the registration (Register sends it at once) rather than after work arrived.
  std::thread health;
  if (!options_.health_check.empty()) {
    protocol::HealthReport r = RunHealthCheck(
        options_.health_check, options_.health_check_timeout_s, clock_->NowMicros() / 1000);
    spdlog::info(
        "agent: health check {}: {}", options_.health_check,
        r.passed ? "passed" : "failed: " + (r.node_reason.empty() ? r.output : r.node_reason));
    {
      std::lock_guard lock(health_mu_);
      unsent_health_ = std::move(r);
    }
    health = std::thread([this] { HealthLoop(); });
  }
  std::thread reporter([this] { ReportEvents(); });
  std::thread telemetry;
  if (options_.sampler && options_.telemetry_interval_s > 0) {
    telemetry = std::thread([this] { TelemetryLoop(); });
  }
  std::thread disk;
  if (options_.disk_check_interval_s > 0 &&
      options_.disk_min_free.kind != DiskMinFree::Kind::kOff) {
    disk = std::thread([this] { DiskLoop(); });
  }
  std::vector<std::thread> launchers;
  for (int i = 0; i < std::max(1, options_.launch_workers); ++i) {
    launchers.emplace_back([this] { LaunchWorker(); });
  }
  int backoff_ms = 200;
  while (!stopping_) {
    Status s = registered_ ? PollOnce() : Register();
    if (s.ok()) {
      backoff_ms = 200;
      continue;
    }
    if (!incompatible_.ok()) {
      spdlog::error("agent: {}", s.message());
      Stop();
      break;
    }
    if (!registered_ && s.code() == StatusCode::kAlreadyExists) {
      // Refused (HTTP 409, protocol::IsAgentIdRefusal): another agent runs this node. Tried
      // again, slowly: that agent may have just stopped (an agent whose state directory
      // was wiped, started again at once), and its node is free once it has not polled
      // for the node timeout; a clone goes on saying why it is idle.
      spdlog::error("agent: {} (trying again in {} s)", s.message(), kTakenRetryUs / 1'000'000);
      Pause(kTakenRetryUs);
      continue;
    }
    spdlog::warn("agent: {} (retrying in {} ms)", s.message(), backoff_ms);
    Pause(int64_t{backoff_ms} * 1000);
    backoff_ms = std::min(backoff_ms * 2, 5000);
  }
  launch_cv_.notify_all();
  telemetry_cv_.notify_all();
  for (std::thread& t : launchers) t.join();
  reporter.join();
  if (telemetry.joinable()) telemetry.join();
  if (health.joinable()) health.join();
  if (disk.joinable()) disk.join();
  std::lock_guard lock(mu_);
  for (auto& [key, relay] : relays_) {
    if (relay) relay->Stop();
  }
  relays_.clear();
  return incompatible_;
}

}  // namespace gpupool::agent
