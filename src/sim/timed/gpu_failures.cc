#include "sim/timed/gpu_failures.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/file_util.h"
#include "common/strings.h"
#include "sim/csv_table.h"

namespace gpupool::sim {
namespace {

constexpr int64_t kUsPerS = 1'000'000;
constexpr int64_t kNoFailure = std::numeric_limits<int64_t>::max();

// Uniform in [0, 1).
double Unit(sched::Rng& rng) { return static_cast<double>(rng.Next() >> 11) * 0x1.0p-53; }

}  // namespace

Result<std::vector<GpuFailureEvent>> ParseGpuFailureEvents(std::string_view text,
                                                           const std::string& source) {
  GP_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Parse(text, source));
  GP_RETURN_IF_ERROR(t.RequireColumns({"time_s", "node", "gpu", "xid"}));
  for (const std::string& column : t.header()) {
    if (column != "time_s" && column != "node" && column != "gpu" && column != "xid") {
      return Status::InvalidArgument(
          fmt::format("{}:1: unknown column '{}'; GPU failure events have the columns "
                      "time_s,node,gpu,xid (docs/sim.md)",
                      source, SanitizeUtf8(column.substr(0, 40))));
    }
  }
  std::vector<GpuFailureEvent> events;
  events.reserve(t.num_rows());
  for (size_t r = 0; r < t.num_rows(); ++r) {
    GpuFailureEvent e;
    GP_ASSIGN_OR_RETURN(e.time_s, t.Int(r, "time_s", 0));
    e.node = std::string(Trim(t.Field(r, "node")));
    if (e.node.empty()) {
      return Status::InvalidArgument(t.Where(r, "node") + ": empty; give the node's name");
    }
    GP_ASSIGN_OR_RETURN(int64_t gpu, t.Int(r, "gpu", 0, 1023));
    GP_ASSIGN_OR_RETURN(int64_t xid, t.Int(r, "xid", 1, 100'000));
    e.gpu = static_cast<int32_t>(gpu);
    e.xid = static_cast<int>(xid);
    e.where = fmt::format("{}:{}", source, t.Line(r));
    events.push_back(std::move(e));
  }
  return events;
}

Result<std::vector<GpuFailureEvent>> ReadGpuFailureEventsFile(const std::string& path) {
  GP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, size_t{1} << 30));
  return ParseGpuFailureEvents(text, path);
}

const std::vector<XidWeight>& DefaultXidMix() {
  // Application-class Xids are the most frequent in field reports, then reset-class
  // ones (ECC, NVLink, GSP), then a GPU falling off the bus; docs/sim.md.
  static const std::vector<XidWeight> mix = {
      {13, 20}, {31, 25}, {43, 10}, {94, 5}, {48, 5}, {74, 10}, {95, 5}, {119, 10}, {79, 10},
  };
  return mix;
}

Result<std::vector<XidWeight>> ParseXidMix(std::string_view text) {
  std::vector<XidWeight> mix;
  for (const std::string& raw : Split(text, ',')) {
    const std::string entry(Trim(raw));
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    const std::optional<int64_t> xid =
        colon == std::string::npos ? std::nullopt : ParseInt64(Trim(entry.substr(0, colon)));
    const std::optional<double> weight =
        colon == std::string::npos ? std::nullopt : ParseDouble(Trim(entry.substr(colon + 1)));
    if (!xid || *xid <= 0 || *xid > 100'000 || !weight || !(*weight > 0) ||
        !std::isfinite(*weight)) {
      return Status::InvalidArgument(fmt::format(
          "Xid mix entry '{}': expected XID:WEIGHT with a positive Xid and weight, e.g. 79:1",
          SanitizeUtf8(entry.substr(0, 40))));
    }
    mix.push_back({static_cast<int>(*xid), *weight});
  }
  if (mix.empty()) return Status::InvalidArgument("the Xid mix is empty; give XID:WEIGHT,...");
  return mix;
}

GpuFailureModel::GpuFailureModel(GpuFailureOptions options, gpu::HealthPolicy policy)
    : o_(std::move(options)), policy_(std::move(policy)), rng_(o_.seed ^ 0x6770752d6661696cULL) {}

Result<GpuFailureModel> GpuFailureModel::Create(const sched::ClusterState& cluster,
                                                GpuFailureOptions options) {
  if (!(options.rate_per_gpu_day >= 0) || !std::isfinite(options.rate_per_gpu_day)) {
    return Status::InvalidArgument("GPU failure rate: must be a number >= 0 (per GPU per day)");
  }
  if (options.repair_s <= 0) {
    return Status::InvalidArgument("GPU repair time: must be at least 1 second");
  }
  if (options.mix.empty()) options.mix = DefaultXidMix();
  GP_ASSIGN_OR_RETURN(gpu::HealthPolicy policy, gpu::HealthPolicy::Create(options.health_xid));
  std::stable_sort(
      options.events.begin(), options.events.end(),
      [](const GpuFailureEvent& a, const GpuFailureEvent& b) { return a.time_s < b.time_s; });
  GpuFailureModel m(std::move(options), std::move(policy));
  const int32_t n = cluster.num_nodes();
  for (int32_t i = 0; i < n; ++i) {
    const sched::NodeState& node = cluster.node(i);
    m.names_.push_back(node.name);
    m.gpus_of_.push_back(node.num_gpus());
    for (int32_t g = 0; g < node.num_gpus(); ++g) m.gpu_list_.emplace_back(i, g);
    m.health_.emplace_back(static_cast<size_t>(node.num_gpus()));
    m.out_since_.emplace_back(static_cast<size_t>(node.num_gpus()), -1);
  }
  m.drained_.assign(static_cast<size_t>(n), false);
  m.drained_since_.assign(static_cast<size_t>(n), -1);
  for (size_t k = 0; k < m.o_.events.size(); ++k) {
    const GpuFailureEvent& e = m.o_.events[k];
    const std::string where =
        e.where.empty() ? fmt::format("GPU failure event {}", k + 1) : e.where;
    const int32_t node = cluster.FindNode(e.node);
    if (node < 0) {
      return Status::InvalidArgument(
          fmt::format("{}: field 'node': unknown node '{}'; the cluster's nodes are {}{}", where,
                      SanitizeUtf8(e.node.substr(0, 60)), n > 0 ? m.names_[0] : "none",
                      n > 1 ? fmt::format(" .. {}", m.names_.back()) : ""));
    }
    if (e.gpu < 0 || e.gpu >= m.gpus_of_[static_cast<size_t>(node)]) {
      return Status::InvalidArgument(fmt::format("{}: field 'gpu': node {} has no GPU {} ({} GPUs)",
                                                 where, e.node, e.gpu,
                                                 m.gpus_of_[static_cast<size_t>(node)]));
    }
    if (e.xid <= 0) return Status::InvalidArgument(where + ": field 'xid': must be positive");
    m.event_at_.emplace_back(node, e.gpu);
  }
  if (m.o_.rate_per_gpu_day > 0 && !m.gpu_list_.empty()) {
    m.next_draw_ = 0;
    m.ScheduleNextDraw();
  }
  return m;
}

void GpuFailureModel::ScheduleNextDraw() {
  // Failures of all GPUs together: a Poisson process of rate GPUs x rate per GPU.
  const double per_s = static_cast<double>(gpu_list_.size()) * o_.rate_per_gpu_day / 86400.0;
  next_draw_ += -std::log1p(-Unit(rng_)) / per_s;
}

int64_t GpuFailureModel::NextFailure() const {
  int64_t next = kNoFailure;
  if (next_event_ < o_.events.size()) next = o_.events[next_event_].time_s;
  if (next_draw_ >= 0 && next_draw_ < 9e18) {
    next = std::min(next, static_cast<int64_t>(std::ceil(next_draw_)));
  }
  return next;
}

int64_t GpuFailureModel::NextRepair() const {
  return repairs_.empty() ? kNoFailure : std::get<0>(repairs_.top());
}

std::pair<int32_t, GpuFailureEvent> GpuFailureModel::Draw(int64_t at) {
  const auto& [node, gpu] = gpu_list_[rng_.Uniform(gpu_list_.size())];
  double total = 0;
  for (const XidWeight& w : o_.mix) total += w.weight;
  double pick = Unit(rng_) * total;
  int xid = o_.mix.back().xid;
  for (const XidWeight& w : o_.mix) {
    if (pick < w.weight) {
      xid = w.xid;
      break;
    }
    pick -= w.weight;
  }
  return {node, {at, names_[static_cast<size_t>(node)], gpu, xid, ""}};
}

bool GpuFailureModel::Cordoned(int32_t node, int32_t gpu) const {
  return !gpu::TakesWork(health_[static_cast<size_t>(node)][static_cast<size_t>(gpu)].state);
}

bool GpuFailureModel::OutOfService(int32_t node, int32_t gpu) const {
  return drained_[static_cast<size_t>(node)] || Cordoned(node, gpu);
}

Result<std::vector<GpuHit>> GpuFailureModel::Fail(int64_t now, sched::ClusterState& cluster) {
  std::vector<std::pair<int32_t, GpuFailureEvent>> due;  // (node, event)
  while (next_event_ < o_.events.size() && o_.events[next_event_].time_s <= now) {
    due.emplace_back(event_at_[next_event_].first, o_.events[next_event_]);
    ++next_event_;
  }
  while (next_draw_ >= 0 && static_cast<int64_t>(std::ceil(next_draw_)) <= now) {
    due.push_back(Draw(now));
    ScheduleNextDraw();
  }
  std::vector<GpuHit> hits;
  for (const auto& [n, e] : due) {
    const auto ni = static_cast<size_t>(n);
    gpu::GpuHealth& h = health_[ni][static_cast<size_t>(e.gpu)];
    const bool was_out = Cordoned(n, e.gpu);
    // The live controller's policy, table and overrides: gpu::OnXid, with no attribution
    // (no holders: every Xid counts against the GPU, as before the controller pinned
    // application Xids on users).
    const gpu::XidOutcome o = gpu::OnXid(h, e.xid, 1, now * kUsPerS, policy_, /*holders=*/{});
    ++by_action_[std::string(gpu::HealthActionName(o.rule.action))];
    h = o.next;
    if (!was_out && Cordoned(n, e.gpu)) repairs_.emplace(now + o_.repair_s, n, e.gpu);
    if (o.cordon_node && !drained_[ni]) {
      drained_[ni] = true;
      drained_since_[ni] = now;
      repairs_.emplace(now + o_.repair_s, n, -1);
    }
    Account(n, now);
    GP_RETURN_IF_ERROR(Rehold(n, cluster));
    GpuHit hit;
    hit.node = n;
    hit.gpu = e.gpu;
    hit.fail_jobs = o.rule.action == gpu::HealthAction::kApplication;
    hit.end_jobs = o.end_jobs;
    hit.why =
        fmt::format("GPU {} on node {} failed: Xid {}: {}", e.gpu, names_[ni], e.xid, o.rule.what);
    if (hit.fail_jobs || hit.end_jobs) hits.push_back(std::move(hit));
  }
  return hits;
}

Status GpuFailureModel::Repair(int64_t now, sched::ClusterState& cluster, bool* freed) {
  std::set<int32_t> changed;
  while (!repairs_.empty() && std::get<0>(repairs_.top()) <= now) {
    const auto [at, n, g] = repairs_.top();
    repairs_.pop();
    const auto ni = static_cast<size_t>(n);
    const int64_t began = at - o_.repair_s;  // the outage this repair is for
    if (g < 0) {
      if (!drained_[ni] || drained_since_[ni] != began) continue;  // a later drain's
      drained_[ni] = false;
    } else {
      gpu::GpuHealth& h = health_[ni][static_cast<size_t>(g)];
      if (!Cordoned(n, g) || h.since_us != began * kUsPerS) continue;
      h = gpu::GpuHealth{};  // as `gpupool node resume NODE --gpu G` stores it
    }
    changed.insert(n);
  }
  for (int32_t n : changed) {
    GP_RETURN_IF_ERROR(Unhold(n, cluster));
    Account(n, now);
    GP_RETURN_IF_ERROR(Rehold(n, cluster));
    *freed = true;
  }
  return Status::Ok();
}

Status GpuFailureModel::Rehold(int32_t n, sched::ClusterState& cluster) {
  if (affected_.count(n) == 0) return Status::Ok();
  const sched::NodeState& node = cluster.node(n);
  std::vector<Hold>& holds = holds_[n];
  for (int32_t g = 0; g < node.num_gpus(); ++g) {
    const int32_t free = node.gpu_free_milli[static_cast<size_t>(g)];
    if (free <= 0 || !OutOfService(n, g)) continue;
    Hold h;
    h.task.name = fmt::format("out of service: GPU {} of {}", g, node.name);
    h.task.num_gpu = 1;
    h.task.gpu_milli = free;
    h.placement = {n, {g}};
    GP_RETURN_IF_ERROR(cluster.Allocate(h.task, h.placement));
    held_gpu_milli_ += free;
    holds.push_back(std::move(h));
  }
  if (drained_[static_cast<size_t>(n)] && (node.cpu_free_milli > 0 || node.memory_free_mib > 0)) {
    Hold h;
    h.task.name = "drained: " + node.name;
    h.task.cpu_milli = node.cpu_free_milli;
    h.task.memory_mib = node.memory_free_mib;
    h.placement = {n, {}};
    GP_RETURN_IF_ERROR(cluster.Allocate(h.task, h.placement));
    holds.push_back(std::move(h));
  }
  return Status::Ok();
}

Status GpuFailureModel::Unhold(int32_t n, sched::ClusterState& cluster) {
  auto it = holds_.find(n);
  if (it == holds_.end()) return Status::Ok();
  for (auto h = it->second.rbegin(); h != it->second.rend(); ++h) {
    GP_RETURN_IF_ERROR(cluster.Release(h->task, h->placement));
    held_gpu_milli_ -= h->task.TotalGpuMilli();
  }
  holds_.erase(it);
  return Status::Ok();
}

void GpuFailureModel::Account(int32_t n, int64_t now) {
  const auto ni = static_cast<size_t>(n);
  bool any = false;
  for (int32_t g = 0; g < gpus_of_[ni]; ++g) {
    int64_t& since = out_since_[ni][static_cast<size_t>(g)];
    const bool out = OutOfService(n, g);
    any = any || out;
    if (out && since < 0) since = now;
    if (!out && since >= 0) {
      out_gpu_s_ += static_cast<double>(now - since);
      since = -1;
    }
  }
  if (any || drained_[ni]) {
    affected_.insert(n);
  } else if (holds_.count(n) == 0) {
    affected_.erase(n);
  }
}

void GpuFailureModel::Finish(int64_t end) {
  for (int32_t n : affected_) {
    for (int64_t& since : out_since_[static_cast<size_t>(n)]) {
      if (since < 0 || since >= end) continue;
      out_gpu_s_ += static_cast<double>(end - since);
      since = end;
    }
  }
}

}  // namespace gpupool::sim
