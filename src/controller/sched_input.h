// SchedInput: the controller's jobs and nodes as the scheduling core's inputs for one
// pass (ClusterState, QueuedJob with its admission facts, RunningJob), and the core's
// placements turned back into the controller's TaskPlacements.
//
// A job's request becomes a task once the nodes' GPU models are known: "A100" matches
// the model key or part of the full name, a GPU memory need becomes the share of the
// smallest GPU that has it; a request no node's GPUs can meet makes the job unplaceable
// with the reason. Pure: no I/O, no clock. One instance per pass; not copyable (the
// queues point into it and into the ConversionCache and KeptCluster it is given, which
// outlive it). With a KeptCluster the pass's cluster is a copy of the kept one, brought
// up to date with what changed (see there); without, it is built from every job.
//
// MIG (docs/sharing.md): each MIG instance of a GPU in MIG mode is one device of the
// cluster, whole-only with the instance's memory (sched/cluster_state.h); the GPU itself
// is none (its memory is the instances'). A share is granted an instance as the
// instance's MIG- UUID in TaskPlacement::gpu_uuids (gpu_indices: its GPU's index).
//
// MPS serves one Unix user per GPU at a time, and holds each client to the largest share
// among its server's clients (docs/sharing.md): a GPU whose node states enforcement "mps"
// is single-owner in the cluster (sched/cluster_state.h) unless the admin allowed several
// users (MpsSharing::kUsers), and a share (one GPU, a gpu_milli below 1000 or a GPU
// memory size) is owned by its job's user and, under kOneSize, its size (MpsOwner), so
// that an MPS GPU takes one user's shares (of one size) at a time. Running shares are allocated
// with their owner, so the cluster knows who holds each MPS GPU.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "gpu/gpu_info.h"
#include "jobs/job.h"
#include "sched/admission/admission.h"
#include "sched/cluster_state.h"
#include "sched/queue/queued_job.h"

namespace gpupool::controller {

// Which shares an MPS GPU takes at once (docs/sharing.md, "One user per MPS GPU").
enum class MpsSharing {
  kOneUser,  // one user's shares of any size: each is held to the largest (the default)
  kOneSize,  // one user's shares of one size: each is held to its own (--mps-one-size)
  kUsers,    // several users' shares (--mps-multi-user)
};

// The owner of a share of `uid` (never 0): the user, and under kOneSize the size too
// (its gpu_milli and GPU memory ask), so that two sizes never share an MPS GPU there.
int64_t MpsOwner(uint32_t uid, int32_t gpu_milli, uint64_t gpu_memory_bytes, MpsSharing sharing);

// A GPU the health policy took out of service (gpu/health_policy.h).
struct OutOfServiceGpu {
  std::string uuid;
  std::string why;  // its state and reason: "cordoned: Xid 95: uncontained ECC error"
};

struct SchedNode {
  std::string name;
  const gpu::NodeInfo* info = nullptr;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool draining = false;  // nothing new is placed there
  // GPUs the health policy took out of service: they count as fully used, so nothing new
  // lands on them; what runs there is counted as is.
  std::vector<OutOfServiceGpu> out_of_service_gpus;
  // A node closed without an admin's drain: why, as pending reasons name it ("unknown",
  // "health check pending"); "" for a drain (DrainFilter says drained or draining).
  std::string closed_why;
};

// What the controller knows that the gates need beyond the jobs themselves.
struct AdmissionFeed {
  // DependencyGate: pending job id -> why its dependencies are unmet.
  std::map<int64_t, std::string> waiting;
  // EarlierAttemptGate: pending job id -> (attempt, node): that earlier attempt still
  // runs on the node (it came back) and is being stopped there.
  std::map<int64_t, std::pair<int32_t, std::string>> stopping;
  // Preemption (preemption_plan.h): user -> why that user's jobs preempt no one now (a
  // preemptor of theirs withdrawn after it preempted; docs/preemption.md).
  std::map<std::string, std::string, std::less<>> preempt_barred;
};

// One device the scheduler sees on a node: a GPU (mig -1), or MIG instance `mig` of a
// GPU in MIG mode. `gpu` indexes NodeInfo::gpus.
struct SchedDevice {
  size_t gpu = 0;
  int mig = -1;
};
// The node's devices in cluster GPU order: per GPU, itself or (in MIG mode) its instances
// that have a UUID of their own (an agent's report is not trusted to).
std::vector<SchedDevice> SchedDevicesOf(const gpu::NodeInfo& info);
// The UUID a placement names a device by: the GPU's, or the instance's "MIG-...".
const std::string& SchedDeviceUuid(const gpu::NodeInfo& info, const SchedDevice& d);

// The short model name a GPU is scheduled by: "NVIDIA H100 80GB HBM3" -> "H100",
// "AMD Instinct MI250X" -> "MI250X".
std::string GpuModelKey(const std::string& gpu_name);

// Jobs' conversions kept from pass to pass (JobScheduler owns one): a job is converted
// again only when something its conversion reads differs from what the cached one was
// made from (its state, request, priority, holds, array, environment, times, user; each
// compared, so a caller need not step a version), or when the nodes' GPU models changed
// (a request's models and memory are matched against them). Jobs whose conversion
// depends on the pass's AdmissionFeed (dependencies, an earlier attempt being stopped)
// are converted each pass and not cached. Entries of jobs no longer active are dropped
// at the end of each pass. With `by_version` (JobScheduler's), a job given at the same
// address with the same Job::version as the cached conversion's is taken as unchanged
// without comparing anything: the caller steps the version whenever the content changes
// (the controller's slim copies are immutable, one per version). Used by one thread.
struct ConversionCache {
  struct Entry {
    // What the conversion read beyond what `job` holds as is.
    jobs::JobState state = jobs::JobState::kPending;
    jobs::ResourceRequest request;
    uint32_t uid = 0;
    bool enforce_memory = false;
    int64_t array_id = 0;
    const jobs::Job* source = nullptr;  // the job last seen (by_version's check)
    int64_t version = 0;                // its version then
    uint64_t pass = 0;                  // the last pass that saw the job
    uint64_t generation = 0;            // which conversion `job` is (KeptCluster tells them apart)
    sched::QueuedJob job;
  };
  std::unordered_map<int64_t, Entry> jobs;
  bool by_version = false;     // see above
  size_t by_version_hits = 0;  // conversions the last pass took by address and version
  std::string models;          // the GPU models the entries were converted against
  uint64_t pass = 0;
  uint64_t generations = 0;  // conversions made so far; each names its result (Entry::generation)
  size_t converted = 0;      // conversions made by the last pass (cached ones not counted)
};

// The GPU models a request's constraints are matched against.
struct GpuModelFacts {
  std::string key;
  std::string full_name;
  std::string vendor;
  uint64_t memory_bytes = 0;
};

// What SchedInput derives from the nodes alone (their names, sizes and GPUs): the idle
// cluster and how its indices map back to the nodes.
struct NodeLayout {
  sched::ClusterState idle;                       // the nodes, nothing allocated
  std::vector<size_t> pos;                        // cluster index -> index in the nodes given
  std::vector<std::vector<SchedDevice>> devices;  // cluster index -> its devices
  std::vector<GpuModelFacts> models;
  std::vector<std::string> memory_enforced_nodes;  // see SchedInput's member
};

// The cluster kept from pass to pass (JobScheduler owns one, with its ConversionCache):
// the nodes' layout and the cluster with every placed or running job allocated. A pass
// applies what changed since the last one instead of building it again: the jobs that
// began or stopped occupying GPUs or whose placement or conversion changed are allocated
// or released; nodes are compared with those the layout was built from (name, CPU,
// memory, and per GPU what the scheduler reads: vendor, name, UUID, memory, capability,
// enforcement, MIG mode and instances; not telemetry), and any difference builds the
// layout and the cluster again. Exact: the kept cluster is the one a rebuild from the
// same jobs makes (SchedInput::ClusterDifferences compares them; debug builds check each
// pass). Where allocating in another order could differ (a placement that does not fit
// any more, shares of several users on one MPS GPU), the pass builds the cluster from
// every job in the order given, as without the kept cluster, and so does the next one
// until a build has no such conflict. Used by one thread.
struct KeptCluster {
  struct GpuShape {
    gpu::Vendor vendor = gpu::Vendor::kUnknown;
    std::string name, uuid, enforcement;
    uint64_t memory_total_bytes = 0;
    std::optional<gpu::ComputeCapability> capability;
    std::optional<bool> mig_enabled;
    std::vector<std::pair<std::string, uint64_t>> mig;  // instances' UUIDs and memory
  };
  struct NodeShape {
    std::string name;
    int64_t cpu_milli = 0;
    int64_t memory_mib = 0;
    bool has_info = false;
    std::vector<GpuShape> gpus;
  };
  // A job that occupies GPUs, as last allocated.
  struct Occupant {
    const sched::QueuedJob* q = nullptr;
    uint64_t generation = 0;
    // The job as last seen: with ConversionCache::by_version, the same address and
    // version mean the same placement (not compared again).
    const jobs::Job* source = nullptr;
    int64_t version = 0;
    std::vector<jobs::TaskPlacement> placement;  // the job's, as allocated
    std::vector<sched::Task> tasks;              // q->tasks when allocated (to release)
    std::vector<sched::Placement> fresh;         // placements until moved into `running`
    bool allocated = false;
    bool in_running = false;  // its placements are running[slot].placements
    size_t slot = 0;
    uint64_t pass = 0;  // the last pass that saw it
  };
  bool valid = false;  // a layout was built
  MpsSharing mps_sharing = MpsSharing::kOneUser;
  std::vector<NodeShape> shapes;  // the nodes the layout was built from
  NodeLayout layout;
  sched::ClusterState base;  // layout.idle with every allocated occupant
  std::unordered_map<int64_t, Occupant> occupants;
  std::vector<sched::RunningJob> running;  // allocated occupants, in the order given
  bool conflict = false;                   // the last build had one: build again
  uint64_t pass = 0;
  // What the last pass did: built the cluster from every job, allocated and released.
  bool rebuilt = false;
  size_t allocated = 0;
  size_t released = 0;
};

class SchedInput {
 public:
  // `mps_sharing`: which shares an MPS GPU takes at once (under kUsers it is not
  // single-owner).
  // `cache`: conversions kept between passes (null: every job converted, none kept).
  // `kept`: the cluster kept between passes (needs `cache`; null: built here).
  explicit SchedInput(const std::vector<SchedNode>& nodes,
                      MpsSharing mps_sharing = MpsSharing::kOneUser,
                      ConversionCache* cache = nullptr, KeptCluster* kept = nullptr);
  SchedInput(const SchedInput&) = delete;
  SchedInput& operator=(const SchedInput&) = delete;

  // Adds the active jobs: pending ones queue (in the order given); the others occupy,
  // and those whose placement is still whole are allocated on the cluster.
  void AddJobs(const std::vector<const jobs::Job*>& active, const AdmissionFeed& feed);

  // The task one task of `job` becomes here, or why no node could ever run it.
  Result<sched::Task> TaskFor(const jobs::Job& job) const;
  // Which nodes can run `needs` (EnvCompatFilter's answer for its environment).
  sched::EnvironmentNodes NodesFor(const jobs::EnvNeeds& needs) const;
  sched::EnvironmentNodes NodesForEnvironment(std::string_view environment) const;
  // The inverse of ToTaskPlacements: none when a node or a GPU UUID is not here.
  std::optional<std::vector<sched::Placement>> ToPlacements(
      const std::vector<jobs::TaskPlacement>& placements) const;
  std::vector<jobs::TaskPlacement> ToTaskPlacements(
      const sched::QueuedJob& job, const std::vector<sched::Placement>& placements) const;
  // Whether GPUs out of service keep `job` waiting, for its pending reason: on each node
  // (not draining) where its first task does not fit now but would with the node's
  // out-of-service GPUs back, or needs more GPUs than the node has in service (and not
  // more than it has), those GPUs and why, "node n1: GPU 2 (GPU-...) cordoned:
  // Xid 95: uncontained ECC error" (at most 3 named); "" when none. Looks at the cluster as
  // it is (after the pass), and leaves it so. Cached by the task's shape.
  std::string OutOfServiceNote(const sched::QueuedJob& job);
  // Whether any GPU is out of service (else OutOfServiceNote is always "").
  bool any_out_of_service() const { return !out_of_service_.empty(); }

  // How two clusters differ in what a pass reads (free amounts, owners, kinds of tasks
  // placed; not versions or journals), "" when they do not: the kept cluster's check.
  static std::string ClusterDifferences(const sched::ClusterState& a, const sched::ClusterState& b);
  // How this input's cluster and running jobs (after AddJobs) differ from those of a
  // fresh SchedInput over the same nodes given `active` and `feed` (ClusterDifferences,
  // then each running job's placements, start and source), "" when they do not. With a
  // kept cluster they must not: Debug builds abort on a difference after every kept pass.
  std::string KeptDifferences(const std::vector<const jobs::Job*>& active,
                              const AdmissionFeed& feed) const;

  sched::ClusterState cluster;
  std::vector<int32_t> draining;          // cluster indices
  std::vector<std::string> draining_why;  // SchedNode::closed_why of each draining[i]
  // Nodes (sorted) whose GPUs all hold a share to its memory: enforcement mps, mig or
  // dmem (EnforceMemoryFilter).
  std::vector<std::string> memory_enforced_nodes;
  std::vector<const sched::QueuedJob*> pending;
  std::vector<const jobs::Job*> pending_source;  // pending[i]'s job
  std::vector<const sched::QueuedJob*> occupying;
  std::span<const sched::RunningJob> running;    // own_running_ or the kept cluster's
  std::vector<const jobs::Job*> running_source;  // running[i]'s job

 private:
  static void BuildLayout(const std::vector<SchedNode>& nodes, MpsSharing mps_sharing,
                          NodeLayout* out);
  // Whether `nodes` are those `kept` was built from (see KeptCluster); records them if not.
  static bool SameNodes(const std::vector<SchedNode>& nodes, KeptCluster* kept);
  sched::QueuedJob ToQueuedJob(const jobs::Job& job, const AdmissionFeed& feed) const;
  // `job`'s conversion: from the cache when it holds this version, else made (and cached
  // unless the feed names the job). `*generation`: which conversion it is.
  const sched::QueuedJob& Convert(const jobs::Job& job, const AdmissionFeed& feed,
                                  uint64_t* generation);
  void Occupy(const jobs::Job& job, const sched::QueuedJob& q);
  // A running job's placement as the cluster's: false when a node or GPU is gone.
  bool Resolve(const jobs::Job& job, const sched::QueuedJob& q,
               std::vector<sched::Placement>* out) const;
  // Allocates `tasks` at `placements` on `cluster` (see Occupy); `*conflict`: it did not
  // fit, or only without its owner. True when every task is allocated.
  static bool AllocateTasks(sched::ClusterState& cluster, const std::vector<sched::Task>& tasks,
                            const std::vector<sched::Placement>& placements, bool* conflict);
  // `job`'s conversion, added to `pending` (then null is returned: it occupies nothing)
  // or to `occupying`.
  const sched::QueuedJob* TakeJob(const jobs::Job& job, const AdmissionFeed& feed,
                                  uint64_t* generation);
  // Drops the cached conversions of jobs this pass was not given (`given` were).
  void ForgetUnseenConversions(size_t given);
  // AddJobs with the kept cluster (sched_input_kept.cc).
  void AddJobsKept(const std::vector<const jobs::Job*>& active, const AdmissionFeed& feed);
  void ResetKept();
  void Unoccupy(KeptCluster::Occupant& o);
  // Allocates `o` on the kept cluster as `job` is placed; true on a conflict.
  bool OccupyKept(const jobs::Job& job, const sched::QueuedJob& q, uint64_t generation,
                  KeptCluster::Occupant& o);
  // After the jobs: what is left free of each out-of-service GPU is taken.
  void ReserveOutOfService();
  // Each GPU out of service, in node order, and what holds its free share (if any).
  struct OutOfService {
    int32_t node = 0;  // cluster index
    std::string what;  // "GPU 2 (GPU-...) cordoned: ..."
    bool held = false;
    sched::Task hold;
    sched::Placement placement;
  };
  std::vector<OutOfService> out_of_service_;
  std::vector<std::pair<sched::TaskShape, std::string>> notes_;  // OutOfServiceNote's cache

  const std::vector<SchedNode>& nodes_;
  MpsSharing mps_sharing_ = MpsSharing::kOneUser;
  NodeLayout own_layout_;                  // without a kept cluster
  const NodeLayout* layout_ = nullptr;     // own_layout_ or the kept cluster's
  std::vector<const SchedNode*> node_of_;  // cluster index -> node
  const std::vector<std::vector<SchedDevice>>& devices_() const { return layout_->devices; }
  const std::vector<GpuModelFacts>& models_() const { return layout_->models; }
  std::vector<sched::RunningJob> own_running_;  // without a kept cluster
  ConversionCache* cache_ = nullptr;
  KeptCluster* kept_ = nullptr;
  std::vector<sched::QueuedJob> jobs_;                               // reserved: stable addresses
  std::map<std::string, const jobs::EnvNeeds*, std::less<>> needs_;  // environment -> needs
};

}  // namespace gpupool::controller
