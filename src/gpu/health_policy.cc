#include "gpu/health_policy.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <optional>

#include "common/strings.h"

namespace gpupool::gpu {

std::string_view GpuHealthStateName(GpuHealthState state) {
  switch (state) {
    case GpuHealthState::kHealthy:
      return "healthy";
    case GpuHealthState::kSuspect:
      return "suspect";
    case GpuHealthState::kCordoned:
      return "cordoned";
    case GpuHealthState::kFailed:
      return "failed";
  }
  return "healthy";
}

namespace {

struct ActionName {
  HealthAction action;
  std::string_view name;
};
constexpr ActionName kActionNames[] = {
    {HealthAction::kIgnore, "ignore"},          {HealthAction::kApplication, "application"},
    {HealthAction::kSuspect, "suspect"},        {HealthAction::kCordonGpu, "cordon-gpu"},
    {HealthAction::kCordonNode, "cordon-node"},
};

}  // namespace

std::string_view HealthActionName(HealthAction action) {
  for (const ActionName& a : kActionNames) {
    if (a.action == action) return a.name;
  }
  return "suspect";
}

Result<HealthAction> ParseHealthAction(std::string_view name) {
  for (const ActionName& a : kActionNames) {
    if (a.name == name) return a.action;
  }
  return Status::InvalidArgument("unknown health action '" + std::string(name) +
                                 "': use ignore, application, suspect, cordon-gpu or cordon-node");
}

const std::vector<XidRule>& BuiltinXidRules() {
  using A = HealthAction;
  static const std::vector<XidRule> rules = {
      {13, A::kApplication, "graphics engine exception (the application's fault)"},
      {31, A::kApplication, "GPU memory page fault (the application's fault)"},
      {43, A::kApplication, "GPU stopped processing (the application's fault)"},
      {45, A::kApplication, "preemptive cleanup after an earlier error"},
      {48, A::kCordonGpu, "double-bit ECC error"},
      {63, A::kIgnore, "ECC page retirement or row remapping recorded"},
      {64, A::kCordonGpu, "ECC page retirement or row remapping failed"},
      {68, A::kApplication, "video processor exception (the application's fault)"},
      {74, A::kCordonGpu, "NVLink error"},
      {79, A::kCordonNode, "GPU has fallen off the bus"},
      {92, A::kIgnore, "high single-bit ECC error rate (corrected)"},
      {94, A::kApplication, "contained ECC error (the application is stopped)"},
      {95, A::kCordonGpu, "uncontained ECC error"},
      // NVIDIA lists every cause for it (the application, driver, memory, bus, thermal,
      // hardware); the Kubernetes device plugin counts it among the application Xids.
      // Pinned on the job's user it is theirs; repeated across users it cordons the GPU.
      {109, A::kApplication, "context switch timeout (the application's, unless it repeats)"},
      {119, A::kCordonGpu, "GSP RPC timeout"},
      {120, A::kCordonGpu, "GSP error"},
  };
  return rules;
}

const std::vector<ThresholdRule>& BuiltinThresholdRules() {
  // Counts: a few make the GPU worth watching, many mean failing memory (the pool's
  // defaults, docs/health.md). Flags that wait for a reset or mean the spares are gone
  // cordon at once, as the shipped health program names them bad.
  static const std::vector<ThresholdRule> rules = {
      {"retired-pages", "retired pages (AMD: bad VRAM pages)", 10, 60, false},
      {"retired-pages-pending", "a page retirement waits for the GPU's reset", 0, 1, true},
      {"remapped-rows", "remapped DRAM rows", 8, 64, false},
      {"remapped-rows-pending", "a row remapping waits for the GPU's reset", 0, 1, true},
      {"remapped-rows-failed", "a row remapping failed (no spare rows left)", 0, 1, true},
      {"hw-slowdown", "the hardware slows the clocks down (HW slowdown)", 1, 0, true},
      {"ecc-uncorrected", "uncorrected ECC errors since the driver loaded (AMD: RAS ue)", 1, 3,
       false},
  };
  return rules;
}

std::map<std::string, int64_t> HealthReadings(const HardwareHealth& hw,
                                              std::optional<int64_t> ecc_uncorrected) {
  std::map<std::string, int64_t> out;
  auto put = [&](const char* name, auto v) {
    if (v) out[name] = static_cast<int64_t>(*v);
  };
  put("retired-pages", hw.retired_pages);
  put("retired-pages-pending", hw.retired_pages_pending);
  put("remapped-rows", hw.remapped_rows);
  put("remapped-rows-pending", hw.remapped_rows_pending);
  put("remapped-rows-failed", hw.remapped_rows_failed);
  put("hw-slowdown", hw.hw_slowdown);
  put("ecc-uncorrected", ecc_uncorrected);
  return out;
}

Status HealthPolicy::ApplyThresholdOverrides(std::string_view overrides) {
  const std::string fix =
      ": write ROW:SUSPECT:CORDON with counts (0: never), e.g. "
      "retired-pages:10:60 or hw-slowdown:0:1";
  for (const std::string& raw : Split(overrides, ',')) {
    const std::string entry(Trim(raw));
    if (entry.empty()) continue;
    const std::string where = "health-threshold entry '" + entry + "'";
    const std::vector<std::string> parts = Split(entry, ':');
    if (parts.size() != 3) return Status::InvalidArgument(where + " has not 3 parts" + fix);
    auto rule = std::find_if(thresholds_.begin(), thresholds_.end(),
                             [&](const ThresholdRule& r) { return r.name == Trim(parts[0]); });
    if (rule == thresholds_.end()) {
      std::string names;
      for (const ThresholdRule& r : thresholds_) names += (names.empty() ? "" : ", ") + r.name;
      return Status::InvalidArgument(where + ": unknown row '" + std::string(Trim(parts[0])) +
                                     "'; the rows are " + names);
    }
    const int64_t most = rule->flag ? 1 : int64_t{1} << 40;
    const std::optional<int64_t> suspect = ParseInt64(Trim(parts[1]));
    const std::optional<int64_t> cordon = ParseInt64(Trim(parts[2]));
    if (!suspect || !cordon || *suspect < 0 || *cordon < 0 || *suspect > most || *cordon > most) {
      return Status::InvalidArgument(
          where + ": the thresholds are counts " +
          (rule->flag ? std::string("0 or 1 (") + rule->name + " is a yes/no field)"
                      : std::string("from 0 (never)")) +
          fix);
    }
    rule->suspect_at = *suspect;
    rule->cordon_at = *cordon;
  }
  return Status::Ok();
}

Result<HealthPolicy> HealthPolicy::Create(std::string_view overrides,
                                          std::string_view threshold_overrides) {
  HealthPolicy p;
  p.thresholds_ = BuiltinThresholdRules();
  GP_RETURN_IF_ERROR(p.ApplyThresholdOverrides(threshold_overrides));
  for (const XidRule& r : BuiltinXidRules()) p.rules_[r.xid] = r;
  for (const std::string& raw : Split(overrides, ',')) {
    const std::string entry(Trim(raw));
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    const std::string fix = ": write XID:ACTION, e.g. 79:cordon-node";
    if (colon == std::string::npos) {
      return Status::InvalidArgument("health-xid entry '" + entry + "' has no ':'" + fix);
    }
    const std::optional<int64_t> xid = ParseInt64(Trim(std::string_view(entry).substr(0, colon)));
    if (!xid || *xid <= 0 || *xid > 100'000) {
      return Status::InvalidArgument("health-xid entry '" + entry +
                                     "': the Xid is not a positive number" + fix);
    }
    Result<HealthAction> action =
        ParseHealthAction(Trim(std::string_view(entry).substr(colon + 1)));
    if (!action.ok()) return action.status().WithContext("health-xid entry '" + entry + "'");
    XidRule& rule = p.rules_[static_cast<int>(*xid)];
    rule.xid = static_cast<int>(*xid);
    rule.action = *action;
    if (rule.what.empty()) rule.what = "Xid " + std::to_string(*xid);
    rule.what += " (action set by the server's configuration)";
  }
  return p;
}

XidRule HealthPolicy::ForXid(int xid) const {
  if (auto it = rules_.find(xid); it != rules_.end()) return it->second;
  return {xid, HealthAction::kSuspect, "unknown Xid " + std::to_string(xid)};
}

void AddStrike(GpuHealth* health, int64_t legacy_at_us, int64_t now_us, int64_t window_us) {
  std::vector<int64_t>& at = health->strike_us;
  // A record from before strike times were kept: its strikes count from legacy_at_us.
  if (static_cast<int>(at.size()) < health->strikes) {
    at.insert(at.begin(), std::min<size_t>(static_cast<size_t>(health->strikes) - at.size(), 64),
              legacy_at_us);
  }
  if (window_us > 0) std::erase_if(at, [&](int64_t t) { return t <= now_us - window_us; });
  at.push_back(now_us);
  health->strikes = static_cast<int>(at.size());
}

int StrikesWithin(const GpuHealth& health, int64_t now_us, int64_t window_us) {
  GpuHealth copy = health;
  AddStrike(&copy, health.last_error_us > 0 ? health.last_error_us : health.since_us, now_us,
            window_us);
  return copy.strikes - 1;  // less the strike AddStrike added at now_us
}

namespace {

// Whether the recent Xids `users` (GpuHealth::recent_users) point at the GPU rather than
// at one user's jobs: one of them was pinned on no one, or no user held the GPU at all.
bool RepeatsBlameTheGpu(const std::vector<std::vector<std::string>>& users) {
  if (users.empty()) return true;
  std::vector<std::string> common = users.front();
  for (const std::vector<std::string>& at : users) {
    if (at.empty()) return true;
    std::vector<std::string> both;
    std::set_intersection(common.begin(), common.end(), at.begin(), at.end(),
                          std::back_inserter(both));
    common = std::move(both);
  }
  return common.empty();
}

// Records `keep` more Xids at `now_us` pinned on `users` (sorted; empty: on no one) in
// `next`, after forgetting those at or before `now_us - window_us` and, past `most`, the
// oldest. A record from before attribution first gets an empty entry for each Xid it has.
void AddRecent(GpuHealth* next, const std::vector<std::string>& users, int64_t keep, int64_t now_us,
               int64_t window_us, size_t most) {
  std::vector<int64_t>& at = next->recent_us;
  std::vector<std::vector<std::string>>& by = next->recent_users;
  if (by.size() > at.size()) by.erase(by.begin(), by.end() - static_cast<ptrdiff_t>(at.size()));
  by.insert(by.begin(), at.size() - by.size(), std::vector<std::string>{});
  size_t kept = 0;
  for (size_t k = 0; k < at.size(); ++k) {
    if (at[k] <= now_us - window_us) continue;
    if (kept != k) {
      at[kept] = at[k];
      by[kept] = std::move(by[k]);
    }
    ++kept;
  }
  at.resize(kept);
  by.resize(kept);
  for (int64_t k = 0; k < keep; ++k) {
    at.push_back(now_us);
    by.push_back(users);
  }
  if (at.size() > most) {
    const auto drop = static_cast<ptrdiff_t>(at.size() - most);
    at.erase(at.begin(), at.begin() + drop);
    by.erase(by.begin(), by.begin() + drop);
  }
  // Nobody's Xids: none are stored (as a record from before attribution).
  if (std::all_of(by.begin(), by.end(), [](const auto& u) { return u.empty(); })) by.clear();
}

}  // namespace

XidOutcome OnXid(const GpuHealth& health, int xid, int64_t count, int64_t now_us,
                 const HealthPolicy& policy, const std::vector<std::string>& holders) {
  XidOutcome out;
  out.rule = policy.ForXid(xid);
  out.next = health;
  GpuHealth& next = out.next;
  const std::string seen = "Xid " + std::to_string(xid) + " x" + std::to_string(count);
  const std::string why = "Xid " + std::to_string(xid) + ": " + out.rule.what;
  auto become = [&](GpuHealthState state, std::string reason) {
    if (next.state != state) next.since_us = now_us;
    next.state = state;
    next.reason = std::move(reason);
    next.by = "policy";
  };
  const bool out_of_service =
      next.state == GpuHealthState::kCordoned || next.state == GpuHealthState::kFailed;
  // Taken out of service by the policy: a strike; the last one within the window fails
  // the GPU.
  auto cordon = [&](std::string reason) {
    AddStrike(&next, health.last_error_us > 0 ? health.last_error_us : health.since_us, now_us,
              policy.strike_window_us);
    if (next.strikes < std::max(policy.strikes_to_fail, 1)) {
      become(GpuHealthState::kCordoned, std::move(reason));
      return;
    }
    const int64_t days = policy.strike_window_us / (int64_t{24} * 3600 * 1'000'000);
    become(GpuHealthState::kFailed,
           std::move(reason) + "; taken out of service " + std::to_string(next.strikes) + " times" +
               (policy.strike_window_us > 0 ? " within " + std::to_string(days) + " days" : "") +
               ": it needs service (only an admin returns it)");
  };
  if (out.rule.action != HealthAction::kIgnore) next.last_error_us = now_us;
  switch (out.rule.action) {
    case HealthAction::kIgnore:
      return out;
    case HealthAction::kApplication:
    case HealthAction::kSuspect: {
      // Repeats within the window: the GPU, not the application, is the likely cause,
      // unless one user's jobs held the GPU at each of them (application Xids only).
      std::vector<std::string> users;
      if (out.rule.action == HealthAction::kApplication) {
        users = holders;
        std::sort(users.begin(), users.end());
        users.erase(std::unique(users.begin(), users.end()), users.end());
      }
      // A count is the agent's word: at most what can cordon is kept, whatever it says.
      const int most = std::max(policy.repeats_to_cordon, 1);
      AddRecent(&next, users, std::clamp<int64_t>(count, 1, most), now_us, policy.repeat_window_us,
                std::max<size_t>(kMostRecentKept, most));
      const bool repeated = static_cast<int64_t>(next.recent_us.size()) >= policy.repeats_to_cordon;
      const bool blames_gpu = RepeatsBlameTheGpu(next.recent_users);
      if (repeated && !out_of_service && blames_gpu) {
        cordon(why + ", " + std::to_string(next.recent_us.size()) + " times within " +
               std::to_string(policy.repeat_window_us / 60'000'000) + " min" +
               (next.recent_users.empty() ? ""
                : std::any_of(next.recent_users.begin(), next.recent_users.end(),
                              [](const auto& u) { return u.empty(); })
                    ? ", at least once with no job on the GPU"
                    : ", with different users' jobs on it"));
      } else if (repeated && !blames_gpu) {
        out.pinned_on_user = true;
      } else if (out.rule.action == HealthAction::kSuspect &&
                 next.state == GpuHealthState::kHealthy) {
        become(GpuHealthState::kSuspect, why);
      }
      break;
    }
    case HealthAction::kCordonGpu:
    case HealthAction::kCordonNode:
      if (!out_of_service) cordon(why);
      out.end_jobs = true;
      out.cordon_node = out.rule.action == HealthAction::kCordonNode;
      break;
  }
  next.evidence = seen;
  out.changed = next != health;
  return out;
}

bool ResumeIfProven(GpuHealth* health, int64_t now_us, int64_t quiet_us) {
  if (quiet_us <= 0 || health->state != GpuHealthState::kCordoned || health->by != "policy") {
    return false;
  }
  // A threshold row still at its cordon level (failed remapping, too many retired pages)
  // keeps the GPU out however quiet it is: the fault is still there.
  if (std::any_of(health->levels.begin(), health->levels.end(),
                  [](const auto& row) { return row.second >= 2; })) {
    return false;
  }
  const int64_t last = health->last_error_us > 0 ? health->last_error_us : health->since_us;
  if (now_us - last < quiet_us) return false;
  GpuHealth back;
  back.since_us = now_us;
  back.by = "policy";
  back.strikes = health->strikes;
  back.strike_us = health->strike_us;
  back.last_error_us = health->last_error_us;
  back.evidence = health->evidence;
  back.levels = health->levels;
  back.reason = "back in service: the health check passed and no error came for " +
                std::to_string((now_us - last) / 60'000'000) + " min (was: " + health->reason + ")";
  *health = std::move(back);
  return true;
}

XidOutcome OnReadings(const GpuHealth& health, const std::map<std::string, int64_t>& readings,
                      int64_t now_us, const HealthPolicy& policy) {
  XidOutcome out;
  out.rule.xid = 0;
  out.next = health;
  GpuHealth& next = out.next;
  for (const ThresholdRule& rule : policy.thresholds()) {
    auto value = readings.find(rule.name);
    if (value == readings.end()) continue;
    const int64_t v = value->second;
    const int level = rule.cordon_at > 0 && v >= rule.cordon_at     ? 2
                      : rule.suspect_at > 0 && v >= rule.suspect_at ? 1
                                                                    : 0;
    auto seen = next.levels.find(rule.name);
    const int before = seen == next.levels.end() ? 0 : seen->second;
    if (level == 0) {
      if (seen != next.levels.end()) next.levels.erase(seen);
      continue;
    }
    next.levels[rule.name] = level;
    if (level <= before) continue;  // acted on already (or it fell back)
    const int64_t at = level == 2 ? rule.cordon_at : rule.suspect_at;
    const std::string why =
        rule.name + ": " + rule.what +
        (rule.flag ? std::string()
                   : ": " + std::to_string(v) + " (" + (level == 2 ? "cordon" : "suspect") +
                         " at " + std::to_string(at) + ")");
    const GpuHealthState state = level == 2 ? GpuHealthState::kCordoned : GpuHealthState::kSuspect;
    const bool acts = level == 2 ? TakesWork(next.state) : next.state == GpuHealthState::kHealthy;
    if (!acts) continue;
    if (next.state != state) next.since_us = now_us;
    next.state = state;
    next.reason = why;
    next.evidence = rule.name + " " + std::to_string(v);
    next.by = "policy";
    out.rule.what = why;
  }
  out.changed = next != health;
  return out;
}

}  // namespace gpupool::gpu
