// The pool's nodes as GET /v1/nodes shows them (with their GPUs' latest telemetry), and
// drain and resume.
#include "controller/api/handlers.h"
#include "controller/telemetry_service.h"
#include "gpu/node_json.h"
#include "protocol/hardware_health_json.h"

namespace gpupool::controller::api {
namespace {

// A GPU's latest telemetry as GET /v1/nodes shows it (fields absent when unknown).
OrderedJson GpuTelemetryToJson(const protocol::GpuTelemetry& t) {
  OrderedJson j = {{"at_ms", t.at_ms}};
  if (t.util_pct) j["util_pct"] = *t.util_pct;
  if (t.mem_used_mib) j["mem_used_mib"] = *t.mem_used_mib;
  if (t.mem_total_mib) j["mem_total_mib"] = *t.mem_total_mib;
  if (t.power_w) j["power_w"] = *t.power_w;
  if (t.temp_c) j["temp_c"] = *t.temp_c;
  if (t.xid_errors) j["xid_errors"] = *t.xid_errors;
  if (t.xid_count) j["xid_count"] = *t.xid_count;
  if (t.ecc_uncorrected) j["ecc_uncorrected"] = *t.ecc_uncorrected;
  protocol::EncodeHardwareHealth(t.hw, &j);  // the health readings, as the agent sent them
  return j;
}

// Who holds a GPU, as `caller` may see it: admins see every holder's job and user, a user
// their own jobs' and only the share of another user's (docs/security.md: a user does not
// read another user's jobs).
OrderedJson HoldersToJson(const std::vector<NodeView::Holder>& holders, const Caller& caller) {
  OrderedJson out = OrderedJson::array();
  for (const NodeView::Holder& h : holders) {
    OrderedJson one;
    if (caller.admin || h.user == caller.user) {
      one["job_id"] = h.job_id;
      if (h.array_id != 0) {
        one["array_id"] = h.array_id;
        one["array_index"] = h.array_index;
      }
      one["user"] = h.user;
    } else {
      one["other_user"] = true;
    }
    one["gpu_milli"] = h.gpu_milli;
    out.push_back(std::move(one));
  }
  return out;
}

// `latest`: the node's GPUs' latest telemetry by index (none for a node that is down).
// `lease_us`: the server's node lease (0: none), given for a node that is down.
OrderedJson NodeViewToJson(const NodeView& v, const Caller& caller, int64_t lease_us,
                           const std::map<int, protocol::GpuTelemetry>& latest = {}) {
  OrderedJson gpus = OrderedJson::array();
  for (size_t g = 0; g < v.info.gpus.size(); ++g) {
    const gpu::GpuInfo& gi = v.info.gpus[g];
    gpus.push_back({{"index", gi.index},
                    {"vendor", gpu::VendorName(gi.vendor)},
                    {"name", gi.name},
                    {"uuid", gi.uuid},
                    {"memory_total_bytes", gi.memory_total_bytes},
                    {"allocated_milli", v.allocated_milli[g]},
                    {"holders", g < v.holders.size() ? HoldersToJson(v.holders[g], caller)
                                                     : OrderedJson::array()}});
    // How a share of it is enforced (gpu_info.h), where its agent stated it.
    if (!gi.enforcement.empty()) gpus.back()["enforcement"] = gi.enforcement;
    // AMD partitioning as the admin set it (docs/sharing.md, "AMD GPUs").
    if (!gi.compute_partition.empty()) gpus.back()["compute_partition"] = gi.compute_partition;
    if (!gi.memory_partition.empty()) gpus.back()["memory_partition"] = gi.memory_partition;
    if (gi.compute_units > 0) gpus.back()["compute_units"] = gi.compute_units;
    // A GPU in MIG mode: its instances, each granted whole to one job (docs/sharing.md).
    if (gi.mig_enabled.value_or(false)) {
      OrderedJson instances = OrderedJson::array();
      for (const gpu::MigDevice& m : gi.mig_devices) {
        instances.push_back({{"uuid", m.uuid},
                             {"profile", m.profile},
                             {"memory_total_bytes", m.memory_total_bytes}});
        if (auto held = v.mig_jobs.find(m.uuid); held != v.mig_jobs.end() && !m.uuid.empty()) {
          // As for holders: the job only to admins and its own user, an array's element
          // with its array_id and array_index (shown as ARRAY_INDEX, as in holders).
          const NodeView::Holder* holder = nullptr;
          if (g < v.holders.size()) {
            for (const NodeView::Holder& h : v.holders[g]) {
              if (h.job_id == held->second) holder = &h;
            }
          }
          OrderedJson& one = instances.back();
          if (caller.admin || (holder != nullptr && holder->user == caller.user)) {
            one["job"] = held->second;
            if (holder != nullptr && holder->array_id != 0) {
              one["array_id"] = holder->array_id;
              one["array_index"] = holder->array_index;
            }
          } else {
            one["other_user"] = true;
          }
        } else if (v.out_of_service.contains(g)) {
          // Not held, but its GPU takes no new work: not free (docs/sharing.md).
          instances.back()["out_of_service"] = true;
        }
      }
      gpus.back()["mig_devices"] = std::move(instances);
    }
    // Why it takes no new work, where it takes none (health, layout, a stopped job).
    if (auto out = v.out_of_service.find(g); out != v.out_of_service.end()) {
      gpus.back()["out_of_service"] = out->second;
    }
    // Its layout changed under running jobs: theirs until they end (docs/sharing.md).
    if (auto held = v.layout_held.find(g); held != v.layout_held.end()) {
      gpus.back()["layout_changed_under"] = HoldersToJson(held->second, caller);
    }
    if (auto t = latest.find(gi.index); t != latest.end() && v.state != "down") {
      gpus.back()["telemetry"] = GpuTelemetryToJson(t->second);
    }
    if (auto h = v.gpu_health.find(gi.uuid); h != v.gpu_health.end()) {
      gpus.back()["health"] = {{"state", gpu::GpuHealthStateName(h->second.state)},
                               {"reason", h->second.reason},
                               {"evidence", h->second.evidence},
                               {"since_us", h->second.since_us},
                               {"by", h->second.by}};
      if (h->second.strikes > 0) gpus.back()["health"]["strikes"] = h->second.strikes;
    }
  }
  OrderedJson out = {{"name", v.name},
                     {"state", v.state},
                     {"address", v.address},
                     {"protocol", v.protocol},
                     {"last_heartbeat_us", v.last_seen_us},
                     {"cpu_milli", v.cpu_milli},
                     {"cpu_allocated_milli", v.cpu_allocated_milli},
                     {"memory_mib", v.memory_mib},
                     {"memory_allocated_mib", v.memory_allocated_mib},
                     {"gpus", std::move(gpus)},
                     {"running_jobs", v.running_jobs}};
  if (!v.drain_reason.empty()) out["drain_reason"] = v.drain_reason;
  // Until when its supervisors may still run its --requeue and preemptible jobs
  // (docs/health.md, "A node cut off from the controller").
  if (v.state == "down" && lease_us > 0) out["lease_until_us"] = v.last_seen_us + lease_us;
  if (v.health_pending) out["health_check_pending"] = true;
  if (v.disk) out["disk"] = protocol::EncodeDiskReport(*v.disk);
  return out;
}

}  // namespace

net::HttpResponse ListNodes(const ApiContext& ctx, const Call& c) {
  const int64_t lease_us = ctx.controller->options().node_lease_us;
  OrderedJson nodes = OrderedJson::array();
  for (const NodeView& v : ctx.controller->Nodes()) {
    nodes.push_back(
        NodeViewToJson(v, c.caller, lease_us, ctx.telemetry->hub().LatestOfNode(v.name)));
  }
  return JsonResponse(200, {{"nodes", std::move(nodes)}});
}

// Admins only (the route table), as is ResumeNode.
net::HttpResponse DrainNode(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 16 << 10, 4, /*empty_is_object=*/true);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonFields f(*body, "");
  std::string reason;
  f.Required("reason", &reason);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  Result<NodeView> v = ctx.controller->DrainNode(c.Param("name"), reason, c.caller);
  if (!v.ok()) return ErrorResponse(v.status());
  return JsonResponse(
      200, {{"node", NodeViewToJson(*v, c.caller, ctx.controller->options().node_lease_us)}});
}

net::HttpResponse ResumeNode(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 16 << 10, 4, /*empty_is_object=*/true);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonFields f(*body, "");
  std::string gpu;  // one GPU back in service (docs/health.md), not the node
  f.Optional("gpu", &gpu);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  Result<NodeView> v = gpu.empty() ? ctx.controller->ResumeNode(c.Param("name"), c.caller)
                                   : ctx.controller->ResumeGpu(c.Param("name"), gpu, c.caller);
  if (!v.ok()) return ErrorResponse(v.status());
  return JsonResponse(
      200, {{"node", NodeViewToJson(*v, c.caller, ctx.controller->options().node_lease_us)}});
}

}  // namespace gpupool::controller::api
