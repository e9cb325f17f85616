// GPU failures in the time-driven experiment (issue 29, docs/sim.md "GPU failures"): Xid
// events, replayed from a list or drawn at a rate, go through the live controller's
// health policy (gpu/health_policy.h: gpu::OnXid with the same table and overrides), and
// this module keeps what follows on the simulated cluster: each GPU's health, drained
// nodes, the capacity held out of service and the repairs that bring it back.
//
// Out-of-service capacity is held as the live scheduler holds it (controller/
// sched_input.cc, ReserveOutOfService): a task allocated on the GPU's free share, so no
// placement policy can put work there. A drained node (a cordon-node Xid) holds every
// GPU, CPU and memory it has free. Whatever a job frees later on such a GPU or node is
// held again (Rehold). A repair, `repair_s` after a GPU was taken out (or a node
// drained), puts it back healthy, as `gpupool node resume` does.
//
// Pure: no I/O beyond ReadGpuFailureEventsFile, simulated seconds, a seeded RNG.
#pragma once

#include <cstdint>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/status.h"
#include "gpu/health_policy.h"
#include "sched/cluster_state.h"
#include "sched/rng.h"

namespace gpupool::sim {

// One Xid on one GPU, at a time relative to the first submission.
struct GpuFailureEvent {
  int64_t time_s = 0;
  std::string node;  // a node name of the cluster (`node-0000` for --cluster specs)
  int32_t gpu = 0;   // index on the node
  int xid = 0;
  std::string where;  // "events.csv:3", for messages; may be empty
};

// Parses the CSV `time_s,node,gpu,xid` (a header line naming these columns, any order;
// other columns are refused). Errors name the file, line and field.
Result<std::vector<GpuFailureEvent>> ParseGpuFailureEvents(std::string_view text,
                                                           const std::string& source);
Result<std::vector<GpuFailureEvent>> ReadGpuFailureEventsFile(const std::string& path);

// Which Xids a drawn failure is, with relative weights.
struct XidWeight {
  int xid = 0;
  double weight = 0;
};
// The default mix (docs/sim.md): an assumption, not a measurement.
const std::vector<XidWeight>& DefaultXidMix();
// "XID:WEIGHT[,XID:WEIGHT...]", e.g. "79:1,13:3"; weights > 0.
Result<std::vector<XidWeight>> ParseXidMix(std::string_view text);

struct GpuFailureOptions {
  std::vector<GpuFailureEvent> events;  // replayed in time order
  double rate_per_gpu_day = 0;          // drawn: a Poisson process per GPU; 0 = none
  std::vector<XidWeight> mix;           // of drawn failures; empty = DefaultXidMix()
  uint64_t seed = 42;                   // of drawn failures
  int64_t repair_s = 86400;             // a cordoned GPU or drained node comes back after this
  bool requeue = false;                 // jobs ended by a cordon go back to the queue
  std::string health_xid;               // overrides of the Xid table, as the server's --health-xid
  bool enabled() const { return !events.empty() || rate_per_gpu_day > 0; }
};

// What one failure does to the jobs on its GPU.
struct GpuHit {
  int32_t node = -1;
  int32_t gpu = -1;
  bool fail_jobs = false;  // an application Xid: the job on the GPU fails by itself
  bool end_jobs = false;   // a cordon: the jobs on the GPU end, or requeue
  std::string why;         // "GPU 3 on node node-0001 failed: Xid 95: uncontained ECC error"
};

class GpuFailureModel {
 public:
  // Checks the events against `cluster` (unknown node, GPU index out of range) and the
  // options (rate, mix, repair time, overrides); errors name the field.
  static Result<GpuFailureModel> Create(const sched::ClusterState& cluster,
                                        GpuFailureOptions options);

  // The next failure or repair; INT64_MAX when none comes.
  int64_t NextFailure() const;
  int64_t NextRepair() const;

  // Applies the failures due at `now` through gpu::OnXid and holds what went out of
  // service. The caller ends the jobs of the hits, then calls Rehold for their nodes.
  Result<std::vector<GpuHit>> Fail(int64_t now, sched::ClusterState& cluster);
  // Puts back what is due for repair at `now`; *freed when capacity came back.
  Status Repair(int64_t now, sched::ClusterState& cluster, bool* freed);
  // Holds again what a node must not give out (after jobs released resources there).
  Status Rehold(int32_t node, sched::ClusterState& cluster);
  bool Affects(int32_t node) const { return affected_.count(node) > 0; }
  // Whether placing on GPU `gpu` of `node` would put work where it must not go.
  bool OutOfService(int32_t node, int32_t gpu) const;

  int64_t held_gpu_milli() const { return held_gpu_milli_; }
  // Closes the out-of-service accounting at `end` (the last instant of the run).
  void Finish(int64_t end);
  const std::map<std::string, size_t>& events_by_action() const { return by_action_; }
  double out_of_service_gpu_s() const { return out_gpu_s_; }

 private:
  struct Hold {
    sched::Task task;
    sched::Placement placement;
  };
  GpuFailureModel(GpuFailureOptions options, gpu::HealthPolicy policy);
  std::pair<int32_t, GpuFailureEvent> Draw(int64_t at);  // (node index, event)
  void ScheduleNextDraw();
  Status Unhold(int32_t node, sched::ClusterState& cluster);
  // Updates the out-of-service accounting of `node` at `now`.
  void Account(int32_t node, int64_t now);
  bool Cordoned(int32_t node, int32_t gpu) const;

  GpuFailureOptions o_;
  gpu::HealthPolicy policy_;
  sched::Rng rng_;
  std::vector<std::string> names_;                     // node names, for reasons
  std::vector<int32_t> gpus_of_;                       // per node
  std::vector<std::pair<int32_t, int32_t>> gpu_list_;  // (node, gpu) for draws
  std::vector<std::pair<int32_t, int32_t>> event_at_;  // resolved (node, gpu) of o_.events
  size_t next_event_ = 0;
  double next_draw_ = -1;  // seconds; < 0 when not drawing
  std::vector<std::vector<gpu::GpuHealth>> health_;
  std::vector<bool> drained_;
  std::vector<int64_t> drained_since_;
  // Per node, per GPU: since when out of service, for either cause (-1: in service).
  std::vector<std::vector<int64_t>> out_since_;
  std::map<int32_t, std::vector<Hold>> holds_;
  std::set<int32_t> affected_;  // nodes with holds or out-of-service GPUs
  int64_t held_gpu_milli_ = 0;
  // (time, node, gpu; -1 = the node's drain); stale entries are skipped.
  using RepairAt = std::tuple<int64_t, int32_t, int32_t>;
  std::priority_queue<RepairAt, std::vector<RepairAt>, std::greater<>> repairs_;
  std::map<std::string, size_t> by_action_;
  double out_gpu_s_ = 0;
};

}  // namespace gpupool::sim
