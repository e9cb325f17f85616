// Cluster views: `gpupool nodes`, `usage`, `token list`, `whoami`. Declared in render.h.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>
#include <string_view>

#include "cli/client/json_view.h"
#include "cli/client/render.h"
#include "cli/client/table.h"
#include "cli/client/units.h"

namespace gpupool::cli {
namespace {

// "8x NVIDIA H100 80GB HBM3" or "4x A100, 4x H100": GPU models with counts, in order.
std::string Models(const Json& gpus) {
  std::vector<std::pair<std::string, int>> counts;
  for (const Json& g : gpus) {
    const std::string name = GetString(g, "name", "?");
    auto it =
        std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == name; });
    if (it == counts.end()) {
      counts.emplace_back(name, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [name, n] : counts) {
    out += (out.empty() ? "" : ", ") + std::to_string(n) + "x " + name;
  }
  return out.empty() ? "-" : out;
}

std::string RunningJobs(const Json& node) {
  const Json* r = Field(node, "running_jobs");
  if (r == nullptr) return "0";
  if (r->is_array()) return std::to_string(r->size());
  if (r->is_number_integer() || r->is_number_unsigned()) return r->dump();
  return "?";
}

// MiB as GiB with one decimal: "12.5".
std::string Gib(int64_t mib) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(mib) / 1024);
  return buf;
}

// "0-3,5,6": GPU indices ascending, runs of three or more as a range.
std::string IndexRuns(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (j < i + 2) j = i;  // a pair reads better as "5,6"
    out += (out.empty() ? "" : ",") + std::to_string(v[i]);
    if (j > i) out += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return out;
}

// "n1 GPUs 0-7: MODE" per node and mode its GPUs have (`mode_of` a GPU), modes in
// first-seen order; nothing for GPUs whose mode is "".
std::string GpusByMode(const std::string& node, const Json& gpus,
                       const std::function<std::string(const Json&)>& mode_of) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> modes;
  for (const Json& g : gpus) {
    const std::string mode = mode_of(g);
    if (mode.empty()) continue;
    auto it =
        std::find_if(modes.begin(), modes.end(), [&](const auto& m) { return m.first == mode; });
    if (it == modes.end()) it = modes.insert(modes.end(), {mode, {}});
    it->second.push_back(GetInt(g, "index"));
  }
  std::string out;
  for (const auto& [mode, indices] : modes) {
    out += CleanCell(node) + (indices.size() == 1 ? " GPU " : " GPUs ") + IndexRuns(indices) +
           ": " + CleanCell(mode) + "\n";
  }
  return out;
}

// "gpu1 GPUs 0-7: mps" per node and enforcement mode its GPUs state; nothing for GPUs
// that state none.
std::string Enforcement(const std::string& node, const Json& gpus) {
  return GpusByMode(node, gpus, [](const Json& g) { return GetString(g, "enforcement"); });
}

// "n1 GPUs 0-7: CPX, NPS4, 38 CUs" per node and AMD partitioning its GPUs report (docs/
// sharing.md, "AMD GPUs"); nothing for GPUs that report none.
std::string Partitions(const std::string& node, const Json& gpus) {
  return GpusByMode(node, gpus, [](const Json& g) {
    std::string mode = GetString(g, "compute_partition");
    if (const std::string memory = GetString(g, "memory_partition"); !memory.empty()) {
      mode += (mode.empty() ? "" : ", ") + memory;
    }
    if (!mode.empty()) {
      if (const int64_t cus = GetInt(g, "compute_units", 0); cus > 0) {
        mode += ", " + std::to_string(cus) + " CUs";
      }
    }
    return mode;
  });
}

// "n1 GPU 3: memory unknown" per node and GPU whose memory size discovery could not read
// (0, docs/node-schema.md; a GPU without the field says nothing): the scheduler places no
// share sized by memory on that node.
std::string UnknownMemory(const std::string& node, const Json& gpus) {
  return GpusByMode(node, gpus, [](const Json& g) {
    return GetInt(g, "memory_total_bytes", -1) == 0 ? std::string("memory unknown") : std::string();
  });
}

constexpr const char* kPartitionsTitle =
    "AMD partitions, each scheduled as a GPU of its own (docs/sharing.md):\n";

// A job as its user names it: "12", or "40_3" (ARRAY_INDEX) for an array's element, from
// an API object that carries its id as `id_key` and, for an element, array_id/array_index.
std::string UserJobId(const Json& j, std::string_view id_key) {
  const int64_t array = GetInt(j, "array_id", 0);
  if (array > 0) return std::to_string(array) + "_" + std::to_string(GetInt(j, "array_index"));
  return std::to_string(GetInt(j, id_key, 0));
}

// Who holds a MIG instance (the API's mig_devices entry, of GPU `g`): "job 12", "job 40_3"
// for an array's element, "another user's job" where the caller may not read it, "not
// available: GPU cordoned: REASON" where its GPU takes no new work, or "free".
std::string MigHolder(const Json& g, const Json& m) {
  if (GetBool(m, "other_user")) return "another user's job";
  if (GetInt(m, "job", 0) > 0) return "job " + UserJobId(m, "job");
  if (GetBool(m, "out_of_service")) {
    const std::string why = GetString(g, "out_of_service");
    return "not available: GPU " + (why.empty() ? "out of service" : CleanCell(why));
  }
  return "free";
}

// The MIG instances of a node's GPUs in MIG mode, one line each: "n1 GPU 0 1g.10gb
// (MIG-...): job 12" (MigHolder), ": free" or ": not available: ..."; "" without any.
std::string MigInstances(const std::string& node, const Json& gpus) {
  std::string out;
  for (const Json& g : gpus) {
    for (const Json& m : GetArray(g, "mig_devices")) {
      out += CleanCell(node) + " GPU " + std::to_string(GetInt(g, "index")) + " " +
             CleanCell(GetString(m, "profile", "?")) + " (" + CleanCell(GetString(m, "uuid")) +
             "): " + MigHolder(g, m) + "\n";
    }
  }
  return out;
}

// A number of the GPU's telemetry with a unit ("73%", "250 W"), "-" when absent.
std::string Reading(const Json& t, const char* key, const char* unit) {
  const Json* v = Field(t, key);
  if (v == nullptr || !v->is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f%s", v->get<double>(), unit);
  return buf;
}

// What a GPU's hardware health readings (docs/health.md, "Hardware health thresholds")
// say beyond all-clear: "3 retired pages (a retirement pending), HW slowdown"; "" when
// none is set or each reads 0 / false.
std::string HardwareReadings(const Json& t) {
  auto count = [&](const char* key) { return GetInt(t, key, 0); };
  auto flag = [&](const char* key) {
    const Json* v = Field(t, key);
    return v != nullptr && v->is_boolean() && v->get<bool>();
  };
  std::vector<std::string> said;
  if (const int64_t n = count("retired_pages"); n > 0) {
    said.push_back(std::to_string(n) + " retired page" + (n == 1 ? "" : "s"));
  }
  if (flag("retired_pages_pending")) said.push_back("a page retirement waits for a reset");
  if (const int64_t n = count("remapped_rows"); n > 0) {
    said.push_back(std::to_string(n) + " remapped row" + (n == 1 ? "" : "s"));
  }
  if (flag("remapped_rows_pending")) said.push_back("a row remapping waits for a reset");
  if (flag("remapped_rows_failed")) said.push_back("a row remapping failed (no spare rows)");
  if (flag("hw_slowdown")) said.push_back("the hardware slows its clocks");
  if (const int64_t n = count("ecc_uncorrected"); n > 0) {
    said.push_back(std::to_string(n) + " uncorrected ECC error" + (n == 1 ? "" : "s"));
  }
  std::string out;
  for (const std::string& s : said) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Each GPU's latest sample (docs/monitoring.md): one row per GPU of the nodes that report
// telemetry; empty when none does.
std::string GpuReadings(const Json& nodes) {
  Table t({"NODE", "GPU>", "ALLOC>", "UTIL>", "MEMORY>", "POWER>", "TEMP>", "XIDS>"});
  for (const Json& node : nodes) {
    for (const Json& g : GetArray(node, "gpus")) {
      const Json* tel = Field(g, "telemetry");
      if (tel == nullptr || !tel->is_object()) continue;
      const int64_t used = GetInt(*tel, "mem_used_mib", -1);
      const int64_t total = GetInt(*tel, "mem_total_mib", -1);
      const std::string mem =
          used < 0 ? "-" : Gib(used) + "/" + (total > 0 ? Gib(total) : std::string("?")) + " GiB";
      const Json* xids = Field(*tel, "xid_count");
      t.AddRow({GetString(node, "name"), std::to_string(GetInt(g, "index")),
                FormatMilli(GetInt(g, "allocated_milli")), Reading(*tel, "util_pct", "%"), mem,
                Reading(*tel, "power_w", " W"), Reading(*tel, "temp_c", " C"),
                xids != nullptr && xids->is_number() ? xids->dump() : "-"});
    }
  }
  return t.rows() == 0 ? "" : t.Render();
}

// Who holds a GPU (the API's `holders`): "12 alice", "40_3 bob 0.5" for a share, "another
// user's job" (and its share) where the caller may not read the job; "-" when free.
std::string HoldersCell(const Json& g) {
  std::string out;
  for (const Json& h : GetArray(g, "holders")) {
    std::string one;
    if (GetBool(h, "other_user")) {
      one = "another user's job";
    } else {
      one = UserJobId(h, "job_id") + " " + CleanCell(GetString(h, "user"));
    }
    if (const int64_t milli = GetInt(h, "gpu_milli", 1000); milli < 1000) {
      one += " " + FormatMilli(milli);
    }
    out += (out.empty() ? "" : ", ") + one;
  }
  return out.empty() ? "-" : out;
}

// "n1 GPU 0: layout changed under running jobs 1, 2: held until they end\n" per GPU whose
// MIG layout changed under jobs that still run there (docs/sharing.md).
std::string LayoutChanged(const Json& nodes) {
  std::string out;
  for (const Json& node : nodes) {
    for (const Json& g : GetArray(node, "gpus")) {
      const Json& under = GetArray(g, "layout_changed_under");
      if (under.empty()) continue;
      std::string jobs;
      for (const Json& h : under) {
        jobs += (jobs.empty() ? "" : ", ") +
                (GetBool(h, "other_user") ? "another user's job" : UserJobId(h, "job_id"));
      }
      const bool one = under.size() == 1;
      out += CleanCell(GetString(node, "name")) + " GPU " + std::to_string(GetInt(g, "index")) +
             ": layout changed under running job" + (one ? " " : "s ") + jobs + ": held until " +
             (one ? "it ends" : "they end") + "\n";
    }
  }
  return out;
}

// "n1 GPU 0: 12 alice\n" per GPU that someone holds.
std::string GpuHolders(const Json& nodes) {
  std::string out;
  for (const Json& node : nodes) {
    for (const Json& g : GetArray(node, "gpus")) {
      if (GetArray(g, "holders").empty()) continue;
      out += CleanCell(GetString(node, "name")) + " GPU " + std::to_string(GetInt(g, "index")) +
             ": " + HoldersCell(g) + "\n";
    }
  }
  return out;
}

std::string Hours(double h) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", h);
  return buf;
}

// A limit's preemption defaults in words: "yes, min 30m, grace 1m00s"; "" for none.
std::string PreemptionCell(const Json& l) {
  std::vector<std::string> parts;
  if (const Json* p = Field(l, "preemptible"); p != nullptr && p->is_boolean()) {
    parts.push_back(p->get<bool>() ? "yes" : "no");
  }
  if (const int64_t m = GetInt(l, "min_runtime_s", -1); m >= 0) {
    parts.push_back("min " + FormatDuration(m));
  }
  if (const int64_t g = GetInt(l, "preempt_grace_s", -1); g >= 0) {
    parts.push_back("grace " + FormatDuration(g));
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// A number as "2", "0.5", "1.25" (%g: at most 6 digits); a fair-share weight.
std::string Weight(double w) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", w);
  return buf;
}

// A user's or project's fair-share weight ("" without: it weighs 1).
std::string FairShareCell(const Json& l) {
  const Json* w = Field(l, "fair_share");
  return w != nullptr && w->is_number() ? Weight(w->get<double>()) : "";
}

// A project's members as "alice,bob" ("" without).
std::string MembersCell(const Json& l) {
  std::string out;
  for (const Json& m : GetArray(l, "members")) {
    if (m.is_string()) out += (out.empty() ? "" : ",") + CleanCell(m.get<std::string>());
  }
  return out;
}

// A lost node's lease (GET /v1/nodes' lease_until_us) in words.
std::string LeaseWords(int64_t until_us, int64_t now_us) {
  const std::string when = FormatTimeUtc(until_us);
  if (until_us <= now_us) {
    return "ran out at " + when + "; its --requeue and preemptible jobs may start elsewhere";
  }
  return "its --requeue and preemptible jobs are stopped there by " + when + " (in " +
         FormatDuration((until_us - now_us + 999'999) / 1'000'000) +
         "), and start elsewhere only then, or once it registers again";
}

}  // namespace

std::string RenderNodes(const Json& answer, int64_t now_us) {
  Table t({"NODE", "STATE", "ADDRESS", "GPUS>", "CPUS>", "MEMORY>", "RUNNING>", "SEEN>", "MODELS"});
  std::string drains;       // "n1: disk swap (root)" per drained node
  std::string health;       // "n1 GPU 3: cordoned: Xid 95: ..." per GPU that is not healthy
  std::string checking;     // nodes whose health verdict is still to come
  std::string leases;       // "n1: its --requeue ... jobs are stopped there by ..." per lost node
  std::string enforcement;  // "n1 GPUs 0-7: mps" per node and mode stated
  std::string mig;          // one line per MIG instance
  std::string partitions;   // "n1 GPUs 0-7: CPX, NPS4, 38 CUs" per node and mode
  std::string unknown_memory;  // "n1 GPU 3: memory unknown" per node
  for (const Json& node : GetArray(answer, "nodes")) {
    const Json& gpus = GetArray(node, "gpus");
    enforcement += Enforcement(GetString(node, "name"), gpus);
    partitions += Partitions(GetString(node, "name"), gpus);
    unknown_memory += UnknownMemory(GetString(node, "name"), gpus);
    mig += MigInstances(GetString(node, "name"), gpus);
    int64_t allocated = 0;
    for (const Json& g : gpus) {
      allocated += GetInt(g, "allocated_milli");
      const Json& h = GetObject(g, "health");
      if (const std::string state = GetString(h, "state"); !state.empty()) {
        health += CleanCell(GetString(node, "name")) + " GPU " +
                  std::to_string(GetInt(g, "index")) + ": " + CleanCell(state) + ": " +
                  CleanCell(GetString(h, "reason")) + "\n";
      }
    }
    const int64_t heartbeat = GetInt(node, "last_heartbeat_us");
    const std::string seen =
        heartbeat > 0 ? FormatDuration((now_us - heartbeat) / 1'000'000) + " ago" : "never";
    t.AddRow(
        {GetString(node, "name"), GetString(node, "state"), GetString(node, "address", "-"),
         FormatMilli(allocated) + "/" + std::to_string(gpus.size()),
         FormatMilli(GetInt(node, "cpu_allocated_milli")) + "/" +
             FormatMilli(GetInt(node, "cpu_milli")),
         Gib(GetInt(node, "memory_allocated_mib")) + "/" + Gib(GetInt(node, "memory_mib")) + " GiB",
         RunningJobs(node), seen, Models(gpus)});
    if (auto why = GetString(node, "drain_reason"); !why.empty()) {
      drains += CleanCell(GetString(node, "name")) + ": " + CleanCell(why) + "\n";
    }
    if (GetBool(node, "health_check_pending"))
      checking += CleanCell(GetString(node, "name")) + "\n";
    if (const int64_t until = GetInt(node, "lease_until_us"); until > 0) {
      leases += CleanCell(GetString(node, "name")) + ": " + LeaseWords(until, now_us) + "\n";
    }
  }
  const std::string readings = GpuReadings(GetArray(answer, "nodes"));
  const std::string holders = GpuHolders(GetArray(answer, "nodes"));
  const std::string layout = LayoutChanged(GetArray(answer, "nodes"));
  return t.Render() + (readings.empty() ? "" : "GPUs, latest sample:\n" + readings) +
         (holders.empty() ? "" : "GPUs held (job, user, share):\n" + holders) +
         (layout.empty() ? "" : "GPUs taking no new work (docs/sharing.md):\n" + layout) +
         (drains.empty() ? "" : "drained:\n" + drains) +
         (health.empty() ? "" : "GPU health (docs/health.md):\n" + health) +
         (checking.empty() ? ""
                           : "waiting for their health check's first verdict (no new work until "
                             "it comes):\n" +
                                 checking) +
         (leases.empty() ? ""
                         : "leases of nodes that stopped answering (docs/health.md):\n" + leases) +
         (enforcement.empty() ? "" : "GPU share enforcement (docs/sharing.md):\n" + enforcement) +
         (mig.empty() ? "" : "MIG instances, each held whole by one job:\n" + mig) +
         (partitions.empty() ? "" : kPartitionsTitle + partitions) +
         (unknown_memory.empty() ? ""
                                 : "GPU memory unknown: no --gpu-mem share is placed on these "
                                   "nodes (docs/node-schema.md):\n" +
                                       unknown_memory);
}

Result<std::string> RenderNode(const Json& answer, const std::string& name, int64_t now_us) {
  const Json* found = nullptr;
  for (const Json& node : GetArray(answer, "nodes")) {
    if (GetString(node, "name") == name) found = &node;
  }
  if (found == nullptr) {
    return Status::NotFound("no node '" + CleanCell(name) +
                            "' in the pool; `gpupool nodes` lists them");
  }
  const Json& node = *found;
  const int64_t heartbeat = GetInt(node, "last_heartbeat_us");
  std::string out = "Node " + CleanCell(name) + ": " + CleanCell(GetString(node, "state")) +
                    ", address " + CleanCell(GetString(node, "address", "-")) + ", protocol " +
                    CleanCell(GetString(node, "protocol", "?")) + ", last seen " +
                    (heartbeat > 0 ? FormatDuration((now_us - heartbeat) / 1'000'000) + " ago"
                                   : std::string("never")) +
                    "\n";
  out += "CPUs " + FormatMilli(GetInt(node, "cpu_allocated_milli")) + "/" +
         FormatMilli(GetInt(node, "cpu_milli")) + ", memory " +
         Gib(GetInt(node, "memory_allocated_mib")) + "/" + Gib(GetInt(node, "memory_mib")) +
         " GiB, running jobs " + RunningJobs(node) + "\n";
  if (auto why = GetString(node, "drain_reason"); !why.empty()) {
    out +=
        "Drained: " + CleanCell(why) + " (`gpupool node resume " + CleanCell(name) + "` ends it)\n";
  }
  if (GetBool(node, "health_check_pending")) {
    out += "Health check: its first verdict is still to come; no new work until it does\n";
  }
  if (const int64_t until = GetInt(node, "lease_until_us"); until > 0) {
    out += "Lease: " + LeaseWords(until, now_us) + "\n";
  }
  if (const Json& disk = GetObject(node, "disk"); !disk.empty()) {
    const auto bytes = [&](const char* key) {
      return FormatBytes(static_cast<uint64_t>(std::max<int64_t>(0, GetInt(disk, key))));
    };
    out += "Disk: " + CleanCell(GetString(disk, "path", "?")) + ": " + bytes("free_bytes") +
           " free of " + bytes("total_bytes");
    if (GetBool(disk, "pressure")) {
      out += "; under pressure: " + CleanCell(GetString(disk, "reason"));
    }
    out += "\n";
  }
  Table t({"GPU>", "MODEL", "MEMORY>", "ALLOCATED>", "ENFORCEMENT", "HEALTH", "UTIL>", "USED>",
           "TEMP>", "POWER>", "LAST XID>", "HELD BY"});
  std::string details;
  for (const Json& g : GetArray(node, "gpus")) {
    const Json& h = GetObject(g, "health");
    const Json& tel = GetObject(g, "telemetry");
    const std::string state = GetString(h, "state", "healthy");
    const std::string index = std::to_string(GetInt(g, "index"));
    const int64_t used = GetInt(tel, "mem_used_mib", -1);
    t.AddRow({index, GetString(g, "name", "?"),
              GetInt(g, "memory_total_bytes", -1) == 0
                  ? std::string("unknown")
                  : FormatBytes(static_cast<uint64_t>(
                        std::max<int64_t>(0, GetInt(g, "memory_total_bytes")))),
              FormatMilli(GetInt(g, "allocated_milli")), GetString(g, "enforcement", "-"), state,
              Reading(tel, "util_pct", "%"), used >= 0 ? Gib(used) + " GiB" : "-",
              Reading(tel, "temp_c", " C"), Reading(tel, "power_w", " W"),
              Reading(tel, "xid_errors", ""), HoldersCell(g)});
    if (!GetString(h, "state").empty()) {
      details += "GPU " + index + " (" + CleanCell(GetString(g, "uuid")) +
                 "): " + CleanCell(state) + " since " + FormatTimeUtc(GetInt(h, "since_us")) +
                 " by " + CleanCell(GetString(h, "by", "?")) + ": " +
                 CleanCell(GetString(h, "reason"));
      if (auto ev = GetString(h, "evidence"); !ev.empty())
        details += " (evidence: " + CleanCell(ev) + ")";
      if (const int64_t strikes = GetInt(h, "strikes"); strikes > 0) {
        details += "; strikes " + std::to_string(strikes) + " of 3";
      }
      details += "\n";
    }
    if (const std::string hw = HardwareReadings(tel); !hw.empty()) {
      details += "GPU " + index + " hardware: " + hw + "\n";
    }
  }
  out += t.Render();
  if (!details.empty()) out += "GPU health (docs/health.md):\n" + details;
  if (const std::string layout = LayoutChanged(Json::array({node})); !layout.empty()) {
    out += "GPUs taking no new work (docs/sharing.md):\n" + layout;
  }
  if (const std::string mig = MigInstances(name, GetArray(node, "gpus")); !mig.empty()) {
    out += "MIG instances, each held whole by one job:\n" + mig;
  }
  if (const std::string parts = Partitions(name, GetArray(node, "gpus")); !parts.empty()) {
    out += kPartitionsTitle + parts;
  }
  return out;
}

std::string RenderLimits(const Json& answer) {
  // The PREEMPTIBLE, MEMBERS and DEFAULT_PROJECT columns only where some entry has one.
  bool preemption = !PreemptionCell(GetObject(answer, "default")).empty();
  bool members = false;
  bool defaults = false;
  bool weights = false;  // FAIR_SHARE: where some entry has a weight (others weigh 1)
  for (const char* kind : {"users", "projects"}) {
    const Json& m = GetObject(answer, kind);
    for (auto it = m.begin(); it != m.end(); ++it) {
      preemption = preemption || !PreemptionCell(*it).empty();
      members = members || !MembersCell(*it).empty();
      defaults = defaults || !GetString(*it, "default_project").empty();
      weights = weights || !FairShareCell(*it).empty();
    }
  }
  std::vector<std::string> header = {"FOR", "MAX_GPUS>", "MAX_RUNNING>", "MAX_QUEUED>"};
  if (weights) header.push_back("FAIR_SHARE>");
  if (preemption) header.push_back("PREEMPTIBLE");
  if (members) header.push_back("MEMBERS");
  if (defaults) header.push_back("DEFAULT_PROJECT");
  Table t(header);
  // A user's row leaves a field to the default's ("default"); elsewhere unset is none.
  auto cell = [](const Json& l, const char* key, bool inherits) {
    const int64_t v = GetInt(l, key, -1);
    return v >= 0 ? std::to_string(v) : std::string(inherits ? "default" : "-");
  };
  auto row = [&](const std::string& who, const Json& l, bool inherits) {
    std::vector<std::string> cells = {who, cell(l, "max_gpus", inherits),
                                      cell(l, "max_running", inherits),
                                      cell(l, "max_queued", inherits)};
    auto add = [&cells](bool shown, const std::string& v) {
      if (shown) cells.push_back(v.empty() ? "-" : v);
    };
    if (weights) cells.push_back(FairShareCell(l).empty() ? "1" : FairShareCell(l));
    add(preemption, PreemptionCell(l));
    add(members, MembersCell(l));
    add(defaults, CleanCell(GetString(l, "default_project")));
    t.AddRow(cells);
  };
  row("every user (default)", GetObject(answer, "default"), false);
  for (const char* kind : {"users", "projects"}) {
    const bool users = kind == std::string("users");
    const Json& m = GetObject(answer, kind);
    for (auto it = m.begin(); it != m.end(); ++it) {
      row(std::string(users ? "user " : "project ") + it.key(), *it, users);
    }
  }
  return t.Render();
}

std::string RenderUsage(const Json& answer) {
  const std::string by = GetString(answer, "by", "user");
  // A pool whose fair share is by project (server --fair-by project) says so: its
  // projects' rows are what fair share weighs, and a user's are not.
  std::string fair;
  if (GetString(answer, "fair_share_by", "user") == "project") {
    fair = by == "project" ? " (this pool's fair-share groups)"
                           : " (this pool's fair share is by project: --by project)";
  }
  std::string out = "GPU-hours allocated from " + FormatTimeUtc(GetInt(answer, "since_us")) +
                    " to " + FormatTimeUtc(GetInt(answer, "until_us")) + ", by " + by + fair + "\n";
  std::string key_header = by;
  for (char& c : key_header) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  // Servers with GPU telemetry also say how much of it was used (utilisation-weighted);
  // rows of the pool's fair-share groups have their weight and normalised share (sshare's
  // RawShares and NormShares).
  bool used = false;
  bool shares = false;
  for (const Json& row : GetArray(answer, "rows")) {
    used = used || Field(row, "used_gpu_hours");
    shares = shares || Field(row, "norm_share");
  }
  std::vector<std::string> header = {key_header, "GPU-HOURS>"};
  if (used) header.insert(header.end(), {"USED>", "EFFICIENCY>"});
  header.push_back("JOBS>");
  if (shares) header.insert(header.end(), {"FAIR_SHARE>", "NORM_SHARE>"});
  Table t(header);
  double total_hours = 0;
  double total_used = 0;
  int64_t total_jobs = 0;
  auto efficiency = [](double u, double h) {
    if (h <= 0) return std::string("-");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * u / h);
    return std::string(buf);
  };
  for (const Json& row : GetArray(answer, "rows")) {
    const double h = GetDouble(row, "gpu_hours");
    const double u = GetDouble(row, "used_gpu_hours");
    const int64_t jobs = GetInt(row, "jobs");
    total_hours += h;
    total_used += u;
    total_jobs += jobs;
    std::string key = GetString(row, "key");
    if (key.empty()) key = "(none)";  // an older server's jobs without a project
    // By project, user `key`'s jobs without a project: their own group, named after them.
    if (GetBool(row, "own_group")) key += " (user's own)";
    std::vector<std::string> cells = {key, Hours(h)};
    if (used) cells.insert(cells.end(), {Hours(u), efficiency(u, h)});
    cells.push_back(std::to_string(jobs));
    if (shares) {
      char norm[32];
      std::snprintf(norm, sizeof norm, "%.3f", GetDouble(row, "norm_share"));
      cells.insert(cells.end(), {Weight(GetDouble(row, "fair_share", 1)), norm});
    }
    t.AddRow(cells);
  }
  std::vector<std::string> total = {"TOTAL", Hours(total_hours)};
  if (used) total.insert(total.end(), {Hours(total_used), efficiency(total_used, total_hours)});
  total.push_back(std::to_string(total_jobs));
  if (shares) total.insert(total.end(), {"", ""});
  t.AddRow(total);
  return out + t.Render();
}

std::string RenderUsageCsv(const Json& answer) {
  auto field = [](const std::string& v) {
    if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  auto number = [](double v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.6f", v);
    return std::string(buf);
  };
  // By project, one more column last (the earlier ones as they were): 1 where the row holds
  // a user's jobs without a project, in their own group named after them.
  const std::string by = GetString(answer, "by", "user");
  const bool by_project = by == "project";
  std::string out =
      by + ",gpu_hours,used_gpu_hours,efficiency,jobs" + (by_project ? ",own_group\n" : "\n");
  for (const Json& row : GetArray(answer, "rows")) {
    out += field(GetString(row, "key")) + "," + number(GetDouble(row, "gpu_hours")) + "," +
           number(GetDouble(row, "used_gpu_hours")) + "," + number(GetDouble(row, "efficiency")) +
           "," + std::to_string(GetInt(row, "jobs"));
    if (by_project) out += GetBool(row, "own_group") ? ",1" : ",0";
    out += "\n";
  }
  return out;
}

std::string RenderTokens(const Json& answer, int64_t now_us) {
  Table t({"ID", "KIND", "USER/NODE", "CREATED", "EXPIRES", "LAST USED"});
  for (const Json& tok : GetArray(answer, "tokens")) {
    const Json* id = Field(tok, "id");
    const int64_t expires = GetInt(tok, "expires_us");
    const int64_t used = GetInt(tok, "last_used_us");
    t.AddRow(
        {id == nullptr     ? ""
         : id->is_string() ? id->get<std::string>()
                           : id->dump(),
         GetString(tok, "kind"), GetString(tok, "user"), FormatTimeUtc(GetInt(tok, "created_us")),
         expires <= 0        ? "never"
         : expires <= now_us ? FormatTimeUtc(expires) + " (expired)"
                             : FormatTimeUtc(expires),
         used <= 0 ? "never"
                   : FormatDuration(std::max<int64_t>(0, now_us - used) / 1'000'000) + " ago"});
  }
  return t.Render();
}

std::string RenderControllers(const Json& answer) {
  const Json* leader = Field(answer, "leader");
  const std::vector<Json> all = GetArray(answer, "controllers");
  if (leader == nullptr && all.empty()) {
    const std::string note = GetString(answer, "note");
    return "One controller" + (note.empty() ? std::string() : ": " + CleanCell(note)) + "\n";
  }
  std::string out =
      leader == nullptr
          ? "No controller leads at the moment (a standby takes over when the lease ends).\n"
          : "Leader: " + CleanCell(GetString(*leader, "id")) + " at " +
                CleanCell(GetString(*leader, "address")) + ", epoch " +
                std::to_string(GetInt(*leader, "epoch")) + ", lease " +
                std::to_string(GetInt(*leader, "expires_in_ms")) + " ms left\n";
  Table t({"CONTROLLER", "ADDRESS", "ROLE", "SEEN", "UP"});
  for (const Json& c : all) {
    t.AddRow({GetString(c, "id"), GetString(c, "address"), GetString(c, "role"),
              FormatDuration(GetInt(c, "seen_ms_ago") / 1000) + " ago",
              FormatDuration(GetInt(c, "started_ms_ago") / 1000)});
  }
  return out + t.Render();
}

std::string RenderWhoami(const Json& answer) {
  return CleanCell(GetString(answer, "user", "?")) + " (uid " +
         std::to_string(GetInt(answer, "uid")) + ")" + (GetBool(answer, "admin") ? ", admin" : "") +
         "\n";
}

}  // namespace gpupool::cli
