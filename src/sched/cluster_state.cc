#include "sched/cluster_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

namespace gpupool::sched {

namespace {
// Versions are unique across every ClusterState in the process, so a cache keyed by
// (node index, version) can never confuse two clusters or a rebuilt one.
uint64_t NextVersion() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}
// Keeps the journal at a few changes per node: enough for every index used within a
// scheduling pass or a simulated interval, bounded for long simulations.
size_t JournalBound(size_t nodes) { return std::max<size_t>(4096, 4 * nodes); }
}  // namespace

uint64_t ChangeJournal::NextId() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

int32_t NodeState::FullyFreeGpus() const {
  int32_t n = 0;
  for (int32_t f : gpu_free_milli) n += (f == 1000);
  return n;
}

int32_t GpuTaskKind(const Task& task) {
  if (task.num_gpu == 0) return -1;
  return task.IsFractional() ? 0 : task.num_gpu;
}

Status ClusterState::AddNode(const NodeSpec& s) {
  if (s.name.empty()) return Status::InvalidArgument("node has an empty name; give every node one");
  if (FindNode(s.name) >= 0) {
    return Status::AlreadyExists(
        fmt::format("node '{}' appears twice; names must be unique", s.name));
  }
  if (s.cpu_milli < 0 || s.memory_mib < 0 || s.num_gpus < 0 || s.gpu_memory_mib < 0 ||
      s.gpu_capability < 0) {
    return Status::InvalidArgument(fmt::format("node '{}' has a negative amount", s.name));
  }
  if (s.num_gpus > 64) {
    return Status::InvalidArgument(fmt::format(
        "node '{}' has {} GPUs; at most 64 per node are supported", s.name, s.num_gpus));
  }
  if (s.num_gpus > 0 && s.gpu_model.empty()) {
    return Status::InvalidArgument(
        fmt::format("node '{}' has {} GPUs but no GPU model; give the model", s.name, s.num_gpus));
  }
  if (s.num_gpus < 64 && (s.single_owner_gpus >> s.num_gpus) != 0) {
    return Status::InvalidArgument(
        fmt::format("node '{}' marks GPU {} single-owner but has {} GPUs", s.name,
                    63 - __builtin_clzll(s.single_owner_gpus), s.num_gpus));
  }
  if (s.num_gpus < 64 && (s.whole_only_gpus >> s.num_gpus) != 0) {
    return Status::InvalidArgument(fmt::format("node '{}' marks GPU {} whole-only but has {} GPUs",
                                               s.name, 63 - __builtin_clzll(s.whole_only_gpus),
                                               s.num_gpus));
  }
  if (!s.device_memory_mib.empty() &&
      (s.device_memory_mib.size() != static_cast<size_t>(s.num_gpus) ||
       std::any_of(s.device_memory_mib.begin(), s.device_memory_mib.end(),
                   [](int64_t m) { return m < 0; }))) {
    return Status::InvalidArgument(fmt::format(
        "node '{}' gives {} GPU memory sizes for {} GPUs; give one size >= 0 per GPU or none",
        s.name, s.device_memory_mib.size(), s.num_gpus));
  }
  NodeState n;
  n.name = s.name;
  n.cpu_capacity_milli = n.cpu_free_milli = s.cpu_milli;
  n.memory_capacity_mib = n.memory_free_mib = s.memory_mib;
  if (s.num_gpus > 0) {
    n.gpu_model = s.gpu_model;
    n.model_id = ModelId(s.gpu_model);
    if (n.model_id < 0) {
      models_.push_back(s.gpu_model);
      n.model_id = static_cast<int32_t>(models_.size()) - 1;
    }
  }
  n.gpu_memory_mib = s.gpu_memory_mib;
  n.gpu_memory_unknown = s.gpu_memory_unknown;
  n.gpu_capability = s.gpu_capability;
  n.gpu_free_milli.assign(static_cast<size_t>(s.num_gpus), 1000);
  n.gpu_free_total = int64_t{s.num_gpus} * 1000;
  n.single_owner_gpus = s.single_owner_gpus;
  n.whole_only_gpus = s.whole_only_gpus;
  n.device_memory_mib = s.device_memory_mib;
  if (s.single_owner_gpus != 0) {
    gpu_owner_.resize(nodes_.size());  // the first such node sizes the table
    ++single_owner_nodes_;
  }
  if (single_owner_nodes_ > 0) {
    gpu_owner_.emplace_back(s.single_owner_gpus != 0 ? static_cast<size_t>(s.num_gpus) : 0, 0);
  }
  n.version = NextVersion();
  capacity_ += n.Capacity();
  free_ += n.Free();
  for (int32_t g = 0; g < n.num_gpus(); ++g) gpu_weight_milli_ += InstanceWeightMilli(n, g);
  scan_order_.push_back(num_nodes());
  index_by_name_.emplace(n.name, num_nodes());
  nodes_.push_back(std::move(n));
  journal_.Restart();
  return Status::Ok();
}

int64_t InstanceWeightMilli(const NodeState& n, int32_t g) {
  if ((n.whole_only_gpus >> g & 1) == 0 || n.gpu_memory_mib <= 0 || n.device_memory_mib.empty()) {
    return 1000;
  }
  return n.device_memory_mib[static_cast<size_t>(g)] * 1000 / n.gpu_memory_mib;
}

int32_t ChargedGpuMilli(const NodeState& n, int32_t g, int32_t ask_milli) {
  if ((n.whole_only_gpus >> g & 1) == 0) return ask_milli;
  return static_cast<int32_t>(std::max<int64_t>(ask_milli, InstanceWeightMilli(n, g)));
}

int64_t ClusterState::ChargedGpuMilli(const Task& task, const Placement& p) const {
  if (!task.NeedsGpu()) return 0;
  if (p.node < 0 || p.node >= num_nodes() || p.gpus.size() != static_cast<size_t>(task.num_gpu)) {
    return task.TotalGpuMilli();  // not a placement of this cluster: the ask
  }
  const NodeState& n = node(p.node);
  int64_t sum = 0;
  for (int32_t g : p.gpus) sum += sched::ChargedGpuMilli(n, g, task.gpu_milli);
  return sum;
}

int64_t ClusterState::OwnerOf(int32_t i, int32_t g) const {
  if ((node(i).single_owner_gpus >> g & 1) == 0) return 0;
  return gpu_owner_[static_cast<size_t>(i)][static_cast<size_t>(g)];
}

uint64_t ClusterState::HeldByOthersThan(int32_t i, int64_t owner) const {
  const NodeState& n = node(i);
  const std::vector<int64_t>& owners = gpu_owner_[static_cast<size_t>(i)];
  uint64_t held = 0;
  for (uint64_t m = n.single_owner_gpus; m != 0; m &= m - 1) {
    const int g = __builtin_ctzll(m);
    if (n.gpu_free_milli[static_cast<size_t>(g)] < 1000 &&
        owners[static_cast<size_t>(g)] != owner) {
      held |= uint64_t{1} << g;
    }
  }
  return held;
}

namespace {
int64_t DeviceMemoryMib(const NodeState& n, int32_t g) {
  return n.device_memory_mib.empty() ? n.gpu_memory_mib
                                     : n.device_memory_mib[static_cast<size_t>(g)];
}
}  // namespace

int64_t ClusterState::GpuMemoryNeedMib(int32_t i, const Task& task) const {
  if (task.gpu_memory_mib > 0) return task.gpu_memory_mib;
  return (int64_t{task.gpu_milli} * node(i).gpu_memory_mib + 999) / 1000;
}

uint64_t ClusterState::WholeOnlyBlocked(int32_t i, const Task& task) const {
  const NodeState& n = node(i);
  if (task.num_gpu == 0) return 0;
  if (!task.IsFractional()) return n.whole_only_gpus;
  const int64_t need = GpuMemoryNeedMib(i, task);
  int32_t best = -1;
  for (uint64_t m = n.whole_only_gpus; m != 0; m &= m - 1) {
    const int g = __builtin_ctzll(m);
    const int64_t mem = DeviceMemoryMib(n, g);
    if (n.gpu_free_milli[static_cast<size_t>(g)] == 1000 && mem >= need &&
        (best < 0 || mem < DeviceMemoryMib(n, best))) {
      best = g;
    }
  }
  return best < 0 ? n.whole_only_gpus : n.whole_only_gpus & ~(uint64_t{1} << best);
}

int32_t ClusterState::FindNode(std::string_view name) const {
  auto it = index_by_name_.find(name);
  return it == index_by_name_.end() ? -1 : it->second;
}

int32_t ClusterState::ModelId(std::string_view model) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] == model) return static_cast<int32_t>(i);
  }
  return -1;
}

Status ClusterState::SetScanOrder(std::vector<int32_t> order) {
  if (order.size() != nodes_.size()) {
    return Status::InvalidArgument(fmt::format(
        "scan order has {} entries for {} nodes; give a permutation", order.size(), nodes_.size()));
  }
  std::vector<char> seen(nodes_.size(), 0);
  for (int32_t i : order) {
    if (i < 0 || i >= num_nodes() || seen[static_cast<size_t>(i)]) {
      return Status::InvalidArgument("scan order is not a permutation of the node indices");
    }
    seen[static_cast<size_t>(i)] = 1;
  }
  scan_order_ = std::move(order);
  journal_.Restart();
  return Status::Ok();
}

// Inlined into Fits, which placement calls for every node and task.
[[gnu::always_inline]] inline ClusterState::Refusal ClusterState::StaticRefusal(
    const NodeState& n, const Task& task) const {
  if (task.PicksNodes() && !task.NodeChosen(n.name)) [[unlikely]]
    return Refusal::kNotChosen;
  if (task.num_gpu == 0) return Refusal::kNone;
  if (!task.gpu_models.empty() && std::find(task.gpu_models.begin(), task.gpu_models.end(),
                                            n.gpu_model) == task.gpu_models.end()) {
    return Refusal::kModel;
  }
  if (task.min_capability != 0 && n.gpu_capability < task.min_capability) {
    return Refusal::kCapability;
  }
  if (!task.allowed_nodes.empty() &&
      !std::binary_search(task.allowed_nodes.begin(), task.allowed_nodes.end(), n.name)) {
    return Refusal::kNodeList;
  }
  // A share sized by memory (--gpu-mem) cannot be checked against a GPU whose memory is
  // unknown (discovery could not read it, docs/node-schema.md): it might not hold it.
  if (task.gpu_memory_mib > 0 && n.gpu_memory_unknown) return Refusal::kGpuMemoryUnknown;
  return Refusal::kNone;
}

bool ClusterState::ModelAllowed(const NodeState& n, const Task& task) const {
  return StaticRefusal(n, task) == Refusal::kNone;
}

bool ClusterState::Allows(int32_t i, const Task& task) const { return ModelAllowed(node(i), task); }

bool ClusterState::CouldEverHost(int32_t i, const Task& task) const {
  const NodeState& n = node(i);
  if (n.cpu_capacity_milli < task.cpu_milli || n.memory_capacity_mib < task.memory_mib ||
      n.num_gpus() < task.num_gpu || !ModelAllowed(n, task)) {
    return false;
  }
  return n.whole_only_gpus == 0 || task.num_gpu == 0 || UsableGpus(i, task) >= task.num_gpu;
}

int32_t ClusterState::UsableGpus(int32_t i, const Task& task) const {
  const NodeState& n = node(i);
  // Whole-GPU tasks: only the GPUs that are not whole-only; shares: those or an instance
  // with the memory.
  int32_t usable = n.num_gpus() - __builtin_popcountll(n.whole_only_gpus);
  if (task.IsFractional()) {
    for (uint64_t m = n.whole_only_gpus; m != 0; m &= m - 1) {
      usable += DeviceMemoryMib(n, __builtin_ctzll(m)) >= GpuMemoryNeedMib(i, task);
    }
  }
  return usable;
}

bool ClusterState::Fits(int32_t i, const Task& task) const {
  const NodeState& n = node(i);
  if (n.cpu_free_milli < task.cpu_milli || n.memory_free_mib < task.memory_mib) return false;
  if (task.num_gpu == 0) return !task.PicksNodes() || task.NodeChosen(n.name);
  // Placement calls this for every node and task: a task with an owner or a node with
  // whole-only GPUs takes the other way, so that the plain check below costs what it did
  // before owners (one test) and MIG (one more).
  if (task.owner != 0 || n.whole_only_gpus != 0) [[unlikely]]
    return FitsRestricted(i, task);
  if (!ModelAllowed(n, task)) return false;
  int32_t ok = 0;
  for (int32_t f : n.gpu_free_milli) ok += (f >= task.gpu_milli);
  return ok >= task.num_gpu;
}

// The GPU part of Fits for a task with an owner or on a node with whole-only GPUs: the
// GPUs it may not use (Blocked) do not count.
[[gnu::noinline]] bool ClusterState::FitsRestricted(int32_t i, const Task& task) const {
  const NodeState& n = node(i);
  if (!ModelAllowed(n, task)) return false;
  const uint64_t held = Blocked(i, task);
  int32_t ok = 0;
  for (int32_t g = 0; g < n.num_gpus(); ++g) {
    ok += (held >> g & 1) == 0 && n.gpu_free_milli[static_cast<size_t>(g)] >= task.gpu_milli;
  }
  return ok >= task.num_gpu;
}

std::string ClusterState::WhyNotFit(int32_t i, const Task& task) const {
  const NodeState& n = node(i);
  if (task.PicksNodes() && !task.NodeChosen(n.name)) {
    return std::binary_search(task.exclude.begin(), task.exclude.end(), n.name)
               ? "excluded (--exclude)"
               : "not in its --nodelist";
  }
  if (task.num_gpu > 0) {
    if (n.num_gpus() == 0) return "no GPUs";
    switch (StaticRefusal(n, task)) {
      case Refusal::kModel:
        return "other GPU model";
      case Refusal::kCapability:
        return fmt::format("GPU capability below {}.{}", task.min_capability / 10,
                           task.min_capability % 10);
      case Refusal::kNodeList:
        return "not among the task's nodes";
      case Refusal::kNotChosen:  // said above
        break;
      case Refusal::kGpuMemoryUnknown:
        return "GPU memory unknown (a --gpu-mem share is never placed there)";
      case Refusal::kNone:
        break;
    }
    int32_t ok = 0, mine = 0;
    const uint64_t held = HeldByOthers(i, task);
    const uint64_t mig = n.whole_only_gpus == 0 ? 0 : WholeOnlyBlocked(i, task);
    for (int32_t g = 0; g < n.num_gpus(); ++g) {
      const bool fits =
          n.gpu_free_milli[static_cast<size_t>(g)] >= task.gpu_milli && (mig >> g & 1) == 0;
      ok += fits;
      mine += fits && (held >> g & 1) == 0;
    }
    if (ok < task.num_gpu) {
      if (mig == 0) return task.IsFractional() ? "insufficient GPU share" : "insufficient GPUs";
      return task.IsFractional() ? fmt::format(
                                       "insufficient GPU share (no idle MIG instance "
                                       "with {} MiB)",
                                       GpuMemoryNeedMib(i, task))
                                 : "insufficient GPUs (MIG instances take shares only)";
    }
    if (mine < task.num_gpu) return "single-owner GPUs held by another owner";
  }
  if (n.cpu_free_milli < task.cpu_milli) return "insufficient CPU";
  if (n.memory_free_mib < task.memory_mib) return "insufficient memory";
  return "";
}

Status ClusterState::CheckPlacementShape(const Task& task, const Placement& p) const {
  if (p.node < 0 || p.node >= num_nodes()) {
    return Status::InvalidArgument(fmt::format("placement of task '{}' names node index {} of {}",
                                               task.name, p.node, num_nodes()));
  }
  if (static_cast<int32_t>(p.gpus.size()) != task.num_gpu) {
    return Status::InvalidArgument(
        fmt::format("placement of task '{}' lists {} GPUs, task needs {}", task.name, p.gpus.size(),
                    task.num_gpu));
  }
  const NodeState& n = node(p.node);
  for (size_t a = 0; a < p.gpus.size(); ++a) {
    if (p.gpus[a] < 0 || p.gpus[a] >= n.num_gpus()) {
      return Status::InvalidArgument(
          fmt::format("placement of task '{}' names GPU {} on node '{}' with {} GPUs", task.name,
                      p.gpus[a], n.name, n.num_gpus()));
    }
    for (size_t b = 0; b < a; ++b) {
      if (p.gpus[a] == p.gpus[b]) {
        return Status::InvalidArgument(
            fmt::format("placement of task '{}' names GPU {} twice", task.name, p.gpus[a]));
      }
    }
  }
  return Status::Ok();
}

Status ClusterState::CheckWholeOnly(const NodeState& n, int32_t i, const Task& task,
                                    const Placement& p) const {
  for (int32_t g : p.gpus) {
    if ((n.whole_only_gpus >> g & 1) == 0) continue;
    if (n.gpu_free_milli[static_cast<size_t>(g)] != 1000) {
      return Status::FailedPrecondition(
          fmt::format("task '{}' may not use GPU {} of node '{}': a MIG instance is held whole "
                      "by one task, and another holds it",
                      task.name, g, n.name));
    }
    if (task.IsFractional() && DeviceMemoryMib(n, g) < GpuMemoryNeedMib(i, task)) {
      return Status::FailedPrecondition(
          fmt::format("task '{}' needs {} MiB of GPU memory; GPU {} of node '{}' (a MIG "
                      "instance) has {} MiB",
                      task.name, GpuMemoryNeedMib(i, task), g, n.name, DeviceMemoryMib(n, g)));
    }
  }
  return Status::Ok();
}

Status ClusterState::Allocate(const Task& task, const Placement& p) {
  GP_RETURN_IF_ERROR(CheckPlacementShape(task, p));
  NodeState& n = nodes_[static_cast<size_t>(p.node)];
  if (n.whole_only_gpus != 0) GP_RETURN_IF_ERROR(CheckWholeOnly(n, p.node, task, p));
  if (n.cpu_free_milli < task.cpu_milli || n.memory_free_mib < task.memory_mib) {
    return Status::FailedPrecondition(fmt::format(
        "task '{}' does not fit node '{}': not enough free CPU or memory", task.name, n.name));
  }
  if (task.num_gpu > 0 && !ModelAllowed(n, task)) {
    return Status::FailedPrecondition(fmt::format("task '{}' may not use the {} GPUs of node '{}'",
                                                  task.name, n.gpu_model, n.name));
  }
  for (int32_t g : p.gpus) {
    if (n.gpu_free_milli[static_cast<size_t>(g)] < task.gpu_milli) {
      return Status::FailedPrecondition(fmt::format(
          "task '{}' needs {} thousandths of GPU {} on node '{}', which has {} free", task.name,
          task.gpu_milli, g, n.name, n.gpu_free_milli[static_cast<size_t>(g)]));
    }
  }
  if (const uint64_t held = HeldByOthers(p.node, task); held != 0) {
    for (int32_t g : p.gpus) {
      if ((held >> g & 1) != 0) {
        return Status::FailedPrecondition(fmt::format(
            "task '{}' of owner {} may not use GPU {} of node '{}': the GPU serves one owner "
            "at a time and {} holds it",
            task.name, task.owner, g, n.name,
            OwnerOf(p.node, g) == 0 ? std::string("a task without an owner")
                                    : fmt::format("owner {}", OwnerOf(p.node, g))));
      }
    }
  }
  n.cpu_free_milli -= task.cpu_milli;
  n.memory_free_mib -= task.memory_mib;
  int64_t taken = 0;
  for (int32_t g : p.gpus) {
    n.gpu_free_milli[static_cast<size_t>(g)] -= Taken(n, task, g);
    taken += Taken(n, task, g);
  }
  n.gpu_free_total -= taken;
  if (n.single_owner_gpus != 0 && task.owner != 0 && task.IsFractional()) {
    for (int32_t g : p.gpus) {
      if ((n.single_owner_gpus >> g & 1) != 0) {
        gpu_owner_[static_cast<size_t>(p.node)][static_cast<size_t>(g)] = task.owner;
      }
    }
  }
  if (int32_t kind = GpuTaskKind(task); kind >= 0) {
    auto it = std::find_if(n.gpu_task_kinds.begin(), n.gpu_task_kinds.end(),
                           [kind](const auto& e) { return e.first == kind; });
    if (it == n.gpu_task_kinds.end()) {
      n.gpu_task_kinds.emplace_back(kind, 1);
    } else {
      ++it->second;
    }
  }
  n.version = NextVersion();
  journal_.Record(p.node, JournalBound(nodes_.size()));
  free_ -= Resources{task.cpu_milli, task.memory_mib, taken};
  return Status::Ok();
}

Status ClusterState::Release(const Task& task, const Placement& p) {
  GP_RETURN_IF_ERROR(CheckPlacementShape(task, p));
  NodeState& n = nodes_[static_cast<size_t>(p.node)];
  if (n.cpu_free_milli + task.cpu_milli > n.cpu_capacity_milli ||
      n.memory_free_mib + task.memory_mib > n.memory_capacity_mib) {
    return Status::FailedPrecondition(fmt::format(
        "releasing task '{}' would exceed the capacity of node '{}'; was it placed there?",
        task.name, n.name));
  }
  for (int32_t g : p.gpus) {
    if (n.gpu_free_milli[static_cast<size_t>(g)] + Taken(n, task, g) > 1000) {
      return Status::FailedPrecondition(
          fmt::format("releasing task '{}' would exceed GPU {} of node '{}'; was it placed there?",
                      task.name, g, n.name));
    }
  }
  n.cpu_free_milli += task.cpu_milli;
  n.memory_free_mib += task.memory_mib;
  int64_t taken = 0;
  for (int32_t g : p.gpus) {
    n.gpu_free_milli[static_cast<size_t>(g)] += Taken(n, task, g);
    taken += Taken(n, task, g);
  }
  n.gpu_free_total += taken;
  if (n.single_owner_gpus != 0) {
    for (int32_t g : p.gpus) {
      if ((n.single_owner_gpus >> g & 1) != 0 && n.gpu_free_milli[static_cast<size_t>(g)] == 1000) {
        gpu_owner_[static_cast<size_t>(p.node)][static_cast<size_t>(g)] = 0;
      }
    }
  }
  if (int32_t kind = GpuTaskKind(task); kind >= 0) {
    auto it = std::find_if(n.gpu_task_kinds.begin(), n.gpu_task_kinds.end(),
                           [kind](const auto& e) { return e.first == kind; });
    if (it != n.gpu_task_kinds.end() && --it->second == 0) n.gpu_task_kinds.erase(it);
  }
  n.version = NextVersion();
  journal_.Record(p.node, JournalBound(nodes_.size()));
  free_ += Resources{task.cpu_milli, task.memory_mib, taken};
  return Status::Ok();
}

}  // namespace gpupool::sched
