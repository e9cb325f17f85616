// GPU health policy (issue 29, docs/health.md): what an Xid error does to a GPU and its
// node, and what a GPU's hardware health counters (retired pages, row remapping, hardware
// slowdown, uncorrected ECC errors; AMD RAS and bad pages) do once past their thresholds.
// The tables are here, in one place, and admins override them (server options --health-xid
// "79:cordon-node,13:ignore" and --health-threshold "retired-pages:10:60"). Pure: no I/O,
// time passed in; the controller applies it to what its agents report and keeps each GPU's
// GpuHealth.
//
// Thread-compatible: a HealthPolicy is immutable once created.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::gpu {

// A GPU's health. Cordoned and failed GPUs take no new work.
enum class GpuHealthState {
  kHealthy,
  kSuspect,   // errors worth watching; still takes work
  kCordoned,  // takes no new work until it is proven well (or an admin resumes it)
  kFailed,    // takes no work; needs service
};
std::string_view GpuHealthStateName(GpuHealthState state);
// Whether the scheduler may place new work on a GPU in `state`.
inline bool TakesWork(GpuHealthState state) {
  return state == GpuHealthState::kHealthy || state == GpuHealthState::kSuspect;
}

// What an Xid means, after NVIDIA's catalogue (XID errors, NVSentinel's mapping) and the
// Kubernetes device plugin's list of application Xids.
enum class HealthAction {
  kIgnore,       // informational: the GPU is fine (a page retired, corrected errors)
  kApplication,  // the job's fault (its job fails by itself); repeats cordon the GPU
  kSuspect,      // unknown or ambiguous: the GPU is suspect; repeats cordon it
  kCordonGpu,    // reset-class: the GPU takes no new work and its jobs end (or requeue)
  kCordonNode,   // reboot-class: the whole node takes no new work and the GPU's jobs end
};
std::string_view HealthActionName(HealthAction action);
// "ignore", "application", "suspect", "cordon-gpu", "cordon-node".
Result<HealthAction> ParseHealthAction(std::string_view name);

struct XidRule {
  int xid = 0;
  HealthAction action = HealthAction::kSuspect;
  std::string what;  // what the Xid means, for reasons and docs
};

// The built-in table, in Xid order (docs/health.md prints the same rows).
const std::vector<XidRule>& BuiltinXidRules();

// A row of the threshold table: a hardware health counter of a GPU and the values from
// which it makes the GPU suspect and cordoned (0: never). A flag counts 1 when set.
struct ThresholdRule {
  std::string name;  // "retired-pages", as in --health-threshold and docs/health.md
  std::string what;  // what it counts, for reasons and docs
  int64_t suspect_at = 0;
  int64_t cordon_at = 0;
  bool flag = false;  // a yes/no field: its thresholds are 0 or 1
};

// The built-in threshold table (docs/health.md prints the same rows).
const std::vector<ThresholdRule>& BuiltinThresholdRules();

// The hardware health fields a GPU's telemetry sample carries besides its ECC count
// (gpu/telemetry.h): NVML's, or amdgpu RAS's. Unset where the source cannot tell.
struct HardwareHealth {
  // Pages retired (NVIDIA dynamic page retirement, both causes), or AMD's bad VRAM pages.
  std::optional<int64_t> retired_pages;
  // A page retirement (or an AMD bad page) waits for the GPU's reset to take effect.
  std::optional<bool> retired_pages_pending;
  // DRAM rows remapped (NVIDIA, Ampere on), for correctable and uncorrectable errors.
  std::optional<int64_t> remapped_rows;
  std::optional<bool> remapped_rows_pending;  // a remapping waits for the GPU's reset
  std::optional<bool> remapped_rows_failed;   // a remapping failed: no spare rows are left
  // The hardware slows the clocks (NVML's HW slowdown, HW thermal slowdown or power brake).
  std::optional<bool> hw_slowdown;
  friend bool operator==(const HardwareHealth&, const HardwareHealth&) = default;
};

// Each threshold row's value in `hw` and `ecc_uncorrected` (uncorrected ECC errors since
// the driver loaded: NVIDIA's volatile count, AMD's RAS "ue" counts), by row name; a
// field that is unset gives no value.
std::map<std::string, int64_t> HealthReadings(const HardwareHealth& hw,
                                              std::optional<int64_t> ecc_uncorrected);

class HealthPolicy {
 public:
  // The built-in tables with `overrides` ("XID:ACTION[,XID:ACTION...]") and
  // `threshold_overrides` ("ROW:SUSPECT:CORDON[,...]", 0 for never) applied.
  // InvalidArgument naming the entry and the fix for a malformed one.
  static Result<HealthPolicy> Create(std::string_view overrides = "",
                                     std::string_view threshold_overrides = "");

  // The rule for `xid`; an Xid not in the table is kSuspect ("unknown Xid N").
  XidRule ForXid(int xid) const;
  // The threshold rows, in the built-in table's order.
  const std::vector<ThresholdRule>& thresholds() const { return thresholds_; }

  // Application and suspect Xids: this many within the window cordon the GPU.
  int repeats_to_cordon = 3;
  int64_t repeat_window_us = int64_t{3600} * 1'000'000;
  // Strikes: the cordon of a GPU by this policy that makes this many fails it instead
  // (it needs service; only an admin returns it). Only strikes within the window count:
  // older ones are forgotten when the GPU is next taken out (0: they never expire).
  int strikes_to_fail = 3;
  int64_t strike_window_us = int64_t{30} * 24 * 3600 * 1'000'000;

 private:
  Status ApplyThresholdOverrides(std::string_view overrides);

  std::map<int, XidRule> rules_;
  std::vector<ThresholdRule> thresholds_;
};

// One GPU's health as the controller keeps it.
struct GpuHealth {
  GpuHealthState state = GpuHealthState::kHealthy;
  std::string reason;         // why, in words ("Xid 95: uncontained ECC error")
  std::string evidence;       // what was seen: "Xid 95 x1"
  int64_t since_us = 0;       // when the state began (0: always healthy)
  std::string by = "policy";  // "policy", or the admin who set it
  // When the recent application or suspect Xids came (within repeat_window_us; at most
  // kMostRecentKept of them, the newest).
  std::vector<int64_t> recent_us;
  // Whose jobs each of them is pinned on, in the same order: the users whose jobs held
  // the GPU when it came or had just let it go (sorted, each once); empty where it cannot
  // be pinned on anyone (no job held the GPU, a suspect Xid, no attribution given), which
  // counts against the GPU. A record from before attribution has fewer entries than
  // recent_us: its older Xids count against the GPU, as they did then.
  std::vector<std::vector<std::string>> recent_users;
  // How many times the policy took the GPU out of service (its strikes; kept when it
  // returns, cleared only when an admin returns a failed one), and when its last Xid
  // worth acting on came (not an ignored one): the quiet period counts from there.
  int strikes = 0;
  int64_t last_error_us = 0;
  // When those strikes came, oldest first (strikes == its size, except in a record from
  // before the times were kept, whose strikes count from its last error).
  std::vector<int64_t> strike_us;
  // Per threshold row, the level its value last reached (1 suspect, 2 cordon; rows at 0
  // are left out). A row acts only when its level rises past this, so a GPU an admin put
  // back is not taken out again for the same count; it drops with the value (a reset
  // clears a pending remapping, a driver reload the ECC count). Kept through resumes.
  std::map<std::string, int> levels;
  friend bool operator==(const GpuHealth&, const GpuHealth&) = default;
};

// The most recent Xids a GpuHealth keeps (or the policy's repeats_to_cordon, if more).
inline constexpr size_t kMostRecentKept = 64;

// What `count` new Xid `xid` events on a GPU do, at `now_us`.
struct XidOutcome {
  GpuHealth next;
  XidRule rule;
  bool changed = false;      // next differs from the health before
  bool end_jobs = false;     // the jobs on the GPU end (fail, or requeue when allowed)
  bool cordon_node = false;  // every GPU of the node stops taking work
  // Application Xids came repeat_to_cordon times within the window, but one user's jobs
  // held the GPU at each of them: theirs, not the GPU's fault; it stays in service.
  bool pinned_on_user = false;
};
// One more strike on `health` at `now_us`: those at or before now_us - window_us (when
// window_us > 0) are forgotten first, and a record's strikes without times count from
// `legacy_at_us`; health->strikes becomes the count kept.
void AddStrike(GpuHealth* health, int64_t legacy_at_us, int64_t now_us, int64_t window_us);
// How many of `health`'s strikes still count at `now_us`: those after now_us - window_us
// (all when window_us <= 0), a record's strikes without times counting from its last
// error. What `gpupool nodes` shows; AddStrike forgets the others at the next strike.
int StrikesWithin(const GpuHealth& health, int64_t now_us, int64_t window_us);
// A cordon by the policy is a strike; the policy.strikes_to_fail-th within the policy's
// strike window fails the GPU instead.
//
// `holders`: the users whose jobs held the GPU when the Xid came, or let it go within the
// last few seconds (the controller's record; any order, repeats allowed). Repeated
// application Xids are the GPU's fault, and cordon it, only when they cannot be pinned on
// one user: one of the window's came with no holder, or no user held the GPU at every one
// of them (two users' jobs; a GPU shared by both at each Xid is still one culprit). Empty:
// no job held it, or no attribution (the simulator): the Xid counts against the GPU, as
// every Xid did before attribution. Suspect and reset- or reboot-class Xids ignore it.
XidOutcome OnXid(const GpuHealth& health, int xid, int64_t count, int64_t now_us,
                 const HealthPolicy& policy, const std::vector<std::string>& holders = {});

// "Resume only when proven" (docs/health.md): what a passing run of the node's health
// program at `now_us` does to a GPU the policy cordoned. It returns to service (healthy,
// its strikes kept, "by" policy) once no Xid worth acting on came for `quiet_us` (its
// last_error_us, or since_us where that is unknown); 0 never returns it. A failed GPU, or
// one cordoned by anyone but the policy, is left as it is. Returns whether it returned.
bool ResumeIfProven(GpuHealth* health, int64_t now_us, int64_t quiet_us);
// What a GPU's threshold readings (HealthReadings) do at `now_us`: a row whose level rises
// to suspect makes a healthy GPU suspect; one that rises to cordon cordons a GPU in service
// ("by" policy, its jobs go on: end_jobs and cordon_node stay false). rule.what names the
// row that acted last (rule.xid 0). A row without a reading keeps its level.
XidOutcome OnReadings(const GpuHealth& health, const std::map<std::string, int64_t>& readings,
                      int64_t now_us, const HealthPolicy& policy);

}  // namespace gpupool::gpu
