// SchedInput with the cluster kept between passes (KeptCluster, sched_input.h): what
// changed since the last pass is allocated or released instead of every job again.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "controller/sched_input.h"

namespace gpupool::controller {
namespace {

KeptCluster::GpuShape GpuShapeOf(const gpu::GpuInfo& g) {
  KeptCluster::GpuShape s;
  s.vendor = g.vendor;
  s.name = g.name;
  s.uuid = g.uuid;
  s.enforcement = g.enforcement;
  s.memory_total_bytes = g.memory_total_bytes;
  s.capability = g.compute_capability;
  s.mig_enabled = g.mig_enabled;
  for (const gpu::MigDevice& m : g.mig_devices) s.mig.emplace_back(m.uuid, m.memory_total_bytes);
  return s;
}

bool SameGpuShape(const KeptCluster::GpuShape& s, const gpu::GpuInfo& g) {
  if (s.vendor != g.vendor || s.memory_total_bytes != g.memory_total_bytes || s.name != g.name ||
      s.uuid != g.uuid || s.enforcement != g.enforcement || s.capability != g.compute_capability ||
      s.mig_enabled != g.mig_enabled || s.mig.size() != g.mig_devices.size()) {
    return false;
  }
  for (size_t m = 0; m < s.mig.size(); ++m) {
    if (s.mig[m].first != g.mig_devices[m].uuid ||
        s.mig[m].second != g.mig_devices[m].memory_total_bytes) {
      return false;
    }
  }
  return true;
}

bool SameNodeShape(const KeptCluster::NodeShape& s, const SchedNode& n) {
  if (s.name != n.name || s.cpu_milli != n.cpu_milli || s.memory_mib != n.memory_mib ||
      s.has_info != (n.info != nullptr)) {
    return false;
  }
  const size_t gpus = n.info == nullptr ? 0 : n.info->gpus.size();
  if (s.gpus.size() != gpus) return false;
  for (size_t g = 0; g < gpus; ++g) {
    if (!SameGpuShape(s.gpus[g], n.info->gpus[g])) return false;
  }
  return true;
}

int64_t JobStartS(const jobs::Job& job) {
  return (job.start_time_us > 0 ? job.start_time_us : job.submit_time_us) / 1'000'000;
}

}  // namespace

bool SchedInput::SameNodes(const std::vector<SchedNode>& nodes, KeptCluster* kept) {
  bool same = kept->valid && kept->shapes.size() == nodes.size();
  for (size_t i = 0; same && i < nodes.size(); ++i) same = SameNodeShape(kept->shapes[i], nodes[i]);
  if (same) return true;
  kept->shapes.clear();
  for (const SchedNode& n : nodes) {
    KeptCluster::NodeShape& s = kept->shapes.emplace_back();
    s.name = n.name;
    s.cpu_milli = n.cpu_milli;
    s.memory_mib = n.memory_mib;
    s.has_info = n.info != nullptr;
    if (n.info == nullptr) continue;
    for (const gpu::GpuInfo& g : n.info->gpus) s.gpus.push_back(GpuShapeOf(g));
  }
  return false;
}

void SchedInput::ResetKept() {
  kept_->base = kept_->layout.idle;
  kept_->occupants.clear();
  kept_->running.clear();
  kept_->rebuilt = true;
}

void SchedInput::Unoccupy(KeptCluster::Occupant& o) {
  const std::vector<sched::Placement>& placements =
      o.in_running ? kept_->running[o.slot].placements : o.fresh;
  for (size_t t = 0; t < placements.size(); ++t) {
    // Allocated whole and with its owner (else the pass was a conflict and built again).
    (void)kept_->base.Release(o.tasks[t], placements[t]);
  }
  o.allocated = false;
  ++kept_->released;
}

bool SchedInput::OccupyKept(const jobs::Job& job, const sched::QueuedJob& q, uint64_t generation,
                            KeptCluster::Occupant& o) {
  o.q = &q;
  o.generation = generation;
  o.source = &job;
  o.version = job.version;
  o.placement = job.placement;
  o.allocated = false;
  o.in_running = false;
  o.fresh.clear();
  if (!Resolve(job, q, &o.fresh)) return false;  // the same in any order: no conflict
  bool conflict = false;
  o.allocated = AllocateTasks(kept_->base, q.tasks, o.fresh, &conflict);
  if (o.allocated) o.tasks = q.tasks;
  ++kept_->allocated;
  return conflict;
}

void SchedInput::AddJobsKept(const std::vector<const jobs::Job*>& active,
                             const AdmissionFeed& feed) {
  KeptCluster& k = *kept_;
  ++k.pass;
  k.rebuilt = false;
  k.allocated = k.released = 0;
  if (k.conflict) ResetKept();
  struct Seen {
    const jobs::Job* job;
    const sched::QueuedJob* q;
    uint64_t generation;
    KeptCluster::Occupant* o;
  };
  std::vector<Seen> seen;    // every occupant, in the order given
  std::vector<size_t> todo;  // seen[i] to allocate
  bool reordered = false;    // `running` no longer holds the allocated occupants in order
  size_t next_slot = 0;
  uint64_t generation = 0;
  for (const jobs::Job* job : active) {
    const sched::QueuedJob* q = TakeJob(*job, feed, &generation);
    if (q == nullptr || !q->admission.unplaceable.empty()) continue;
    auto [it, fresh] = k.occupants.try_emplace(job->id);
    KeptCluster::Occupant& o = it->second;
    o.pass = k.pass;
    seen.push_back({job, q, generation, &o});
    if (!fresh && o.q == q && o.generation == generation &&
        ((cache_->by_version && o.source == job && o.version == job->version) ||
         o.placement == job->placement)) {
      o.source = job;
      o.version = job->version;
      if (o.allocated && o.slot != next_slot++) reordered = true;
      continue;
    }
    reordered = true;
    if (o.allocated) Unoccupy(o);
    o.allocated = o.in_running = false;
    todo.push_back(seen.size() - 1);
  }
  if (k.occupants.size() > seen.size()) {  // jobs that no longer occupy anything
    reordered = true;
    for (auto it = k.occupants.begin(); it != k.occupants.end();) {
      if (it->second.pass == k.pass) {
        ++it;
        continue;
      }
      if (it->second.allocated) Unoccupy(it->second);
      it = k.occupants.erase(it);
    }
  }
  ForgetUnseenConversions(active.size());
  bool conflict = false;
  for (size_t i : todo)
    conflict |= OccupyKept(*seen[i].job, *seen[i].q, seen[i].generation, *seen[i].o);
  if (conflict) {
    // Allocated in another order the cluster could differ: built from every job in order.
    ResetKept();
    conflict = false;
    for (Seen& s : seen) {
      s.o = &k.occupants[s.job->id];
      s.o->pass = k.pass;
      conflict |= OccupyKept(*s.job, *s.q, s.generation, *s.o);
    }
    reordered = true;
  }
  k.conflict = conflict;
  if (reordered) {
    std::vector<sched::RunningJob> running_now;
    running_now.reserve(seen.size());
    for (const Seen& s : seen) {
      KeptCluster::Occupant& o = *s.o;
      if (!o.allocated) continue;
      sched::RunningJob& r = running_now.emplace_back();
      r.placements = std::move(o.in_running ? k.running[o.slot].placements : o.fresh);
      o.slot = running_now.size() - 1;
      o.in_running = true;
    }
    k.running = std::move(running_now);
  }
  running_source.reserve(k.running.size());
  for (const Seen& s : seen) {
    if (!s.o->allocated) continue;
    sched::RunningJob& r = k.running[s.o->slot];
    r.job = s.q;
    r.start_s = JobStartS(*s.job);
    running_source.push_back(s.job);
  }
  running = k.running;
  cluster = k.base;
  ReserveOutOfService();
#ifndef NDEBUG
  if (const std::string why = KeptDifferences(active, feed); !why.empty()) {
    std::fprintf(stderr, "kept cluster differs from a rebuild: %s\n", why.c_str());
    std::abort();
  }
#endif
}

std::string SchedInput::ClusterDifferences(const sched::ClusterState& a,
                                           const sched::ClusterState& b) {
  if (a.num_nodes() != b.num_nodes()) return "node counts differ";
  for (int32_t i = 0; i < a.num_nodes(); ++i) {
    const sched::NodeState& x = a.node(i);
    const sched::NodeState& y = b.node(i);
    auto kinds = [](const sched::NodeState& n) {
      auto v = n.gpu_task_kinds;
      std::sort(v.begin(), v.end());
      return v;
    };
    bool same = x.name == y.name && x.cpu_free_milli == y.cpu_free_milli &&
                x.memory_free_mib == y.memory_free_mib && x.gpu_free_milli == y.gpu_free_milli &&
                x.gpu_free_total == y.gpu_free_total && kinds(x) == kinds(y) &&
                x.cpu_capacity_milli == y.cpu_capacity_milli &&
                x.memory_capacity_mib == y.memory_capacity_mib && x.gpu_model == y.gpu_model &&
                x.single_owner_gpus == y.single_owner_gpus &&
                x.whole_only_gpus == y.whole_only_gpus;
    for (int32_t g = 0; same && g < x.num_gpus(); ++g) same = a.OwnerOf(i, g) == b.OwnerOf(i, g);
    if (!same) return "node " + x.name + " differs";
  }
  if (!(a.TotalFree() == b.TotalFree())) return "free totals differ";
  return "";
}

std::string SchedInput::KeptDifferences(const std::vector<const jobs::Job*>& active,
                                        const AdmissionFeed& feed) const {
  SchedInput fresh(nodes_, mps_sharing_);
  fresh.AddJobs(active, feed);
  std::string why = ClusterDifferences(cluster, fresh.cluster);
  if (why.empty() && running.size() != fresh.running.size()) why = "running counts differ";
  for (size_t i = 0; why.empty() && i < running.size(); ++i) {
    if (running[i].placements != fresh.running[i].placements ||
        running[i].start_s != fresh.running[i].start_s ||
        running_source[i] != fresh.running_source[i]) {
      why = "running job " + std::to_string(running_source[i]->id) + " differs";
    }
  }
  return why;
}

}  // namespace gpupool::controller
