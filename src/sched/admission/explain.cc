#include "sched/admission/explain.h"

#include <fmt/format.h>

#include <algorithm>

#include "sched/queue/gang_placement.h"

namespace gpupool::sched {
namespace {

std::string FormatShare(int64_t milli) {
  return fmt::format("{:.3g}", static_cast<double>(milli) / 1000.0);
}

// "2 CPUs", "0.5 CPU and 4096 MiB memory".
std::string CpuMemText(const Task& t) {
  std::string out = FormatShare(t.cpu_milli) + (t.cpu_milli <= 1000 ? " CPU" : " CPUs");
  if (t.memory_mib > 0) out += " and " + std::to_string(t.memory_mib) + " MiB memory";
  return out;
}

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

}  // namespace

// The nodes one filter refused for one reason.
struct PendingExplainer::NodeCount {
  std::string reason;
  int32_t count = 0;
  std::vector<std::string> names;  // for filters that name nodes
};

struct PendingExplainer::Survey {
  int32_t nodes = 0;
  int32_t available = 0;          // nodes no filter refused
  std::vector<NodeCount> counts;  // in the order first seen
  // On the nodes whose GPUs suit the task and that no admission filter refused: the most
  // GPUs with the task's share free on one node, the most free share of one GPU, and
  // whether a node with the GPUs lacks the CPU or memory. A GPU another owner holds
  // (ClusterState::HeldByOthers) counts as full; `held_fits`: such a GPU has the share free.
  // A MIG instance the task may not take (ClusterState::Blocked) counts as full;
  // `mig_need_mib`: the task's GPU memory need on a node with MIG instances (0: none seen).
  int32_t best_block = 0;
  int64_t mig_need_mib = 0;
  int32_t best_share = 0;
  bool cpu_mem_short = false;
  bool held_fits = false;
};

PendingExplainer::PendingExplainer(const ClusterState& cluster,
                                   std::vector<const FilterPlugin*> filters,
                                   const FilterPlugin& fit, std::string queue_order,
                                   std::string single_owner_note)
    : cluster_(cluster),
      filters_(std::move(filters)),
      fit_(fit),
      queue_order_(std::move(queue_order)),
      single_owner_note_(std::move(single_owner_note)) {}

size_t PendingExplainer::ShapesHash::operator()(const std::vector<TaskShape>& shapes) const {
  size_t h = shapes.size();
  for (const TaskShape& s : shapes) h = h * 1000003u ^ HashShape(s);
  return h;
}

PendingExplainer::Survey PendingExplainer::SurveyNodes(const Task& t) const {
  Survey s;
  s.nodes = cluster_.num_nodes();
  std::string reason;
  for (int32_t n = 0; n < s.nodes; ++n) {
    const FilterPlugin* refused = nullptr;
    for (const FilterPlugin* f : filters_) {
      if (!f->Filter(cluster_, t, n, &reason)) {
        refused = f;
        break;
      }
    }
    if (refused == nullptr) {
      if (t.NeedsGpu() && cluster_.Allows(n, t)) {
        const NodeState& ns = cluster_.node(n);
        int32_t block = 0;
        const uint64_t held = cluster_.HeldByOthers(n, t);
        const uint64_t mig = cluster_.Blocked(n, t) & ns.whole_only_gpus;
        if (ns.whole_only_gpus != 0 && t.IsFractional()) {
          s.mig_need_mib = std::max(s.mig_need_mib, cluster_.GpuMemoryNeedMib(n, t));
        }
        for (int32_t g = 0; g < ns.num_gpus(); ++g) {
          int32_t free = (mig >> g & 1) != 0 ? 0 : ns.gpu_free_milli[static_cast<size_t>(g)];
          if ((held >> g & 1) != 0) {
            s.held_fits = s.held_fits || free >= t.gpu_milli;
            free = 0;
          }
          block += free >= t.gpu_milli;
          s.best_share = std::max(s.best_share, free);
        }
        s.best_block = std::max(s.best_block, block);
        s.cpu_mem_short = s.cpu_mem_short ||
                          (block >= t.num_gpu &&
                           (ns.cpu_free_milli < t.cpu_milli || ns.memory_free_mib < t.memory_mib));
      }
      if (fit_.Filter(cluster_, t, n, &reason)) {
        ++s.available;
        continue;
      }
      refused = &fit_;
    }
    auto it = std::find_if(s.counts.begin(), s.counts.end(),
                           [&](const NodeCount& c) { return c.reason == reason; });
    if (it == s.counts.end()) it = s.counts.insert(s.counts.end(), NodeCount{reason, 0, {}});
    ++it->count;
    if (refused->NamesNodes()) it->names.push_back(cluster_.node(n).name);
  }
  return s;
}

std::string PendingExplainer::Headline(const QueuedJob& job, const Survey& s) const {
  const Task& t = job.tasks.front();
  if (t.NeedsGpu()) {
    std::string of = t.gpu_models.empty() ? "" : " of model " + Join(t.gpu_models, "|");
    if (!t.allowed_nodes.empty()) {
      of += fmt::format(" on the {} node{} that can run its environment", t.allowed_nodes.size(),
                        t.allowed_nodes.size() == 1 ? "" : "s");
    }
    if (t.PicksNodes()) of += " on the nodes its --nodelist / --exclude leave";
    if (t.IsFractional() && s.best_share < t.gpu_milli) {
      if (s.held_fits)
        return "needs " + FormatShare(t.gpu_milli) + " of one GPU" + of + "; " + single_owner_note_;
      return "needs " + FormatShare(t.gpu_milli) + " of one GPU" + of +
             "; the most free on any GPU: " + FormatShare(s.best_share) +
             (s.mig_need_mib == 0 ? std::string()
                                  : fmt::format(", and no idle MIG instance has {:.1f} GiB",
                                                static_cast<double>(s.mig_need_mib) / 1024.0));
    }
    if (s.best_block < t.num_gpu) {
      return fmt::format("needs {} idle GPU{}{}; largest idle block on any node: {}", t.num_gpu,
                         t.num_gpu == 1 ? "" : "s", of, s.best_block);
    }
    if (s.cpu_mem_short) {
      return "needs " + CpuMemText(t) + " beside its GPUs; no node with the GPUs has them free";
    }
  } else if (s.available == 0) {
    return "needs " + CpuMemText(t) + "; no node" +
           (t.PicksNodes() ? " its --nodelist / --exclude leave" : "") + " has them free";
  }
  if (job.tasks.size() > 1) {
    return fmt::format("needs {} tasks placed together; not all fit at once now", job.tasks.size());
  }
  return "waiting for its turn: jobs ahead of it in the queue (" + queue_order_ +
         " order) come first";
}

std::string PendingExplainer::Tally(const Survey& s) {
  if (s.counts.empty()) return "";
  std::vector<const NodeCount*> order;
  for (const NodeCount& c : s.counts) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(),
                   [](const NodeCount* a, const NodeCount* b) { return a->count > b->count; });
  std::string out = fmt::format("; {}/{} nodes are available: ", s.available, s.nodes);
  for (size_t i = 0; i < order.size(); ++i) {
    out += fmt::format("{}{} {}", i == 0 ? "" : ", ", order[i]->count, order[i]->reason);
    if (!order[i]->names.empty()) out += " (" + Join(order[i]->names, ", ") + ")";
  }
  return out;
}

std::string PendingExplainer::Explain(const QueuedJob& job, const Reservation* reservation) {
  if (job.tasks.empty()) return "";
  std::vector<TaskShape> key;
  key.reserve(job.tasks.size());
  for (const Task& t : job.tasks) key.push_back(ShapeOf(t));
  if (reservation == nullptr) {
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  std::string out;
  if (std::string never; GangObviouslyUnplaceable(cluster_, job.tasks, &never)) {
    out = "cannot run on any node: " + never;
  } else {
    const Survey s = SurveyNodes(job.tasks.front());
    if (reservation == nullptr || reservation->unplannable) {
      // Behind jobs without a time limit its start is unknown: what it needs says most.
      out = Headline(job, s);
    } else {
      out = fmt::format(
          "next in line; resources reserved from {} s from now, when running jobs reach their "
          "time limits",
          reservation->starts_in_s);
    }
    out += Tally(s);
  }
  if (reservation == nullptr) cache_.emplace(std::move(key), out);
  return out;
}

}  // namespace gpupool::sched
