// Controller's dealings with nodes (controller.h): the node list, drains, agents'
// registrations, their work (launch orders, stop orders, log reads) and their events.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <set>
#include <tuple>

#include "common/json.h"
#include "common/strings.h"
#include "controller/agent_identity.h"
#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"
#include "controller/job_scheduler.h"
#include "controller/layout_holds.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"
#include "jobs/job_validation.h"

namespace gpupool::controller {

using internal::kResendAfterUs;
using internal::kStrayGiveUpUs;
using internal::Occupies;
using internal::OnNode;
using internal::RemoteIp;
using internal::StopOrders;
using jobs::Job;
using jobs::JobState;

namespace {

// Counts device `uuid` of task placement `p` of `job` in `v`: a GPU's share, or a MIG
// instance held whole (its GPU's allocated_milli grows by the instance's part of the
// GPU's memory, and mig_jobs names the job).
void AllocateInView(const gpu::NodeInfo& info, const Job& job, const jobs::TaskPlacement& p,
                    const std::string& uuid, NodeView& v) {
  for (size_t g = 0; g < info.gpus.size(); ++g) {
    const gpu::GpuInfo& gi = info.gpus[g];
    if (gi.uuid == uuid) {
      v.allocated_milli[g] += p.gpu_milli;
      v.holders[g].push_back({job.id, job.array_id, job.array_index, job.user, p.gpu_milli});
    }
    for (const gpu::MigDevice& m : gi.mig_devices) {
      if (m.uuid != uuid || uuid.empty()) continue;
      v.mig_jobs[uuid] = job.id;
      // Its GPU's holders name it too, with its share as asked.
      v.holders[g].push_back({job.id, job.array_id, job.array_index, job.user, p.gpu_milli});
      if (gi.memory_total_bytes > 0) {
        v.allocated_milli[g] += static_cast<int>(
            std::min<uint64_t>(1000, m.memory_total_bytes * 1000 / gi.memory_total_bytes));
      }
    }
  }
}

// The GPUs of `node` the tasks `covered` of `job` hold, as grants of `order`, and the
// device nodes of the others in its deny list. A MIG instance is granted by its MIG-
// UUID with its GPU's nodes and its own cap nodes; the GPU's other instances' cap nodes
// are denied (docs/sharing.md).
void GrantDevices(const gpu::NodeInfo& node, const Job& job, const std::vector<size_t>& covered,
                  LaunchOrder& order) {
  auto milli_of = [&](const std::string& uuid) {
    int milli = 0;  // the covered tasks' shares of this device
    for (size_t t : covered) {
      const jobs::TaskPlacement& q = job.placement[t];
      if (std::find(q.gpu_uuids.begin(), q.gpu_uuids.end(), uuid) != q.gpu_uuids.end()) {
        milli += q.gpu_milli;
      }
    }
    return std::min(milli, 1000);
  };
  auto deny = [&](const std::vector<std::string>& nodes) {
    order.denied_device_nodes.insert(order.denied_device_nodes.end(), nodes.begin(), nodes.end());
  };
  for (const gpu::GpuInfo& g : node.gpus) {
    const std::string vendor(gpu::VendorName(g.vendor));
    bool granted = false;
    if (const int milli = milli_of(g.uuid); milli > 0) {
      order.gpus.push_back({vendor, g.index, g.uuid, g.device_nodes, milli});
      granted = true;
    }
    for (const gpu::MigDevice& m : g.mig_devices) {
      // Granted once, by its UUID (SchedDevicesOf leaves out instances without their own).
      const bool seen = std::any_of(order.gpus.begin(), order.gpus.end(),
                                    [&](const protocol::GpuGrant& x) { return x.uuid == m.uuid; });
      const int milli = m.uuid.empty() || seen ? 0 : milli_of(m.uuid);
      if (milli == 0) {
        deny(m.device_nodes);
        continue;
      }
      std::vector<std::string> nodes = g.device_nodes;
      nodes.insert(nodes.end(), m.device_nodes.begin(), m.device_nodes.end());
      order.gpus.push_back({vendor, g.index, m.uuid, std::move(nodes), milli});
      granted = true;
    }
    if (!granted) deny(g.device_nodes);
  }
}

// Where node `reg` is reached (its --address, else where it registered from, else its name):
// each task's host there, stored with its job; the store reads back no string over 64 KiB
// nor one with a NUL byte (the fourth red team: a node's 70,000-byte address).
Result<std::string> RegisteredAddress(const protocol::Registration& reg,
                                      const std::string& remote_ip) {
  if (reg.address.size() > 255 || HasControlCharacter(reg.address)) {
    return Status::InvalidArgument(
        "address: a host name or IP address of at most 255 characters without control "
        "characters is required (the agent's --address)");
  }
  std::string address = reg.address;
  if (address.empty()) address = RemoteIp(remote_ip);
  if (address.empty()) address = reg.node;
  return address;
}

// Whether `reg` lists attempt `attempt` of job `id` as ended there (its event follows).
bool ListsEnded(const protocol::Registration& reg, int64_t id, int attempt) {
  return std::any_of(reg.ended.begin(), reg.ended.end(), [&](const protocol::RunningTask& t) {
    return t.job_id == id && t.attempt == attempt;
  });
}

}  // namespace

void internal::ReserveStrayGpus(
    const std::set<std::pair<int64_t, int>>& running,
    const std::map<std::pair<int64_t, int>, std::vector<std::string>>& gpus,
    const std::function<std::string(int64_t)>& user_id, SchedNode* node) {
  for (const auto& key : running) {
    auto held = gpus.find(key);
    if (held == gpus.end()) {
      node->draining = true;  // which GPUs it holds is not known
      continue;
    }
    for (const std::string& uuid : held->second) {
      node->out_of_service_gpus.push_back(
          {uuid, "still used by attempt " + std::to_string(key.second) + " of job " +
                     user_id(key.first) + ", which is being stopped"});
    }
  }
}

std::string Controller::GpuEnforcement(const jobs::Job& job) {
  const jobs::TaskPlacement* share = nullptr;
  bool whole = false;
  for (const jobs::TaskPlacement& p : job.placement) {
    if (p.gpu_uuids.empty() && p.gpu_indices.empty()) continue;
    if (p.gpu_milli >= 1000) {
      whole = true;
    } else if (share == nullptr) {
      share = &p;
    }
  }
  if (share == nullptr) return whole ? "exclusive" : "";
  const std::string uuid = share->gpu_uuids.empty() ? "" : share->gpu_uuids[0];
  MutexLock lock(mu_);
  auto n = nodes_.find(share->node);
  if (n == nodes_.end()) return "";
  for (const gpu::GpuInfo& g : n->second.info.gpus) {
    for (const gpu::MigDevice& m : g.mig_devices) {
      if (!uuid.empty() && m.uuid == uuid) return "mig";
    }
    const bool same = uuid.empty() ? !share->gpu_indices.empty() && g.index == share->gpu_indices[0]
                                   : g.uuid == uuid;
    if (!same) continue;
    // The agent holds a container to the dmem cap only in cgroups it makes: podman's are
    // its own (docs/sharing.md).
    if (g.enforcement == "dmem" && !job.image.empty()) return "none";
    return g.enforcement.empty() ? "none" : g.enforcement;
  }
  return "";
}

std::vector<NodeView> Controller::Nodes() {
  std::vector<NodeView> out;
  // kChunkUnderLock nodes per hold of mu_: each node's view is whole, as of its chunk.
  Lock lock(mu_);
  out.reserve(nodes_.size());
  auto it = nodes_.begin();
  while (true) {
    for (size_t n = 0; it != nodes_.end() && n < internal::kChunkUnderLock; ++it, ++n) {
      out.push_back(NodeViewLocked(it->first, it->second));
    }
    if (it == nodes_.end()) return out;
    const std::string next = it->first;  // nodes are never erased
    lock.Unlock();
    if (options_.between_chunks_for_test) options_.between_chunks_for_test();
    lock.Lock();
    it = nodes_.lower_bound(next);
  }
}

NodeView Controller::NodeViewLocked(const std::string& name, const NodeEntry& e) const {
  NodeView v;
  v.name = name;
  v.drain_reason = e.drain_reason;
  v.health_pending = e.health_pending;
  v.disk = e.disk;
  const int64_t now = clock_->NowMicros();
  for (const auto& [uuid, health] : e.gpu_health) {
    if (health.state == gpu::GpuHealthState::kHealthy) continue;
    gpu::GpuHealth& shown = v.gpu_health[uuid] = health;
    shown.strikes = gpu::StrikesWithin(health, now, options_.health_strike_window_us);
  }
  v.address = e.address;
  v.protocol = protocol::VersionString(e.version);
  v.last_seen_us = e.last_seen_us;
  v.info = e.info;
  v.cpu_milli = e.cpu_milli;
  v.memory_mib = e.memory_mib;
  v.allocated_milli.assign(e.info.gpus.size(), 0);
  v.holders.assign(e.info.gpus.size(), {});
  // The jobs holding resources with a task here (the job index), in id order; a job's
  // tasks on the node in its placement's order.
  for (int64_t id : index_.OnNode(name)) {
    const Job& job = active_.at(id);
    ++v.running_jobs;
    for (const jobs::TaskPlacement& p : job.placement) {
      if (p.node != name) continue;
      v.cpu_allocated_milli += job.request.cpu_milli;
      v.memory_allocated_mib +=
          static_cast<int64_t>((job.request.memory_bytes + (uint64_t{1} << 20) - 1) >> 20);
      for (const std::string& uuid : p.gpu_uuids) AllocateInView(e.info, job, p, uuid, v);
    }
  }
  // The GPUs out of service, as the scheduler takes them (TakeNodes): by health, ...
  auto out_of_service = [&](const std::string& uuid, const std::string& why) {
    for (size_t g = 0; g < e.info.gpus.size(); ++g) {
      if (e.info.gpus[g].uuid == uuid) v.out_of_service.try_emplace(g, why);
    }
  };
  for (const auto& [uuid, health] : e.gpu_health) {
    if (gpu::TakesWork(health.state)) continue;
    out_of_service(uuid, std::string(gpu::GpuHealthStateName(health.state)) + ": " + health.reason);
  }
  for (const auto& [key, uuids] : e.stray_gpus) {  // ... by a stopped attempt still there,
    if (!e.stray_running.contains(key)) continue;
    for (const std::string& uuid : uuids) out_of_service(uuid, "still used by a stopped job");
  }
  // ... and by a layout changed under running jobs: theirs until they end.
  for (const auto& [uuid, ids] : internal::LayoutHeld(layout_holds_, name, active_)) {
    out_of_service(uuid, "layout changed under running jobs");
    for (size_t g = 0; g < e.info.gpus.size(); ++g) {
      if (e.info.gpus[g].uuid != uuid) continue;
      v.allocated_milli[g] = 1000;
      for (int64_t id : ids) {
        const Job& job = active_.at(id);
        const NodeView::Holder h{job.id, job.array_id, job.array_index, job.user, 1000};
        v.layout_held[g].push_back(h);
        auto& on = v.holders[g];
        if (std::none_of(on.begin(), on.end(), [&](const auto& o) { return o.job_id == id; })) {
          on.push_back(h);
        }
      }
    }
  }
  // Not heard from since the controller loaded the store: its agent may be dead (it was
  // "down" before the restart) or about to poll; Slurm calls such a node UNKNOWN.
  v.state = !e.up                     ? "down"
            : !e.heard && !e.draining ? "unknown"
            : !e.draining             ? "up"
            : v.running_jobs > 0      ? "draining"
                                      : "drained";
  return v;
}

Result<NodeView> Controller::DrainNode(const std::string& name, const std::string& reason,
                                       const Caller& caller) {
  if (!caller.admin) {
    return Status::PermissionDenied("only admins drain nodes (you are " + caller.user + ")");
  }
  if (reason.empty() || reason.size() > 256 ||
      std::any_of(reason.begin(), reason.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    return Status::InvalidArgument(
        "reason: say why the node is drained in 1..256 bytes of printable text, e.g. --reason "
        "\"disk replacement\"");
  }
  return SetDrain(name, true, reason + " (" + caller.user + ")");
}

Result<NodeView> Controller::ResumeNode(const std::string& name, const Caller& caller) {
  if (!caller.admin) {
    return Status::PermissionDenied("only admins resume nodes (you are " + caller.user + ")");
  }
  return SetDrain(name, false, "");
}

Result<NodeView> Controller::SetDrain(const std::string& name, bool draining,
                                      const std::string& reason,
                                      const std::optional<std::string>& seen) {
  MutexLock write(node_write_mu_);  // every change of a drain holds it: none can come between
  bool changed_meanwhile = false;
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(name);
    if (n == nodes_.end()) {
      return Status::NotFound("node " + name + " is not known: `gpupool nodes` lists the nodes");
    }
    // An automatic drain or resume decided on what it read: an admin's drain or resume that
    // landed since then stands.
    changed_meanwhile =
        seen && (n->second.draining ? n->second.drain_reason : std::string()) != *seen;
  }
  if (changed_meanwhile) {
    for (NodeView& v : Nodes()) {
      if (v.name == name) return std::move(v);
    }
  }
  GP_ASSIGN_OR_RETURN(std::vector<store::NodeRecord> records, store_->ListNodes());
  auto rec = std::find_if(records.begin(), records.end(),
                          [&](const store::NodeRecord& r) { return r.name == name; });
  if (rec == records.end()) return Status::NotFound("node " + name + " is not stored");
  rec->draining = draining;
  rec->drain_reason = reason;
  GP_RETURN_IF_ERROR(store_->PutNode(*rec));
  {
    MutexLock lock(mu_);
    NodeEntry& e = nodes_[name];
    ++nodes_generation_;  // perhaps a node new to nodes_
    e.draining = draining;
    e.drain_reason = reason;
    spdlog::info("node {} {}{}", name, draining ? "drained: " : "resumed", reason);
    capacity_changed_ = true;
    WakeScheduler();
  }
  for (NodeView& v : Nodes()) {
    if (v.name == name) return std::move(v);
  }
  return Status::NotFound("node " + name);
}

Result<protocol::RegistrationReply> Controller::RegisterNode(protocol::Registration reg,
                                                             const std::string& remote_ip) {
  const std::string& name = reg.node;
  if (name.empty() || name.size() > 253) {
    return Status::InvalidArgument("node: a node name of 1..253 characters is required");
  }
  GP_RETURN_IF_ERROR(
      protocol::CheckCompatible(protocol::kVersion, reg.version, "the agent on node " + name));
  GP_ASSIGN_OR_RETURN(const std::string address, RegisteredAddress(reg, remote_ip));
  const int64_t now = clock_->NowMicros();
  store::NodeRecord rec;
  rec.name = name;
  rec.info_json = DumpJson(gpu::NodeToJson(reg.info));
  rec.cpu_milli = reg.cpu_milli;
  rec.memory_mib = reg.memory_mib;
  rec.registered_us = rec.last_heartbeat_us = now;
  rec.address = address;
  rec.protocol = protocol::VersionString(reg.version);
  rec.agent_id = reg.agent_id;
  MutexLock write(node_write_mu_);
  bool same_agent = true;  // the agent that ran the node's jobs so far (a restart of it)
  {
    MutexLock lock(mu_);
    if (auto it = nodes_.find(name); it != nodes_.end()) {
      const NodeEntry& old = it->second;
      GP_RETURN_IF_ERROR(internal::CheckAgentIdentity(
          name, {old.agent_id, old.address, old.last_seen_us, old.up, old.heard}, reg.agent_id, now,
          options_.node_timeout_us));
      same_agent = old.agent_id.empty() || reg.agent_id.empty() || old.agent_id == reg.agent_id;
      if (!same_agent) spdlog::warn("node {}: taken over by another agent", name);
      rec.draining = it->second.draining;  // a drain outlives the agent's restarts
      rec.drain_reason = it->second.drain_reason;
      std::vector<const Job*> here;  // GPUs gone under running jobs drain the node
      for (int64_t id : index_.OnNode(name)) {
        if (Occupies(active_.at(id))) here.push_back(&active_.at(id));
      }
      if (std::string gone = GoneUnderJobs(name, old.info, reg.info, here); !gone.empty()) {
        spdlog::error("node {}: {}", name, gone);
        if (!rec.draining) std::tie(rec.draining, rec.drain_reason) = std::pair(true, gone);
      }
      rec.gpu_health_json = GpuHealthToJson(it->second.gpu_health);  // and GPU health
    }
  }
  GP_RETURN_IF_ERROR(store_->PutNode(rec));

  std::vector<Change> forgotten;  // started here, not known to the agent: gone
  {
    Lock lock(mu_);
    NodeEntry& e = nodes_[name];
    ++nodes_generation_;
    e.info = std::move(reg.info);
    e.info_version = ++node_info_versions_;
    e.cpu_milli = reg.cpu_milli;
    e.memory_mib = reg.memory_mib;
    e.last_seen_us = now;
    e.heard = true;
    e.up = true;
    e.address = address;
    e.version = reg.version;
    e.agent_id = reg.agent_id;
    std::tie(e.draining, e.drain_reason) = std::pair(rec.draining, rec.drain_reason);
    e.launch_sent_us.clear();  // a (re)started agent gets every open order again
    e.cancel_sent_us.clear();
    e.stray_sent_us.clear();
    e.stray_first_us.clear();
    e.stray_running.clear();
    e.exec_cancel_sent_us.clear();
    e.xid_count_seen.clear();               // a (re)started agent counts its Xids from 0 again
    e.health_pending = reg.health_pending;  // no work until its health verdict comes
    if (reg.health_pending) spdlog::info("node {}: waiting for its health check's verdict", name);
    // Tasks it runs that no active job expects are stopped; ours it does not list are gone.
    auto known = std::make_shared<std::set<std::pair<int64_t, int>>>();
    // A task whose end is on its way is not lost: its event follows the registration.
    for (const protocol::RunningTask& t : reg.ended) known->insert({t.job_id, t.attempt});
    for (const protocol::RunningTask& t : reg.running) {
      known->insert({t.job_id, t.attempt});
      auto it = active_.find(t.job_id);
      const bool expected = it != active_.end() && Occupies(it->second) &&
                            it->second.attempt == t.attempt && OnNode(it->second, name);
      if (!expected) {
        e.stray_sent_us[{t.job_id, t.attempt}] = 0;
        e.stray_running.insert({t.job_id, t.attempt});
      }
    }
    UpdateLayoutHolds(name);  // running jobs whose devices the new inventory lacks
    // The GPUs of the strays it no longer runs are free; those of the others stay used.
    std::erase_if(e.stray_gpus,
                  [&e](const auto& g) { return e.stray_running.count(g.first) == 0; });
    // Checked again for each job when its end is committed: the job may have changed.
    auto lost_here = [known, name](const Job& job) {
      if (!Occupies(job) || !OnNode(job, name) || known->count({job.id, job.attempt}) != 0) {
        return Status::NotFound("not lost on " + name);
      }
      for (size_t t = 0; t < job.placement.size() && t < job.tasks.size(); ++t) {
        if (job.placement[t].node == name && job.tasks[t].start_time_us != 0 &&
            !job.tasks[t].ended) {
          return Status::Ok();  // started here
        }
      }
      return Status::NotFound("not started on " + name);
    };
    for (int64_t id : index_.OnNode(name)) {
      if (lost_here(active_.at(id)).ok()) {
        forgotten.push_back({id, lifecycle::AgentForgot{name}, lost_here});
      }
    }
    // Jobs requeued when this node was lost wait for its lease no more: it listed what
    // still runs here (stray_running, stopped before they start again). One whose lost
    // attempt it lists as ended waits for that end, which follows (it may have
    // succeeded: job_lifecycle_late.h); the end lifts the wait, as does the lease. Not
    // for another agent taking the node over (a wiped or moved state directory): it
    // cannot see what the old one's supervisors still run, so they wait for the lease.
    // Another lost node of the attempt holds the job back until it is heard from too.
    for (int64_t id : index_.PendingFenced()) {
      const Job& fenced = active_.at(id);
      if (jobs::FenceOn(fenced, name) != nullptr && same_agent &&
          !ListsEnded(reg, id, fenced.attempt)) {
        forgotten.push_back({id, lifecycle::FenceLifted{name}, {}});
      }
    }
    WakeScheduler();
    WakeAgent(name);
  }
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers,
                      Commit(std::move(forgotten), OnConflict::kRetry));
  LogRefusals("registration of " + name, answers);
  protocol::RegistrationReply reply{protocol::kVersion, address};
  reply.node_lease_ms = options_.node_lease_us / 1000;
  reply.kill_wait_s = options_.kill_wait_s;
  return reply;
}

void Controller::BlockWhileEarlierAttemptsStop(
    std::map<int64_t, std::pair<int32_t, std::string>>* stopping) const {
  // A requeued job whose earlier attempt a returning node still runs (its supervisor
  // outlived the agent) is stopped there first: at most one attempt runs at a time. The
  // stop order is resent until the attempt's end is reported, or given up on with it.
  for (const auto& [name, e] : nodes_) {
    for (const auto& key : e.stray_running) {
      auto it = active_.find(key.first);
      if (it == active_.end() || it->second.state != JobState::kPending) continue;
      if (key.second > it->second.attempt) continue;
      stopping->emplace(key.first, std::make_pair(key.second, name));  // the first one found
    }
  }
}

LaunchOrder Controller::MakeLaunchOrder(const Job& job, size_t task_index) const {
  LaunchOrder order;
  order.job = job;
  for (auto& [k, v] : jobs::ArrayEnvironment(job)) order.job.env[k] = std::move(v);
  order.task_index = static_cast<int>(task_index);
  protocol::Rendezvous& r = order.rendezvous;
  r.task_index = static_cast<int>(task_index);
  r.num_tasks = static_cast<int>(job.placement.size());
  for (size_t t = 0; t < job.placement.size(); ++t) {
    r.hosts.push_back(t < job.tasks.size() && !job.tasks[t].host.empty() ? job.tasks[t].host
                                                                         : job.placement[t].node);
    r.slots.push_back(std::max<int>(1, static_cast<int>(job.placement[t].gpu_uuids.size())));
  }
  r.master_port = job.master_port;
  const jobs::TaskPlacement& p = job.placement[task_index];
  // The tasks this launch covers: itself, and in a gang held for mpirun (--mpi, run,
  // alloc) whose first task on this node it is, the job's other tasks on the node.
  // mpirun starts all of a node's ranks in one place (itself on task 0's node, its daemon
  // through `gpupool exec HOST`, which runs in the first task on HOST), so that place
  // holds all the node's GPUs, as a Slurm step does; the ranks pick theirs by local rank.
  // Gangs whose every task runs the command (torchrun) keep one GPU set per task.
  std::vector<size_t> covered = {task_index};
  const bool held = job.mpi || !job.interactive.empty();
  bool first_on_node = true;
  for (size_t t = 0; t < task_index && held; ++t) {
    if (job.placement[t].node == p.node) first_on_node = false;
  }
  if (held && first_on_node) {
    for (size_t t = task_index + 1; t < job.placement.size(); ++t) {
      if (job.placement[t].node == p.node) covered.push_back(t);
    }
  }
  if (covered.size() > 1) {
    for (size_t t : covered) order.node_tasks.push_back(static_cast<int>(t));
  }
  auto n = nodes_.find(p.node);
  if (n == nodes_.end()) return order;
  GrantDevices(n->second.info, job, covered, order);
  return order;
}

int64_t Controller::PollDeadline(int64_t wait_ms) const {
  // A poll is answered within half the node timeout, so that a live agent polls again in
  // time and is never taken for a silent one, and a dead agent's poll left waiting here
  // does not keep its node up (a --node-timeout under the poll's length lost idle nodes).
  const int64_t longest_ms = std::max<int64_t>(options_.node_timeout_us / 2000, 100);
  return clock_->MonotonicMicros() +
         1000 * std::clamp<int64_t>(wait_ms, 0, std::min<int64_t>(60'000, longest_ms));
}

Result<AgentWork> Controller::WaitForWork(const std::string& node, int64_t wait_ms) {
  const int64_t deadline = PollDeadline(wait_ms);
  Lock lock(mu_);
  for (bool arrived = true;; arrived = false) {  // a poll arrives once, then waits
    Result<AgentWork> work = TakeWorkLocked(node, arrived);
    if (!work.ok() || !work->empty() || stopping_ || clock_->MonotonicMicros() >= deadline) {
      return work;
    }
    // Wake at the deadline, on new work, or in time to resend unacknowledged orders.
    clock_->WaitOnce(work_cv_, lock.native(),
                     std::min(deadline, clock_->MonotonicMicros() + kResendAfterUs));
  }
}

Result<AgentWork> Controller::TakeWorkLocked(const std::string& node, bool arrived) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    return Status::NotFound("node " + node + " is not registered: register it first");
  }
  NodeEntry& e = it->second;
  const int64_t now = clock_->NowMicros();
  if (!e.up) {
    // Declared lost: its jobs were ended or requeued meanwhile. The agent registers
    // again (it does on a 404), listing what it runs, so that what outlived the loss is
    // stopped before a requeued attempt of the same job starts.
    return Status::NotFound("node " + node +
                            " was declared lost (no poll within the node timeout): register "
                            "it again");
  }
  e.last_seen_us = now;
  e.heard = true;
  if (arrived) NotePollArrived(e.signals, clock_->MonotonicMicros(), signal_cv_);
  AgentWork work;
  for (int64_t id : index_.OnNode(node)) {
    const Job& job = active_.at(id);
    bool cancel_sent = false;
    if (job.cancel_requested) {
      auto sent = e.cancel_sent_us.find(id);
      if (sent == e.cancel_sent_us.end() || now - sent->second > kResendAfterUs) {
        for (protocol::CancelOrder& o : StopOrders(job, node, now)) work.cancel.push_back(o);
        e.cancel_sent_us[id] = now;
        cancel_sent = true;
      }
    }
    if (job.state != JobState::kAssigned) continue;
    // A node of it declared lost: that loss, being committed, decides the job's fate
    // (NodeLost::never_launched counts on no launch of it going out meanwhile).
    if (std::any_of(job.placement.begin(), job.placement.end(), [this](const auto& p) {
          mu_.AssertHeld();
          auto n = nodes_.find(p.node);
          return n != nodes_.end() && !n->second.up;
        })) {
      continue;
    }
    // A job cancelled before it started still gets its tasks' launch orders, each after
    // the cancel in the same answer: an agent that never had a launch (it was down, or
    // lost the answer) refuses it as cancelled and reports the task ended, where a cancel
    // alone would find nothing to stop and the job would wait for that end forever; an
    // agent that has the task ignores the resent launch and stops the task.
    const size_t launches_before = work.launch.size();
    for (size_t t = 0; t < job.placement.size(); ++t) {
      if (job.placement[t].node != node) continue;
      const jobs::TaskStatus& ts = job.tasks.at(t);
      if (ts.start_time_us != 0 || ts.ended) continue;
      // The other tasks wait for task 0's agent to pick the rendezvous port, except
      // an --mpi job's held tasks: they run nothing of the user's until an exec, which
      // carries the port.
      if (t > 0 && job.master_port == 0 && !job.mpi) continue;
      auto sent = e.launch_sent_us.find({id, static_cast<int>(t)});
      if (sent != e.launch_sent_us.end() && now - sent->second <= kResendAfterUs) continue;
      work.launch.push_back(MakeLaunchOrder(job, t));
      e.launch_sent_us[{id, static_cast<int>(t)}] = now;
      unlaunched_.erase(id);  // handed out: it may run from now on
    }
    if (job.cancel_requested && !cancel_sent && work.launch.size() > launches_before) {
      for (protocol::CancelOrder& o : StopOrders(job, node, now)) work.cancel.push_back(o);
      e.cancel_sent_us[id] = now;
    }
  }
  for (auto stray = e.stray_sent_us.begin(); stray != e.stray_sent_us.end();) {
    auto& [key, sent] = *stray;
    int64_t& first = e.stray_first_us[key];
    if (first == 0) first = now;
    if (now - first > kStrayGiveUpUs) {
      e.stray_first_us.erase(key);
      e.stray_running.erase(key);
      e.stray_gpus.erase(key);
      stray = e.stray_sent_us.erase(stray);
      continue;
    }
    if (sent == 0 || now - sent > kResendAfterUs) {
      work.cancel.push_back({key.first, key.second});
      sent = now;
    }
    ++stray;
  }
  for (auto& [exec_id, sent] : e.exec_cancel_sent_us) {
    if (sent == 0 || now - sent > kResendAfterUs) {
      work.cancel.push_back({0, 0, exec_id});
      sent = now;
    }
  }
  if (protocol::SupportsExec(e.version)) {
    // In the order they were started (their ids are random).
    std::vector<ExecSession*> queued;
    for (auto& [id, x] : execs_) {
      if (x.node == node && !x.started && !x.ended) queued.push_back(&x);
    }
    std::sort(queued.begin(), queued.end(),
              [](const ExecSession* a, const ExecSession* b) { return a->created < b->created; });
    for (ExecSession* session : queued) {
      ExecSession& x = *session;
      // Resent until the agent reports it (a poll answer can be lost: a dead agent's
      // poll may take it), as launch orders are; agents ignore a session seen before.
      if (x.sent && now - x.sent_us <= kResendAfterUs) continue;
      // Sent once its task runs (mpirun may ask before the task has started).
      auto job = active_.find(x.job_id);
      if (job == active_.end() || job->second.attempt != x.attempt) continue;
      const auto t = static_cast<size_t>(x.task_index);
      if (t >= job->second.tasks.size() || job->second.tasks[t].start_time_us == 0) continue;
      work.exec.push_back({x.id, x.job_id, x.attempt, x.task_index, x.argv, job->second.master_port,
                           x.io.tty, x.io.stdin_open, x.io.rows, x.io.cols, x.io.env});
      x.sent = true;
      x.sent_us = now;
    }
  }
  if (protocol::SupportsSignal(e.version)) {
    work.signal = TakeSignalOrders(e.signals, clock_->MonotonicMicros(), signal_cv_);
  }
  work.logs = log_relay_.Take(node);
  return work;
}

bool Controller::SchedulerLooping() const {
  const int64_t seen = loop_seen_mono_us_;
  // A round at least once per period (a long pass may take a few more).
  return seen != 0 && clock_->MonotonicMicros() - seen <=
                          std::max<int64_t>(3 * options_.scheduler_period_us, 5'000'000);
}

std::map<int, std::vector<protocol::TelemetryJob>> Controller::GpuHolders(const std::string& node) {
  std::map<int, std::vector<protocol::TelemetryJob>> out;
  MutexLock lock(mu_);
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return out;
  std::map<std::string_view, int> index_of;
  for (const gpu::GpuInfo& g : n->second.info.gpus) {
    out[g.index];
    index_of[g.uuid] = g.index;
  }
  for (int64_t id : index_.OnNode(node)) {
    for (const jobs::TaskPlacement& p : active_.at(id).placement) {
      if (p.node != node) continue;
      for (const std::string& uuid : p.gpu_uuids) {
        if (auto i = index_of.find(uuid); i != index_of.end()) {
          out[i->second].push_back({id, p.gpu_milli, active_.at(id).start_time_us / 1000});
        }
      }
    }
  }
  return out;
}

namespace {

// A node's words on a task are stored with the job, and the store reads back no string
// over 64 KiB nor one with a NUL byte (jobs::CheckString): a reason that quoted a user's
// 65,000-byte working directory left the job's row unreadable, and the controller could
// not start again (the fourth red team). A reason is cut to kMaxNodeReason bytes, a kill
// detail (words for one cause, not a log) to kMaxKillDetail, each on a character's first
// byte (the JSON it came in was valid UTF-8, and stays so) with its NUL bytes dropped; a
// path no file system takes (past PATH_MAX, or with a NUL byte) is dropped.
constexpr size_t kMaxNodeReason = 4096;
constexpr size_t kMaxKillDetail = 1024;
constexpr size_t kMaxNodePath = 4096;

std::string NodeText(const std::string& text, size_t max, const char* cut_mark) {
  std::string s;
  s.reserve(std::min(text.size(), max));
  for (char c : text) {
    if (c != '\0') s += c;
  }
  if (s.size() > max) {
    size_t n = max;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
    s.resize(n);
    s += cut_mark;
  }
  return s;
}

std::string NodeReason(const std::string& text) { return NodeText(text, kMaxNodeReason, "..."); }

std::string BoundedKillDetail(const std::string& detail) {
  return NodeText(detail, kMaxKillDetail, "");
}

std::string NodePath(const std::string& path) {
  return path.size() > kMaxNodePath || path.find('\0') != std::string::npos ? "" : path;
}

// Whether `raw` names a task of `job`'s current attempt placed on `node` that has not
// started: what a node's launch failure may be about.
bool IsUnstartedTaskHere(const Job& job, const std::string& node, const Event& raw) {
  const auto t = static_cast<size_t>(raw.task_index);
  return raw.attempt == job.attempt && raw.task_index >= 0 && t < job.placement.size() &&
         job.placement[t].node == node &&
         (job.state == jobs::JobState::kAssigned || job.state == jobs::JobState::kRunning) &&
         (t >= job.tasks.size() || job.tasks[t].start_time_us == 0);
}

// What an agent's report of a task says, as a lifecycle event.
lifecycle::Event LifecycleEvent(const std::string& node, const Event& raw, int64_t time_us) {
  const std::string out = NodePath(raw.stdout_path);
  const std::string err = NodePath(raw.stderr_path);
  switch (raw.kind) {
    case protocol::EventKind::kStarted:
      return lifecycle::TaskStarted{node, raw.task_index, raw.attempt, time_us, out,
                                    err,  raw.master_port};
    case protocol::EventKind::kExited:
      if (raw.kill_cause == protocol::KillCause::kUnknown) {
        spdlog::warn(
            "node {}: job {} task {} ended with a kill cause this controller does not know "
            "(a newer agent?); its reason text is read instead",
            node, raw.job_id, raw.task_index);
      }
      return lifecycle::TaskExited{node,
                                   raw.task_index,
                                   raw.attempt,
                                   time_us,
                                   raw.exit_code,
                                   raw.signal,
                                   raw.cancelled,
                                   raw.timed_out,
                                   NodeReason(raw.reason),
                                   out,
                                   err,
                                   raw.kill_cause,
                                   BoundedKillDetail(raw.kill_detail)};
    case protocol::EventKind::kLost:
      break;
  }
  return lifecycle::TaskLost{node, raw.task_index, raw.attempt, NodeReason(raw.reason),
                             raw.not_started};
}

}  // namespace

std::vector<Controller::EventCommit> Controller::CommitEventGroup(
    std::vector<std::vector<Change>> group) {
  std::vector<EventCommit> out;
  out.reserve(group.size());
  if (group.size() > 1) {
    std::vector<Change> all;
    for (const std::vector<Change>& batch : group)
      all.insert(all.end(), batch.begin(), batch.end());
    if (EventCommit answers = Commit(std::move(all), OnConflict::kRetry); answers.ok()) {
      auto next = answers->begin();
      for (const std::vector<Change>& batch : group) {
        out.emplace_back(std::vector<Result<Job>>(
            std::make_move_iterator(next),
            std::make_move_iterator(next + static_cast<ptrdiff_t>(batch.size()))));
        next += static_cast<ptrdiff_t>(batch.size());
      }
      return out;
    }
  }
  // One batch, or a group whose write failed: nothing of it was written.
  for (std::vector<Change>& batch : group)
    out.push_back(Commit(std::move(batch), OnConflict::kRetry));
  return out;
}

// A node that could not start a job by a fault of its own (Event::not_started) would fail
// every job sent to it until fixed (a full disk, a missing supervisor), so it is drained,
// as a failed health check drains a node, under the same circuit breaker; `gpupool node
// resume` returns it. Its own node only: an agent can drain nothing else.
void Controller::DrainAfterLaunchFailure(const std::string& node, const std::string& reason) {
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(node);
    if (n == nodes_.end() || n->second.draining) return;
    if (!BreakerAllows(node, clock_->NowMicros())) {
      ++health_actions_held_;
      spdlog::error("node {}: {}, but the health circuit breaker holds: not drained", node, reason);
      return;
    }
  }
  spdlog::error("node {} drained: {}", node, reason);
  if (Result<NodeView> d = SetDrain(node, true, reason, ""); !d.ok()) {
    spdlog::error("node {}: cannot drain it: {}", node, d.status().message());
  }
}

Status Controller::ApplyEvents(const std::string& node, const EventBatch& batch) {
  std::vector<Change> changes;
  std::string launch_failure;  // a job this node could not start by its own fault
  int dropped = 0;             // end reports of ended jobs past the node's lookups
  {
    Lock lock(mu_);
    auto n = nodes_.find(node);  // nodes are never erased
    if (n != nodes_.end()) {
      n->second.last_seen_us = clock_->NowMicros();
      n->second.heard = true;
    }
    for (const Event& raw : batch.events) {
      const int64_t time_us = raw.time_us != 0 ? raw.time_us : clock_->NowMicros();
      if (raw.kind != protocol::EventKind::kStarted && n != nodes_.end()) {
        n->second.stray_sent_us.erase({raw.job_id, raw.attempt});  // it ended there
        n->second.stray_first_us.erase({raw.job_id, raw.attempt});
        n->second.stray_running.erase({raw.job_id, raw.attempt});
        n->second.stray_gpus.erase({raw.job_id, raw.attempt});
      }
      auto job = active_.find(raw.job_id);
      if (job == active_.end()) {
        // Ended: a resent event, or a lost attempt's late end (job_lifecycle_late.h).
        if (raw.kind == protocol::EventKind::kExited && n != nodes_.end() &&
            !internal::TakeEndedLookup(&n->second.ended_lookups_since_us, &n->second.ended_lookups,
                                       clock_->NowMicros())) {
          ++dropped;
          continue;
        }
        if (raw.kind == protocol::EventKind::kExited) {
          Change late{raw.job_id, LifecycleEvent(node, raw, time_us), {}};
          late.may_have_ended = true;
          changes.push_back(std::move(late));
        }
        continue;
      }
      if (raw.kind == protocol::EventKind::kLost && raw.not_started && launch_failure.empty() &&
          IsUnstartedTaskHere(job->second, node, raw)) {
        launch_failure =
            "could not start job " + std::to_string(raw.job_id) + ": " + NodeReason(raw.reason);
      }
      changes.push_back({raw.job_id, LifecycleEvent(node, raw, time_us), {}});
    }
  }
  if (dropped > 0) {
    spdlog::warn(
        "node {}: {} end reports for jobs that are not running were dropped unread: more than "
        "{} a minute (a node that reports ends of jobs it never ran?)",
        node, dropped, internal::kMaxEndedLookupsPerMinute);
  }
  // Drained before the job goes back to the queue, so the next pass does not send it here.
  if (!launch_failure.empty()) DrainAfterLaunchFailure(node, launch_failure);
  // In order, in one transaction (with the batches that came meanwhile): a job's second
  // event steps on its first one's result.
  std::vector<Result<Job>> answers;
  if (!changes.empty()) {
    GP_ASSIGN_OR_RETURN(answers, event_commits_.Submit(std::move(changes)));
  }
  std::vector<CommandEnd> ended;
  {
    Lock lock(mu_);
    for (const protocol::ExecReport& r : batch.exec) ExecReported(node, r, &ended);
  }
  CommitCommandEnds(ended);
  // A refused event (the lifecycle's word on it) is the agent's to hear.
  for (const Result<Job>& a : answers) {
    if (!a.ok() && a.status().code() != StatusCode::kNotFound) return a.status();
  }
  return Status::Ok();
}

}  // namespace gpupool::controller
