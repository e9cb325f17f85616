#include "controller/sched_input.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "common/strings.h"
#include "controller/job_lifecycle.h"
#include "envcheck/needs.h"

namespace gpupool::controller {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

std::string JoinModels(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : "|") + s;
  return out;
}

std::string FormatGiB(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * kMiB));
  return buf;
}

int32_t CapabilityOf(const gpu::GpuInfo& g) {
  return g.compute_capability ? g.compute_capability->major * 10 + g.compute_capability->minor : 0;
}

// `mps_sharing`: see SchedInput's constructor. `devices`: SchedDevicesOf(*n.info).
sched::NodeSpec SpecOf(const SchedNode& n, const std::vector<SchedDevice>& devices,
                       MpsSharing mps_sharing) {
  sched::NodeSpec spec{n.name, n.cpu_milli, n.memory_mib, static_cast<int32_t>(devices.size())};
  if (spec.num_gpus > 0) {
    const gpu::GpuInfo& g = n.info->gpus.front();
    spec.gpu_model = GpuModelKey(g.name);
    uint64_t min_mem = g.memory_total_bytes;
    for (const auto& other : n.info->gpus) min_mem = std::min(min_mem, other.memory_total_bytes);
    spec.gpu_memory_mib = static_cast<int64_t>(min_mem / kMiB);
    spec.gpu_memory_unknown = spec.gpu_memory_mib == 0;  // some GPU's size was not read
    spec.gpu_capability = CapabilityOf(g);
    for (size_t i = 0; i < devices.size() && i < 64; ++i) {
      const gpu::GpuInfo& parent = n.info->gpus[devices[i].gpu];
      if (devices[i].mig >= 0) {
        spec.whole_only_gpus |= uint64_t{1} << i;
      } else if (parent.enforcement == "mps" && mps_sharing != MpsSharing::kUsers) {
        spec.single_owner_gpus |= uint64_t{1} << i;
      }
    }
    if (spec.whole_only_gpus != 0) {
      // A MIG instance's physical GPU: a gang's shares take instances of different GPUs.
      for (const SchedDevice& d : devices)
        spec.physical_gpus.push_back(static_cast<int32_t>(d.gpu));
      for (const SchedDevice& d : devices) {
        const gpu::GpuInfo& parent = n.info->gpus[d.gpu];
        const uint64_t bytes =
            d.mig < 0 ? parent.memory_total_bytes
                      : parent.mig_devices[static_cast<size_t>(d.mig)].memory_total_bytes;
        spec.device_memory_mib.push_back(static_cast<int64_t>(bytes / kMiB));
      }
    }
  }
  return spec;
}

// The share of one GPU a memory need takes: sized against the smallest allowed GPU that
// has the memory, so it is safe on bigger ones. 0 when none has it.
uint64_t SmallestGpuWith(uint64_t bytes, const std::vector<uint64_t>& memories) {
  uint64_t best = 0;
  for (uint64_t m : memories) {
    if (m >= bytes && (best == 0 || m < best)) best = m;
  }
  return best;
}

}  // namespace

std::vector<SchedDevice> SchedDevicesOf(const gpu::NodeInfo& info) {
  std::vector<SchedDevice> out;
  for (size_t i = 0; i < info.gpus.size(); ++i) {
    if (!info.gpus[i].mig_enabled.value_or(false)) {
      out.push_back({i, -1});
      continue;
    }
    // An instance is granted by its UUID: one without, or with another's, is not used.
    for (size_t m = 0; m < info.gpus[i].mig_devices.size(); ++m) {
      const std::string& uuid = info.gpus[i].mig_devices[m].uuid;
      if (uuid.empty() || std::any_of(out.begin(), out.end(), [&](const SchedDevice& d) {
            return SchedDeviceUuid(info, d) == uuid;
          })) {
        continue;
      }
      out.push_back({i, static_cast<int>(m)});
    }
  }
  return out;
}

const std::string& SchedDeviceUuid(const gpu::NodeInfo& info, const SchedDevice& d) {
  const gpu::GpuInfo& g = info.gpus[d.gpu];
  return d.mig < 0 ? g.uuid : g.mig_devices[static_cast<size_t>(d.mig)].uuid;
}

std::string GpuModelKey(const std::string& gpu_name) {
  static const std::set<std::string> kNoise = {"nvidia",   "tesla",  "geforce", "quadro", "amd",
                                               "instinct", "radeon", "intel",   "pro",    "rtx"};
  for (const std::string& word : Split(gpu_name, ' ')) {
    if (word.empty() || kNoise.count(ToLower(word)) > 0) continue;
    if (std::any_of(word.begin(), word.end(), [](char c) { return std::isdigit(c); })) {
      std::string key = word;
      for (char& c : key) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      // "A100-SXM4-80GB" -> "A100"
      if (auto dash = key.find('-'); dash != std::string::npos && dash > 0) key.resize(dash);
      return key;
    }
  }
  return gpu_name.empty() ? std::string("GPU") : gpu_name;
}

void SchedInput::BuildLayout(const std::vector<SchedNode>& nodes, MpsSharing mps_sharing,
                             NodeLayout* out) {
  *out = NodeLayout{};
  for (size_t pos = 0; pos < nodes.size(); ++pos) {
    const SchedNode& n = nodes[pos];
    std::vector<SchedDevice> devices;
    if (n.info != nullptr) devices = SchedDevicesOf(*n.info);
    if (!out->idle.AddNode(SpecOf(n, devices, mps_sharing)).ok()) continue;
    out->pos.push_back(pos);
    out->devices.push_back(std::move(devices));
    if (n.info == nullptr || n.info->gpus.empty()) continue;
    if (std::all_of(n.info->gpus.begin(), n.info->gpus.end(), [](const gpu::GpuInfo& g) {
          return g.enforcement == "mps" || g.enforcement == "mig" || g.enforcement == "dmem";
        })) {
      out->memory_enforced_nodes.push_back(n.name);
    }
    // Everything about the GPU models a request's constraints are matched against.
    const gpu::GpuInfo& g = n.info->gpus.front();
    GpuModelFacts f{GpuModelKey(g.name), g.name, std::string(gpu::VendorName(g.vendor)),
                    g.memory_total_bytes};
    auto it = std::find_if(out->models.begin(), out->models.end(),
                           [&](const GpuModelFacts& m) { return m.key == f.key; });
    if (it == out->models.end()) {
      out->models.push_back(f);
    } else if (f.memory_bytes > 0) {
      // The smallest known size: a node whose GPU memory is unknown (0) takes no share
      // sized by memory (cluster_state.h), and must not make the model's size unknown.
      it->memory_bytes =
          it->memory_bytes == 0 ? f.memory_bytes : std::min(it->memory_bytes, f.memory_bytes);
    }
  }
}

int64_t MpsOwner(uint32_t uid, int32_t gpu_milli, uint64_t gpu_memory_bytes, MpsSharing sharing) {
  const int64_t user = int64_t{uid} + 1;
  if (sharing != MpsSharing::kOneSize) return user;
  // The size in the low 30 bits (mixed: two sizes are equal there by a 2^-30 chance, which
  // lets them share a GPU as under kOneUser), the user (at most 2^32) above them.
  uint64_t size = static_cast<uint64_t>(gpu_milli) * 0x9E3779B97F4A7C15ULL ^ gpu_memory_bytes;
  size = (size ^ size >> 31) * 0xBF58476D1CE4E5B9ULL;
  return user << 30 | static_cast<int64_t>((size ^ size >> 29) & 0x3FFFFFFF);
}

SchedInput::SchedInput(const std::vector<SchedNode>& nodes, MpsSharing mps_sharing,
                       ConversionCache* cache, KeptCluster* kept)
    : nodes_(nodes), mps_sharing_(mps_sharing), cache_(cache), kept_(kept) {
  if (cache_ == nullptr) kept_ = nullptr;  // the kept cluster tells conversions apart by it
  if (kept_ != nullptr) {
    if (kept_->mps_sharing != mps_sharing || !SameNodes(nodes, kept_)) {
      BuildLayout(nodes, mps_sharing, &kept_->layout);
      kept_->mps_sharing = mps_sharing;
      kept_->valid = true;
      kept_->conflict = true;  // built from every job below
    }
    layout_ = &kept_->layout;
  } else {
    BuildLayout(nodes, mps_sharing, &own_layout_);
    cluster = std::move(own_layout_.idle);
    layout_ = &own_layout_;
  }
  node_of_.reserve(layout_->pos.size());
  for (size_t i = 0; i < layout_->pos.size(); ++i) {
    const SchedNode& n = nodes[layout_->pos[i]];
    node_of_.push_back(&n);
    if (n.draining) {
      draining.push_back(static_cast<int32_t>(i));
      draining_why.push_back(n.closed_why);
    }
  }
  memory_enforced_nodes = layout_->memory_enforced_nodes;
  if (cache_ != nullptr) {
    std::string models;
    for (const GpuModelFacts& m : models_()) {
      models += m.key + '\n' + m.full_name + '\n' + m.vendor + '\n' +
                std::to_string(m.memory_bytes) + '\n';
    }
    if (models != cache_->models) {
      cache_->jobs.clear();
      cache_->models = std::move(models);
    }
    ++cache_->pass;
    cache_->converted = 0;
    cache_->by_version_hits = 0;
  }
}

Result<sched::Task> SchedInput::TaskFor(const jobs::Job& job) const {
  const jobs::ResourceRequest& r = job.request;
  sched::Task t;
  t.name = std::to_string(job.id);
  t.job_id = std::to_string(job.id);
  t.cpu_milli = r.cpu_milli;
  t.memory_mib = static_cast<int64_t>((r.memory_bytes + kMiB - 1) / kMiB);
  t.num_gpu = r.gpus;
  t.gpu_milli = r.gpus > 0 ? r.gpu_milli : 0;
  if (!r.min_capability.empty()) {
    const auto dot = r.min_capability.find('.');
    t.min_capability = std::atoi(r.min_capability.substr(0, dot).c_str()) * 10 +
                       std::atoi(r.min_capability.substr(dot + 1).c_str());
  }
  // The job's own node choice binds every task (sched/task.h), so it is set before the
  // GPU part, which a CPU-only job skips.
  t.nodelist = r.nodelist;
  std::sort(t.nodelist.begin(), t.nodelist.end());
  t.exclude = r.exclude;
  std::sort(t.exclude.begin(), t.exclude.end());
  if (r.gpus == 0) return t;
  t.enforce_memory = job.enforce_memory;
  // A gang held for mpirun launches a node's tasks as one, with all their GPUs
  // (controller_nodes.cc, MakeLaunchOrder): its shares pack as one holder's; the shares
  // of any other gang each get a GPU of their own (NCCL: one rank per device).
  t.pack_shares = job.mpi || !job.interactive.empty();
  t.gpu_memory_mib = static_cast<int64_t>((r.gpu_memory_bytes + kMiB - 1) / kMiB);
  // A share's owner: MPS GPUs take one user's shares (of one size) at a time
  // (cluster_state.h).
  if (r.gpus == 1 && (r.gpu_milli < 1000 || r.gpu_memory_bytes > 0)) {
    t.owner = MpsOwner(job.uid, r.gpu_milli, r.gpu_memory_bytes, mps_sharing_);
  }
  std::vector<uint64_t> memories;  // of the allowed models
  for (const GpuModelFacts& m : models_()) {
    if (!r.vendor.empty() && m.vendor != r.vendor) continue;
    auto matches = [&](const std::string& wanted) {
      const std::string w = ToLower(wanted);
      return ToLower(m.key) == w || ToLower(m.full_name).find(w) != std::string::npos;
    };
    if (!r.gpu_models.empty() && std::none_of(r.gpu_models.begin(), r.gpu_models.end(), matches)) {
      continue;
    }
    memories.push_back(m.memory_bytes);
    if (!r.gpu_models.empty() || !r.vendor.empty()) t.gpu_models.push_back(m.key);
  }
  if ((!r.gpu_models.empty() || !r.vendor.empty()) && memories.empty()) {
    std::string have;
    for (const GpuModelFacts& m : models_()) have += (have.empty() ? "" : ", ") + m.key;
    return Status::FailedPrecondition(
        "no node has GPUs of " +
        (r.gpu_models.empty() ? "vendor " + r.vendor : "model " + JoinModels(r.gpu_models)) +
        " (models here: " + (have.empty() ? "none" : have) + ")");
  }
  if (r.gpu_memory_bytes > 0) {
    const uint64_t best = SmallestGpuWith(r.gpu_memory_bytes, memories);
    if (best == 0) {
      const uint64_t largest =
          memories.empty() ? 0 : *std::max_element(memories.begin(), memories.end());
      if (largest == 0 && !memories.empty()) {
        return Status::FailedPrecondition(
            "needs " + FormatGiB(r.gpu_memory_bytes) +
            " of GPU memory (--gpu-mem), and no GPU here has a known memory size (its node's "
            "discovery could not read it: docs/node-schema.md); ask a share by fraction "
            "(--gpu-share) instead");
      }
      return Status::FailedPrecondition("needs " + FormatGiB(r.gpu_memory_bytes) +
                                        " of GPU memory (--gpu-mem); the largest GPU here has " +
                                        FormatGiB(largest) + ": ask for at most that");
    }
    t.gpu_milli = static_cast<int32_t>(
        std::clamp<uint64_t>((r.gpu_memory_bytes * 1000 + best - 1) / best, 1, 1000));
  }
  return t;
}

sched::EnvironmentNodes SchedInput::NodesFor(const jobs::EnvNeeds& needs) const {
  sched::EnvironmentNodes out;
  std::string why;
  size_t considered = 0;
  for (const SchedNode& n : nodes_) {
    if (n.info == nullptr || n.info->gpus.empty()) continue;
    ++considered;
    Status s = envcheck::CheckNeeds(needs, envcheck::OfferFromNode(*n.info, n.name));
    if (s.ok()) {
      out.nodes.push_back(n.name);
    } else if (why.size() < 2000) {
      why += (why.empty() ? "" : "; ") + s.message();
    }
  }
  if (out.nodes.empty() && considered > 0) out.none = needs.source + " " + why;
  if (out.nodes.size() == considered) out.nodes.clear();  // no constraint
  std::sort(out.nodes.begin(), out.nodes.end());
  return out;
}

sched::EnvironmentNodes SchedInput::NodesForEnvironment(std::string_view environment) const {
  auto it = needs_.find(environment);
  if (it == needs_.end()) return {};
  return NodesFor(*it->second);
}

namespace {

// When the last lease of a job's lost nodes runs out, in epoch seconds (at least 1); 0:
// it waits for none.
int64_t FenceUntilS(const jobs::Job& job) {
  const int64_t until = jobs::FenceUntilUs(job);
  return until == 0 ? 0 : std::max<int64_t>(1, until / 1'000'000);
}

// The lost nodes a job waits for (Job::fences with a lease), in words: "n1", "n1 and
// n2", "n1, n2, n3 and 5 more"; their count in *count.
std::string FencedNodesInWords(const jobs::Job& job, int32_t* count) {
  std::vector<const std::string*> names;
  for (const jobs::NodeFence& f : job.fences) {
    if (f.until_us != 0) names.push_back(&f.node);
  }
  *count = static_cast<int32_t>(names.size());
  constexpr size_t kNamed = 3;
  const size_t shown = std::min(names.size(), kNamed);
  std::string out;
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += *names[i];
  }
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

}  // namespace

sched::QueuedJob SchedInput::ToQueuedJob(const jobs::Job& job, const AdmissionFeed& feed) const {
  sched::QueuedJob q;
  q.id = std::to_string(job.id);
  q.user = job.user;
  q.project = jobs::AccountingProject(job);
  q.priority = job.priority;
  q.submit_s = job.submit_time_us / 1'000'000;
  q.time_limit_s = job.time_limit_s;
  sched::AdmissionFacts& a = q.admission;
  a.held_by = job.held_by;
  a.held_by_admin = job.held_by_admin;
  if (auto w = feed.waiting.find(job.id); w != feed.waiting.end()) a.waits_for = w->second;
  if (jobs::FenceUntilUs(job) != 0) {
    // Its nodes were lost while the attempt ran: their leases stop it (lifecycle::NodeLost).
    a.stopping_attempt = job.attempt;
    a.stopping_node = FencedNodesInWords(job, &a.stopping_nodes);
    a.stopping_until_s = FenceUntilS(job);
  }
  if (auto s = feed.stopping.find(job.id); s != feed.stopping.end()) {
    a.stopping_attempt = s->second.first;
    a.stopping_node = s->second.second;
    a.stopping_nodes = 1;
    a.stopping_until_s = 0;
  }
  if (job.array_id != 0) {
    a.array_id = std::to_string(job.array_id);
    a.user_id = lifecycle::UserJobId(job);  // reasons name the element ARRAY_INDEX
  }
  a.array_max_running = job.array_max_running;
  a.gpus = int64_t{job.request.gpus} * std::max(1, job.request.tasks);
  if (!job.needs.empty() && job.request.gpus > 0) a.environment = job.needs.source;
  Result<sched::Task> task = TaskFor(job);
  if (task.ok()) {
    q.tasks.assign(static_cast<size_t>(job.request.tasks), *task);
  } else {
    a.unplaceable = task.status().message();
  }
  return q;
}

namespace {

// Whether `a` names the lost nodes `job` waits for: a gang's wait for several ends node
// by node, the last lease's end staying the same (Job::fences).
bool SameFencedNodes(const sched::AdmissionFacts& a, const jobs::Job& job) {
  if (jobs::FenceUntilUs(job) == 0) return true;  // stopping_until_s 0: compared already
  int32_t count = 0;
  return a.stopping_node == FencedNodesInWords(job, &count) && a.stopping_nodes == count;
}

// Whether ToQueuedJob would make of `job` what `e` holds (the feed aside).
bool SameInputs(const ConversionCache::Entry& e, const jobs::Job& job) {
  const sched::QueuedJob& q = e.job;
  const sched::AdmissionFacts& a = q.admission;
  const bool has_environment = !job.needs.empty() && job.request.gpus > 0;
  return e.state == job.state && e.request == job.request && e.uid == job.uid &&
         e.enforce_memory == job.enforce_memory && e.array_id == job.array_id &&
         q.user == job.user && q.project == jobs::AccountingProject(job) &&
         q.priority == job.priority && q.submit_s == job.submit_time_us / 1'000'000 &&
         q.time_limit_s == job.time_limit_s && a.held_by == job.held_by &&
         a.held_by_admin == job.held_by_admin && a.array_max_running == job.array_max_running &&
         a.stopping_until_s == FenceUntilS(job) && SameFencedNodes(a, job) &&
         (has_environment ? a.environment == job.needs.source : a.environment.empty());
}

}  // namespace

const sched::QueuedJob& SchedInput::Convert(const jobs::Job& job, const AdmissionFeed& feed,
                                            uint64_t* generation) {
  if (cache_ == nullptr || feed.waiting.count(job.id) != 0 || feed.stopping.count(job.id) != 0) {
    if (cache_ != nullptr) {
      ++cache_->converted;
      cache_->jobs.erase(job.id);
      *generation = ++cache_->generations;
    }
    return jobs_.emplace_back(ToQueuedJob(job, feed));
  }
  auto [it, fresh] = cache_->jobs.try_emplace(job.id);
  ConversionCache::Entry& e = it->second;
  if (!fresh && cache_->by_version && e.source == &job && e.version == job.version) {
    ++cache_->by_version_hits;
  } else if (fresh || !SameInputs(e, job)) {
    e.job = ToQueuedJob(job, feed);
    e.state = job.state;
    e.request = job.request;
    e.uid = job.uid;
    e.enforce_memory = job.enforce_memory;
    e.array_id = job.array_id;
    e.generation = ++cache_->generations;
    ++cache_->converted;
  }
  e.source = &job;
  e.version = job.version;
  e.pass = cache_->pass;
  *generation = e.generation;
  return e.job;
}

const sched::QueuedJob* SchedInput::TakeJob(const jobs::Job& job, const AdmissionFeed& feed,
                                            uint64_t* generation) {
  const sched::QueuedJob& q = Convert(job, feed, generation);
  if (job.state == jobs::JobState::kPending) {
    pending.push_back(&q);
    pending_source.push_back(&job);
    if (!q.admission.environment.empty()) needs_.emplace(q.admission.environment, &job.needs);
    return nullptr;
  }
  occupying.push_back(&q);
  return &q;
}

void SchedInput::ForgetUnseenConversions(size_t given) {
  if (cache_ != nullptr && cache_->jobs.size() > given) {
    std::erase_if(cache_->jobs,
                  [pass = cache_->pass](const auto& e) { return e.second.pass != pass; });
  }
}

void SchedInput::AddJobs(const std::vector<const jobs::Job*>& active, const AdmissionFeed& feed) {
  // Conversions made here (every job's, or with a cache those the feed names) keep their
  // addresses: room for all of them.
  jobs_.reserve(cache_ == nullptr ? active.size() : feed.waiting.size() + feed.stopping.size());
  if (kept_ != nullptr) {
    AddJobsKept(active, feed);
    return;
  }
  uint64_t generation = 0;
  for (const jobs::Job* job : active) {
    const sched::QueuedJob* q = TakeJob(*job, feed, &generation);
    if (q != nullptr && q->admission.unplaceable.empty()) Occupy(*job, *q);
  }
  ForgetUnseenConversions(active.size());
  running = own_running_;
  ReserveOutOfService();
}

void SchedInput::ReserveOutOfService() {
  for (size_t i = 0; i < node_of_.size(); ++i) {
    const SchedNode& n = *node_of_[i];
    if (n.info == nullptr) continue;
    const auto node = static_cast<int32_t>(i);
    for (const OutOfServiceGpu& out : n.out_of_service_gpus) {
      // A GPU in MIG mode is out of service with all its instances.
      const std::vector<SchedDevice>& devices = devices_()[i];
      for (size_t d = 0; d < devices.size(); ++d) {
        const gpu::GpuInfo& it = n.info->gpus[devices[d].gpu];
        if (it.uuid != out.uuid) continue;
        OutOfService& o = out_of_service_.emplace_back();
        o.node = node;
        o.what = "GPU " + std::to_string(it.index) + " (" + out.uuid + ") " + out.why;
        const auto g = static_cast<int32_t>(d);
        const int32_t free = cluster.node(node).gpu_free_milli[d];
        if (free <= 0) continue;  // a job still runs on it
        o.hold.name = "out of service: GPU " + out.uuid;
        o.hold.num_gpu = 1;
        o.hold.gpu_milli = free;
        o.placement.node = node;
        o.placement.gpus = {g};
        o.held = cluster.Allocate(o.hold, o.placement).ok();  // fits: it takes what is free
      }
    }
  }
}

std::string SchedInput::OutOfServiceNote(const sched::QueuedJob& job) {
  if (out_of_service_.empty() || job.tasks.empty() || !job.tasks.front().NeedsGpu()) return "";
  const sched::Task& task = job.tasks.front();
  const sched::TaskShape shape = sched::ShapeOf(task);
  for (const auto& [seen, note] : notes_) {
    if (seen == shape) return note;
  }
  std::vector<std::string> named;
  for (size_t h = 0; h < out_of_service_.size();) {
    const int32_t node = out_of_service_[h].node;
    size_t end = h;  // this node's GPUs out of service: [h, end)
    while (end < out_of_service_.size() && out_of_service_[end].node == node) ++end;
    const bool draining_node = std::find(draining.begin(), draining.end(), node) != draining.end();
    if (!draining_node && !cluster.Fits(node, task) && cluster.CouldEverHost(node, task)) {
      // They keep it off the node: it would fit now with them back, or it needs more GPUs
      // than the node has in service.
      const auto in_service = cluster.node(node).num_gpus() - static_cast<int32_t>(end - h);
      bool why = in_service < task.num_gpu;
      for (size_t k = h; !why && k < end; ++k) {
        if (out_of_service_[k].held)
          (void)cluster.Release(out_of_service_[k].hold, out_of_service_[k].placement);
      }
      if (!why) {
        why = cluster.Fits(node, task);
        for (size_t k = h; k < end; ++k) {
          if (out_of_service_[k].held)
            (void)cluster.Allocate(out_of_service_[k].hold, out_of_service_[k].placement);
        }
      }
      for (size_t k = h; why && k < end; ++k) {
        // Once per GPU: a GPU in MIG mode is out of service with each of its instances.
        std::string one = "node " + cluster.node(node).name + ": " + out_of_service_[k].what;
        if (std::find(named.begin(), named.end(), one) == named.end()) named.push_back(one);
      }
    }
    h = end;
  }
  std::string note;
  for (size_t i = 0; i < named.size() && i < 3; ++i) note += (i == 0 ? "" : "; ") + named[i];
  if (named.size() > 3) {
    note += "; and " + std::to_string(named.size() - 3) + " more GPUs out of service";
  }
  notes_.emplace_back(shape, note);
  return note;
}

bool SchedInput::Resolve(const jobs::Job& job, const sched::QueuedJob& q,
                         std::vector<sched::Placement>* out) const {
  if (job.placement.size() != q.tasks.size()) return false;
  std::optional<std::vector<sched::Placement>> placements = ToPlacements(job.placement);
  if (!placements) return false;  // its node is gone: the sweep will mark it LOST
  *out = std::move(*placements);
  return true;
}

bool SchedInput::AllocateTasks(sched::ClusterState& cluster, const std::vector<sched::Task>& tasks,
                               const std::vector<sched::Placement>& placements, bool* conflict) {
  bool allocated = true;
  for (size_t t = 0; t < placements.size(); ++t) {
    if (cluster.Allocate(tasks[t], placements[t]).ok()) continue;
    *conflict = true;
    // Shares of several users that already run on one MPS GPU (placed while
    // --mps-multi-user was on, or before the node stated MPS) still hold what they use:
    // the later ones are counted without an owner, and the GPU keeps its first owner
    // until it is idle.
    sched::Task ownerless = tasks[t];
    ownerless.owner = 0;
    if (tasks[t].owner == 0 || !cluster.Allocate(ownerless, placements[t]).ok()) {
      allocated = false;
    }
  }
  return allocated;
}

// Allocates a placed or running job on the cluster, when its placement is still whole.
void SchedInput::Occupy(const jobs::Job& job, const sched::QueuedJob& q) {
  sched::RunningJob r;
  r.job = &q;
  r.start_s = (job.start_time_us > 0 ? job.start_time_us : job.submit_time_us) / 1'000'000;
  if (!Resolve(job, q, &r.placements)) return;
  bool conflict = false;
  if (AllocateTasks(cluster, q.tasks, r.placements, &conflict)) {
    own_running_.push_back(std::move(r));
    running_source.push_back(&job);
  }
}

std::optional<std::vector<sched::Placement>> SchedInput::ToPlacements(
    const std::vector<jobs::TaskPlacement>& placements) const {
  std::vector<sched::Placement> out;
  for (const jobs::TaskPlacement& p : placements) {
    sched::Placement sp;
    sp.node = (kept_ != nullptr ? kept_->layout.idle : cluster).FindNode(p.node);
    if (sp.node < 0) return std::nullopt;
    const gpu::NodeInfo* info = node_of_[static_cast<size_t>(sp.node)]->info;
    const std::vector<SchedDevice>& devices = devices_()[static_cast<size_t>(sp.node)];
    for (const std::string& uuid : p.gpu_uuids) {
      auto it = std::find_if(devices.begin(), devices.end(), [&](const SchedDevice& d) {
        return SchedDeviceUuid(*info, d) == uuid;
      });
      if (it == devices.end()) return std::nullopt;
      sp.gpus.push_back(static_cast<int32_t>(it - devices.begin()));
    }
    out.push_back(std::move(sp));
  }
  return out;
}

std::vector<jobs::TaskPlacement> SchedInput::ToTaskPlacements(
    const sched::QueuedJob& job, const std::vector<sched::Placement>& placements) const {
  std::vector<jobs::TaskPlacement> out;
  for (size_t t = 0; t < placements.size(); ++t) {
    const sched::Placement& sp = placements[t];
    const SchedNode& n = *node_of_[static_cast<size_t>(sp.node)];
    jobs::TaskPlacement tp;
    tp.node = n.name;
    tp.gpu_milli = job.tasks[t].num_gpu > 0 ? job.tasks[t].gpu_milli : 0;
    for (int32_t g : sp.gpus) {
      // What it is charged (a MIG instance held whole: its part of the GPU), kept with the
      // placement so that usage reads it from the job alone.
      const sched::ClusterState& c = kept_ != nullptr ? kept_->layout.idle : cluster;
      const int32_t charged = sched::ChargedGpuMilli(c.node(sp.node), g, tp.gpu_milli);
      if (charged != tp.gpu_milli) tp.charged_milli = std::max(tp.charged_milli, charged);
      const SchedDevice& d = devices_()[static_cast<size_t>(sp.node)][static_cast<size_t>(g)];
      tp.gpu_indices.push_back(n.info->gpus[d.gpu].index);
      tp.gpu_uuids.push_back(SchedDeviceUuid(*n.info, d));
    }
    out.push_back(std::move(tp));
  }
  return out;
}

}  // namespace gpupool::controller
