// Controller: GPU health (issue 29, gpu/health_policy.h, docs/health.md). The Xids the
// agents report in their telemetry move each GPU's health by the policy's table; a GPU
// out of service takes no new work (the scheduler counts it as fully used), the jobs
// on a failed GPU end (or requeue), and a reboot-class Xid drains the whole node.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <set>

#include "common/json.h"
#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"

namespace gpupool::controller {

using jobs::Job;

std::string GpuHealthToJson(const std::map<std::string, gpu::GpuHealth>& health) {
  Json out = Json::object();
  for (const auto& [uuid, h] : health) {
    if (h.state == gpu::GpuHealthState::kHealthy && h.recent_us.empty() && h.strikes == 0 &&
        h.levels.empty()) {
      continue;
    }
    out[uuid] = {{"state", gpu::GpuHealthStateName(h.state)},
                 {"reason", h.reason},
                 {"evidence", h.evidence},
                 {"since_us", h.since_us},
                 {"by", h.by},
                 {"recent_us", h.recent_us}};
    if (h.strikes > 0) out[uuid]["strikes"] = h.strikes;
    if (!h.strike_us.empty()) out[uuid]["strike_us"] = h.strike_us;
    if (h.last_error_us > 0) out[uuid]["last_error_us"] = h.last_error_us;
    if (!h.recent_users.empty()) out[uuid]["recent_users"] = h.recent_users;
    if (!h.levels.empty()) out[uuid]["levels"] = h.levels;
  }
  return out.empty() ? std::string() : DumpJson(out);
}

Result<std::map<std::string, gpu::GpuHealth>> GpuHealthFromJson(const std::string& text,
                                                                const std::string& where) {
  std::map<std::string, gpu::GpuHealth> out;
  if (text.empty()) return out;
  GP_ASSIGN_OR_RETURN(Json j, ParseJson(text, where));
  if (!j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = where + "." + it.key();
    if (!it->is_object()) return Status::InvalidArgument(path + ": not an object");
    gpu::GpuHealth h;
    std::string state;
    JsonFields f(*it, path);
    f.Required("state", &state);
    f.Optional("reason", &h.reason);
    f.Optional("evidence", &h.evidence);
    f.Optional("since_us", &h.since_us);
    f.Optional("by", &h.by);
    f.Optional("strikes", &h.strikes, 0, 1'000'000);
    f.Optional("last_error_us", &h.last_error_us, 0);
    if (const Json* at = f.Array("strike_us")) {
      for (const Json& t : *at) {
        if (!t.is_number_integer()) {
          f.Fail("strike_us", "not a list of integers");
          break;
        }
        if (h.strike_us.size() < 1'000) h.strike_us.push_back(t.get<int64_t>());
      }
    }
    if (const Json* recent = f.Array("recent_us")) {
      for (const Json& t : *recent) {
        if (!t.is_number_integer()) {
          f.Fail("recent_us", "not a list of integers");
          break;
        }
        h.recent_us.push_back(t.get<int64_t>());
      }
    }
    // Absent in a record from before attribution: its Xids count against the GPU.
    if (const Json* users = f.Array("recent_users")) {
      for (const Json& at : *users) {
        if (!at.is_array() ||
            !std::all_of(at.begin(), at.end(), [](const Json& u) { return u.is_string(); })) {
          f.Fail("recent_users", "not a list of lists of user names");
          break;
        }
        h.recent_users.push_back(at.get<std::vector<std::string>>());
      }
    }
    if (const Json* levels = f.Member("levels"); levels != nullptr && levels->is_object()) {
      for (auto l = levels->begin(); l != levels->end(); ++l) {
        if (l->is_number_integer() && l->get<int64_t>() >= 1 && l->get<int64_t>() <= 2) {
          h.levels[l.key()] = static_cast<int>(l->get<int64_t>());
        }
      }
    }
    GP_RETURN_IF_ERROR(f.Finish());
    bool known = false;
    for (auto s : {gpu::GpuHealthState::kHealthy, gpu::GpuHealthState::kSuspect,
                   gpu::GpuHealthState::kCordoned, gpu::GpuHealthState::kFailed}) {
      if (gpu::GpuHealthStateName(s) == state) {
        h.state = s;
        known = true;
      }
    }
    if (!known) return Status::InvalidArgument(path + ".state: unknown state '" + state + "'");
    out[it.key()] = std::move(h);
  }
  return out;
}

Status Controller::StoreGpuHealth(const std::string& node) {
  MutexLock write(node_write_mu_);
  std::string health;
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(node);
    if (n == nodes_.end()) return Status::Ok();
    health = GpuHealthToJson(n->second.gpu_health);
  }
  GP_ASSIGN_OR_RETURN(std::vector<store::NodeRecord> records, store_->ListNodes());
  for (store::NodeRecord& r : records) {
    if (r.name != node) continue;
    if (r.gpu_health_json == health) return Status::Ok();
    r.gpu_health_json = health;
    return store_->PutNode(r);
  }
  return Status::Ok();  // not stored yet: its registration stores it
}

void Controller::NoteGpusLetGo(const Job& before, const Job* after) {
  if (!internal::Occupies(before)) return;
  const bool holds = after != nullptr && internal::Occupies(*after);
  if (holds && after->placement == before.placement) return;  // most changes: the same GPUs
  const int64_t now = clock_->NowMicros();
  for (const jobs::TaskPlacement& p : before.placement) {
    if (holds &&
        std::find(after->placement.begin(), after->placement.end(), p) != after->placement.end()) {
      continue;
    }
    auto n = nodes_.find(p.node);
    if (n == nodes_.end()) continue;
    for (const std::string& uuid : p.gpu_uuids) {
      std::map<std::string, int64_t>& users = n->second.let_go_us[uuid];
      std::erase_if(users,
                    [&](const auto& u) { return u.second < now - internal::kXidHolderWindowUs; });
      users[before.user] = now;
    }
  }
}

std::vector<std::string> Controller::XidHolders(const std::string& node, const NodeEntry& e,
                                                const gpu::GpuInfo& gpu, int64_t now) const {
  std::set<std::string> devices = {gpu.uuid};  // the GPU, and its MIG instances
  for (const gpu::MigDevice& m : gpu.mig_devices) devices.insert(m.uuid);
  std::vector<std::string> users;
  for (int64_t id : index_.OnNode(node)) {
    auto job = active_.find(id);
    if (job == active_.end()) continue;
    for (const jobs::TaskPlacement& p : job->second.placement) {
      if (p.node == node && std::any_of(p.gpu_uuids.begin(), p.gpu_uuids.end(),
                                        [&](const std::string& u) { return devices.count(u); })) {
        users.push_back(job->second.user);
      }
    }
  }
  for (const std::string& d : devices) {
    auto let_go = e.let_go_us.find(d);
    if (let_go == e.let_go_us.end()) continue;
    for (const auto& [user, at] : let_go->second) {
      if (at >= now - internal::kXidHolderWindowUs) users.push_back(user);
    }
  }
  return users;
}

Status Controller::ObserveGpuErrors(const std::string& node,
                                    const std::vector<protocol::GpuTelemetry>& samples) {
  std::vector<Change> failed;  // the jobs on GPUs that failed
  std::string drain_reason;    // a reboot-class Xid: the whole node
  bool changed = false;        // some GPU's health: stored below
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(node);
    if (n == nodes_.end()) return Status::NotFound("node " + node + " is not registered");
    NodeEntry& e = n->second;
    const int64_t now = clock_->NowMicros();
    for (const protocol::GpuTelemetry& s : samples) {  // oldest first
      if (!s.xid_count || !s.xid_errors || *s.xid_errors <= 0) continue;
      // Only the node's own GPUs: a node cannot report on another's.
      auto ours = std::find_if(e.info.gpus.begin(), e.info.gpus.end(),
                               [&](const gpu::GpuInfo& g) { return g.uuid == s.uuid; });
      if (ours == e.info.gpus.end()) continue;
      int64_t& seen = e.xid_count_seen[s.uuid];  // counts restart with the agent
      const int64_t fresh = *s.xid_count - seen;
      seen = *s.xid_count;
      if (fresh <= 0) continue;
      gpu::GpuHealth& health = e.gpu_health[s.uuid];
      const auto xid = static_cast<int>(std::min<int64_t>(*s.xid_errors, INT32_MAX));
      // An application Xid is pinned on the users whose jobs held the GPU (or just let it
      // go): their repeats alone do not take it out of service.
      const std::vector<std::string> holders = XidHolders(node, e, *ours, now);
      gpu::XidOutcome o = gpu::OnXid(health, xid, fresh, now, health_policy_, holders);
      if (o.pinned_on_user) {
        std::string users;
        for (const std::string& u : o.next.recent_users.back()) {
          users += (users.empty() ? "" : ", ") + u;
        }
        spdlog::info(
            "node {} GPU {} ({}): Xid {} {} times within {} min, each with jobs of one same "
            "user on it (holders now: {}): theirs, not the GPU's fault; it stays in service",
            node, s.index, s.uuid, xid, o.next.recent_us.size(),
            health_policy_.repeat_window_us / 60'000'000, users);
      }
      const bool takes_out = (gpu::TakesWork(health.state) && !gpu::TakesWork(o.next.state)) ||
                             (o.cordon_node && !e.draining);
      if (takes_out && !BreakerAllows(node, now)) {
        HoldBack(node, s.uuid, &o);
        o.next.strikes = health.strikes;  // held back: no strike
        o.next.strike_us = health.strike_us;
      }
      if (o.changed && o.next.state != health.state) {
        spdlog::warn("node {} GPU {} ({}): {} -> {}: {}", node, s.index, s.uuid,
                     gpu::GpuHealthStateName(health.state), gpu::GpuHealthStateName(o.next.state),
                     o.next.reason);
        capacity_changed_ = true;
      }
      changed = changed || o.changed;
      health = o.next;
      const std::string why = "Xid " + std::to_string(*s.xid_errors) + ": " + o.rule.what;
      if (o.end_jobs) {
        lifecycle::GpuFailed event{node, s.uuid, why, {}};
        for (const gpu::GpuInfo& g : e.info.gpus) {
          if (g.uuid != s.uuid) continue;
          for (const gpu::MigDevice& m : g.mig_devices) event.mig_uuids.push_back(m.uuid);
        }
        for (int64_t id : index_.OnNode(node)) failed.push_back({id, event, {}});
      }
      if (o.cordon_node && !e.draining) drain_reason = "health: GPU " + s.uuid + " " + why;
    }
    if (capacity_changed_) WakeScheduler();
  }
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers,
                      Commit(std::move(failed), OnConflict::kRetry));
  LogRefusals("GPU health", answers);
  if (changed) GP_RETURN_IF_ERROR(StoreGpuHealth(node));
  if (!drain_reason.empty()) GP_RETURN_IF_ERROR(SetDrain(node, true, drain_reason, "").status());
  return Status::Ok();
}

namespace {

constexpr char kHealthCheck[] = "health-check";
constexpr char kHealthCheckDrain[] = "health check: ";

std::string Evidence(const std::string& output) {
  std::string tail = output.size() > 500 ? output.substr(output.size() - 500) : output;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return "health check output: " + tail;
}

}  // namespace

Status Controller::ObserveHealthReport(const std::string& node,
                                       const protocol::HealthReport& report) {
  bool changed = false;
  std::string drain;  // drain the node, with this reason
  bool undrain = false;
  std::string seen;  // the drain as read
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(node);
    if (n == nodes_.end()) return Status::NotFound("node " + node + " is not registered");
    NodeEntry& e = n->second;
    if (e.draining) seen = e.drain_reason;
    const int64_t now = clock_->NowMicros();
    if (e.health_pending) {  // the first verdict since it registered: it may take work now
      e.health_pending = false;
      capacity_changed_ = true;
    }
    for (const gpu::GpuInfo& g : e.info.gpus) {
      auto bad =
          std::find_if(report.gpus.begin(), report.gpus.end(),
                       [&](const protocol::HealthReportGpu& b) { return b.index == g.index; });
      gpu::GpuHealth& h = e.gpu_health[g.uuid];
      if (bad != report.gpus.end()) {
        if (!gpu::TakesWork(h.state)) continue;  // out of service already (it stays so)
        gpu::XidOutcome o;
        o.next.strikes = h.strikes;  // the policy's record is kept
        o.next.strike_us = h.strike_us;
        o.next.last_error_us = h.last_error_us;
        o.next.state = gpu::GpuHealthState::kCordoned;
        o.next.reason = "health check: " + (bad->reason.empty() ? "named bad" : bad->reason);
        o.next.evidence = Evidence(report.output);
        o.next.since_us = now;
        o.next.by = kHealthCheck;
        o.rule.what = o.next.reason;
        if (!BreakerAllows(node, now)) HoldBack(node, g.uuid, &o);
        spdlog::warn("node {} GPU {} ({}): {} -> {}: {}", node, g.index, g.uuid,
                     gpu::GpuHealthStateName(h.state), gpu::GpuHealthStateName(o.next.state),
                     o.next.reason);
        h = o.next;
        changed = true;
        capacity_changed_ = true;
      } else if (report.passed && h.by == kHealthCheck && !gpu::TakesWork(h.state)) {
        spdlog::info("node {} GPU {} ({}) back in service: the health check passed (was: {})", node,
                     g.index, g.uuid, h.reason);
        gpu::GpuHealth back;
        back.since_us = now;
        back.by = kHealthCheck;
        back.strikes = h.strikes;
        back.strike_us = h.strike_us;
        back.last_error_us = h.last_error_us;
        back.levels = h.levels;  // the thresholds' levels stay
        h = std::move(back);
        changed = true;
        capacity_changed_ = true;
      } else if (report.passed && gpu::ResumeIfProven(&h, now, options_.health_resume_after_us)) {
        // Resume only when proven: the policy's cordon, after a quiet period and a pass.
        spdlog::info("node {} GPU {} ({}) {}", node, g.index, g.uuid, h.reason);
        changed = true;
        capacity_changed_ = true;
      }
    }
    const bool drained_by_check = e.draining && e.drain_reason.rfind(kHealthCheckDrain, 0) == 0;
    if (!report.node_reason.empty() && !e.draining) {
      if (BreakerAllows(node, now)) {
        drain = kHealthCheckDrain + report.node_reason;
      } else {
        ++health_actions_held_;
        spdlog::error(
            "node {}: the health check failed ({}), but the health circuit breaker "
            "holds: not drained",
            node, report.node_reason);
      }
    } else if (report.passed && drained_by_check) {
      undrain = true;
    }
    if (capacity_changed_) WakeScheduler();
  }
  if (changed) GP_RETURN_IF_ERROR(StoreGpuHealth(node));
  if (!drain.empty()) GP_RETURN_IF_ERROR(SetDrain(node, true, drain, seen).status());
  if (undrain) GP_RETURN_IF_ERROR(SetDrain(node, false, "", seen).status());
  return Status::Ok();
}

namespace {

constexpr char kDiskDrain[] = "disk pressure: ";

// An admin's drain ends in " (USER)" (DrainNode); automatic ones end otherwise.
bool ByAnAdmin(const std::string& drain_reason) {
  const size_t open = drain_reason.rfind(" (");
  if (open == std::string::npos || !drain_reason.ends_with(')')) return false;
  const std::string_view user =
      std::string_view(drain_reason).substr(open + 2, drain_reason.size() - open - 3);
  return !user.empty() && user.find_first_of(" ()") == std::string_view::npos;
}

// A drain the end of disk pressure lifts: the disk watch's own, and one for a job the node
// could not start for want of room (controller_nodes.cc, DrainAfterLaunchFailure); never
// an admin's, whatever its words.
bool LiftedByDiskRoom(const std::string& drain_reason) {
  if (ByAnAdmin(drain_reason)) return false;
  if (drain_reason.starts_with(kDiskDrain)) return true;
  return drain_reason.starts_with("could not start job ") &&
         (drain_reason.find("No space left on device") != std::string::npos ||
          drain_reason.find("Disk quota exceeded") != std::string::npos);
}

}  // namespace

Status Controller::ObserveDiskReport(const std::string& node, const protocol::DiskReport& report) {
  std::string drain;  // drain the node, with this reason
  bool undrain = false;
  std::string seen;  // the drain as read
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(node);
    if (n == nodes_.end()) return Status::NotFound("node " + node + " is not registered");
    NodeEntry& e = n->second;
    e.disk = report;
    if (e.draining) seen = e.drain_reason;
    // Not under the breaker: room on a disk is measured, not inferred from errors, and a
    // shared filesystem that fills up does stop every node on it.
    if (report.pressure && !e.draining) {
      drain = kDiskDrain + report.reason;
    } else if (!report.pressure && e.draining && LiftedByDiskRoom(e.drain_reason)) {
      undrain = true;
      spdlog::info("node {} back in service: its disk has room again ({} bytes free; was: {})",
                   node, report.free_bytes, e.drain_reason);
    }
  }
  if (!drain.empty()) {
    spdlog::error("node {} drained: {}", node, drain);
    GP_RETURN_IF_ERROR(SetDrain(node, true, drain, seen).status());
  }
  if (undrain) GP_RETURN_IF_ERROR(SetDrain(node, false, "", seen).status());
  return Status::Ok();
}

bool Controller::BreakerAllows(const std::string& node, int64_t now) {
  const int64_t hour = int64_t{3600} * 1'000'000;
  while (!auto_cordons_.empty() && auto_cordons_.front().first <= now - hour) {
    auto_cordons_.pop_front();
  }
  std::set<std::string> nodes = {node};
  for (const auto& [at, name] : auto_cordons_) nodes.insert(name);
  const auto limit = std::max<int64_t>(1, static_cast<int64_t>(options_.health_breaker_fraction *
                                                               static_cast<double>(nodes_.size())));
  if (static_cast<int64_t>(nodes.size()) > limit) return false;
  auto_cordons_.emplace_back(now, node);
  return true;
}

void Controller::HoldBack(const std::string& node, const std::string& uuid, gpu::XidOutcome* o) {
  // Recorded and alerted, not acted on (as NVSentinel's breaker): too many nodes were
  // taken out of service automatically within the hour for this to be the hardware.
  const int64_t limit = std::max<int64_t>(
      1,
      static_cast<int64_t>(options_.health_breaker_fraction * static_cast<double>(nodes_.size())));
  o->next.state = gpu::GpuHealthState::kSuspect;
  o->next.reason = "would be taken out of service (" + o->rule.what +
                   "), but the health circuit breaker holds: " + std::to_string(limit) +
                   " node(s) (--health-breaker of the pool's nodes) were already taken out "
                   "automatically within the hour";
  o->end_jobs = false;
  o->cordon_node = false;
  o->changed = true;
  ++health_actions_held_;
  spdlog::error("node {} GPU {}: {}", node, uuid, o->next.reason);
}

Result<NodeView> Controller::ResumeGpu(const std::string& node, const std::string& gpu,
                                       const Caller& caller) {
  if (!caller.admin) {
    return Status::PermissionDenied("only admins resume GPUs (you are " + caller.user + ")");
  }
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(node);
    if (n == nodes_.end()) {
      return Status::NotFound("node " + node + " is not known: `gpupool nodes` lists the nodes");
    }
    NodeEntry& e = n->second;
    auto g = std::find_if(e.info.gpus.begin(), e.info.gpus.end(), [&](const gpu::GpuInfo& i) {
      return i.uuid == gpu || std::to_string(i.index) == gpu;
    });
    if (g == e.info.gpus.end()) {
      return Status::NotFound("gpu: node " + node + " has no GPU '" + gpu +
                              "': give its index or UUID as `gpupool nodes --json` lists them");
    }
    gpu::GpuHealth& h = e.gpu_health[g->uuid];
    if (gpu::TakesWork(h.state)) {
      return Status::FailedPrecondition("GPU " + std::to_string(g->index) + " of node " + node +
                                        " is " + std::string(gpu::GpuHealthStateName(h.state)) +
                                        ": it takes work already");
    }
    spdlog::info("node {} GPU {} ({}) resumed by {} (was {}: {})", node, g->index, g->uuid,
                 caller.user, gpu::GpuHealthStateName(h.state), h.reason);
    gpu::GpuHealth back;
    back.since_us = clock_->NowMicros();
    back.by = caller.user;
    // A failed GPU was serviced: its strikes start again. A cordoned one keeps them.
    if (h.state != gpu::GpuHealthState::kFailed) {
      back.strikes = h.strikes;
      back.strike_us = h.strike_us;
      back.last_error_us = h.last_error_us;
    }
    back.levels = h.levels;  // the thresholds' levels stay
    h = std::move(back);
    WakeScheduler();
  }
  GP_RETURN_IF_ERROR(StoreGpuHealth(node));
  for (NodeView& v : Nodes()) {
    if (v.name == node) return std::move(v);
  }
  return Status::NotFound("node " + node);
}

}  // namespace gpupool::controller
