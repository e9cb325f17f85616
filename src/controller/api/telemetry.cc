// What the pool has done and how its GPUs are used: Prometheus metrics, usage
// (GPU-hours by user or project) and GPU telemetry series.
#include <algorithm>
#include <set>

#include "common/strings.h"
#include "controller/api/handlers.h"
#include "controller/job_lifecycle.h"
#include "controller/pool_accounting.h"
#include "controller/telemetry_service.h"
#include "controller/usage.h"

namespace gpupool::controller::api {

// GET /metrics: the pool in Prometheus's text format (metrics.h, pool_accounting.h), for
// metrics tokens and admins.
net::HttpResponse ScrapeMetrics(const ApiContext& ctx, const Call&) {
  Result<std::string> text = ctx.accounting->Scrape();
  if (!text.ok()) return ErrorResponse(text.status());
  net::HttpResponse r;
  r.status = 200;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = std::move(*text);
  return r;
}

namespace {

// Under ?by= the pool's fair-share groups, each row's fair-share weight and normalised share
// (sshare's RawShares and NormShares): its weight over the sum of the weights of every
// group that held GPUs in the window, all users' whoever asks (`jobs` holds the caller's
// only when `everyone` is false). By project, a user's jobs without a project are in the
// group named after the user (their row's own_group), as fair share counts them.
Status AddFairShares(const ApiContext& ctx, const std::vector<jobs::Job>& jobs, bool everyone,
                     int64_t since, int64_t until, int64_t now, bool by_project,
                     OrderedJson& rows) {
  std::set<std::string> groups;
  if (everyone) {
    groups = UsageGroups(jobs, since, until, now, by_project);
  } else {
    store::JobFilter f;
    f.held_after_us = since;  // a LOST job's GPUs held past its end count (usage.h)
    GP_ASSIGN_OR_RETURN(std::vector<jobs::Job> all, ctx.store->ListJobs(f));
    groups = UsageGroups(all, since, until, now, by_project);
  }
  const auto weights = sched::FairShareWeights(ctx.controller->GetLimits().limits, by_project);
  for (OrderedJson& row : rows) {
    const std::string key = row["key"].get<std::string>();
    const GroupShare share = ShareOfGroup(key, groups, weights);
    row["fair_share"] = share.weight;
    row["norm_share"] = share.norm;
  }
  return Status::Ok();
}

// ?job= as the job routes take {id}: a job id, or ARRAY_INDEX (12_3) for an array's
// element as `gpupool queue` prints it; the job's store id.
Result<int64_t> JobQueryId(const ApiContext& ctx, const std::string& value, const Caller& caller) {
  const size_t us = value.find('_');
  const std::optional<int64_t> id = ParseInt64(std::string_view(value).substr(0, us));
  std::optional<int64_t> index;
  if (us != value.npos) index = ParseInt64(std::string_view(value).substr(us + 1));
  if (!id || *id <= 0 ||
      (us != value.npos && (!index || *index < 0 || *index > jobs::kMaxArrayIndex))) {
    return Status::InvalidArgument("query parameter job='" + value +
                                   "' must be a job id or ARRAY_INDEX (e.g. 12_3)");
  }
  if (!index) return *id;
  return ctx.controller->ArrayElementId(*id, static_cast<int>(*index), caller);
}

}  // namespace

net::HttpResponse ReportUsage(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  // Metrics tokens read the pool's aggregates; users only their own.
  const bool everyone = caller.admin || c.who.kind == CallerKind::kMetrics;
  const int64_t now = ctx.clock->NowMicros();
  Result<int64_t> until = QueryInt(r, "until_us", now, 0, INT64_MAX);
  if (!until.ok()) return ErrorResponse(until.status());
  Result<int64_t> since =
      QueryInt(r, "since_us", *until - int64_t{30} * 24 * 3600 * 1'000'000, 0, INT64_MAX);
  if (!since.ok()) return ErrorResponse(since.status());
  if (*since >= *until) {
    return ErrorResponse(Status::InvalidArgument("since_us must be before until_us"));
  }
  // Without ?by, the pool's fair-share groups (the server's --fair-by).
  const std::string fair_by(sched::FairShareGroupName(ctx.controller->options().fair_by));
  const std::string by = r.Query("by", fair_by);
  if (by != "user" && by != "project") {
    return ErrorResponse(Status::InvalidArgument("by: use user or project"));
  }
  // ?shares=0: no fair_share and norm_share (a non-admin's saves listing every user's jobs).
  const std::string shares = r.Query("shares", "1");
  if (shares != "0" && shares != "1") {
    return ErrorResponse(Status::InvalidArgument("shares: use 1 (the default) or 0"));
  }
  TelemetryHub& hub = ctx.telemetry->hub();
  // The jobs that held GPUs in the window: a job declared lost before it whose node
  // reported its real end inside it held them there (docs/health.md, "An end reported
  // late"), though its end_time_us is before.
  store::JobFilter f;
  f.held_after_us = *since;
  if (!everyone) f.user = caller.user;
  Result<std::vector<jobs::Job>> jobs = ctx.store->ListJobs(f);
  if (!jobs.ok()) return ErrorResponse(jobs.status());
  // Job points before the memory window come from the store, summed per job.
  const int64_t split_ms = hub.MemoryFromMs();
  std::vector<store::TelemetryRecord> older;
  if (*since / 1000 < split_ms) {
    Result<std::vector<store::TelemetryRecord>> stored =
        ctx.store->ListTelemetry({.since_ms = *since / 1000,
                                  .until_ms = std::min(*until / 1000, split_ms),
                                  .scope = "job",
                                  .step_ms = store::kTelemetryWholeRange});
    if (stored.ok()) {
      older = std::move(*stored);
    } else if (stored.status().code() != StatusCode::kUnimplemented) {
      return ErrorResponse(stored.status());
    }
  }
  const std::map<int64_t, double> used =
      hub.UsedGpuHours(*since / 1000, *until / 1000, split_ms, older);
  OrderedJson rows = OrderedJson::array();
  for (const UsageRow& u : ComputeUsage(*jobs, *since, *until, now, by, used)) {
    rows.push_back({{"key", u.key},
                    {"gpu_hours", u.gpu_hours},
                    {"used_gpu_hours", u.used_gpu_hours},
                    {"efficiency", u.efficiency()},
                    {"jobs", u.jobs}});
    // The row holds user `key`'s jobs without a project: their own group.
    if (u.own_group) rows.back()["own_group"] = true;
  }
  if (by == fair_by && shares == "1" && !rows.empty()) {
    Status added = AddFairShares(ctx, *jobs, everyone, *since, *until, now, by == "project", rows);
    if (!added.ok()) return ErrorResponse(added);
  }
  return JsonResponse(200, {{"since_us", *since},
                            {"until_us", *until},
                            {"by", by},
                            {"fair_share_by", fair_by},
                            {"rows", std::move(rows)}});
}

// GET /v1/telemetry?job=ID (or ARRAY_INDEX) | node=NAME[&gpu=INDEX] | (the pool), since_ms, step_s.
// Jobs: their owner or an admin; nodes and the pool: any caller that may call it.
net::HttpResponse TelemetrySeries(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const int64_t now_ms = ctx.clock->NowMicros() / 1000;
  TelemetryHub& hub = ctx.telemetry->hub();
  const int64_t oldest = now_ms - hub.options().retention_s * 1000;
  Result<int64_t> since = QueryInt(r, "since_ms", now_ms - 3'600'000, 0, INT64_MAX);
  if (!since.ok()) return ErrorResponse(since.status());
  Result<int64_t> step = QueryInt(r, "step_s", 60, 60, 7 * 86400);
  if (!step.ok()) return ErrorResponse(step.status());
  const int64_t from = std::max(*since, oldest);
  constexpr int64_t kMaxPoints = 10'080;
  if ((now_ms - from) / (*step * 1000) > kMaxPoints) {
    return ErrorResponse(Status::InvalidArgument("since_ms and step_s ask for more than " +
                                                 std::to_string(kMaxPoints) +
                                                 " points; raise step_s"));
  }
  const std::string job = r.Query("job");
  const std::string node = r.Query("node");
  const std::string gpu = r.Query("gpu");
  if (!job.empty() && (!node.empty() || !gpu.empty())) {
    return ErrorResponse(Status::InvalidArgument("job: use job=ID or node=NAME, not both"));
  }
  if (!gpu.empty() && node.empty()) {
    return ErrorResponse(Status::InvalidArgument("gpu: give the node too (node=NAME&gpu=INDEX)"));
  }
  std::vector<TelemetryPoint> points;
  OrderedJson answer;
  // Points before the memory window are the store's, merged per step there.
  const int64_t split_ms = hub.MemoryFromMs();
  auto OlderTelemetry = [&](store::TelemetryQuery q,
                            int64_t step_s) -> Result<std::vector<store::TelemetryRecord>> {
    if (q.since_ms >= split_ms) return std::vector<store::TelemetryRecord>{};
    q.until_ms = split_ms;
    q.step_ms = TelemetryHub::StepMs(step_s);
    Result<std::vector<store::TelemetryRecord>> stored = ctx.store->ListTelemetry(q);
    if (!stored.ok() && stored.status().code() == StatusCode::kUnimplemented) {
      return std::vector<store::TelemetryRecord>{};
    }
    return stored;
  };
  if (!job.empty()) {
    if (c.who.kind == CallerKind::kMetrics) {
      return ErrorResponse(Status::PermissionDenied(
          "metrics tokens read node and pool series; a job's series is for its owner"));
    }
    Result<int64_t> id = JobQueryId(ctx, job, c.caller);
    if (!id.ok()) return ErrorResponse(id.status());
    Result<jobs::Job> j = ctx.controller->Get(*id, c.caller);
    if (!j.ok()) return ErrorResponse(j.status());
    Result<std::vector<store::TelemetryRecord>> older =
        OlderTelemetry({.since_ms = from, .scope = "job", .key = std::to_string(*id)}, *step);
    if (!older.ok()) return ErrorResponse(older.status());
    points = hub.JobSeries(*id, from, *step, split_ms, *older);
    answer["job"] = *id;
    answer["job_name"] = lifecycle::UserJobId(*j);
  } else if (!node.empty()) {
    Result<int64_t> index = QueryInt(r, "gpu", -1, 0, 1 << 20);
    if (!index.ok()) return ErrorResponse(index.status());
    bool known = false;
    for (const NodeView& v : ctx.controller->Nodes()) known = known || v.name == node;
    if (!known) return ErrorResponse(Status::NotFound("no node " + node));
    store::TelemetryQuery q{.since_ms = from, .scope = "gpu"};
    if (*index >= 0) {
      q.key = node + "/" + std::to_string(*index);
    } else {
      q.key_prefix = node + "/";
    }
    Result<std::vector<store::TelemetryRecord>> older = OlderTelemetry(q, *step);
    if (!older.ok()) return ErrorResponse(older.status());
    points = hub.NodeSeries(node, static_cast<int>(*index), from, *step, split_ms, *older);
    answer["node"] = node;
    if (*index >= 0) answer["gpu"] = *index;
  } else {
    points = hub.PoolSeries(from, *step);
  }
  OrderedJson list = OrderedJson::array();
  for (const TelemetryPoint& p : points) {
    list.push_back({{"t_ms", p.t_ms},
                    {"util_pct", p.util_pct},
                    {"mem_used_mib", p.mem_used_mib},
                    {"gpus", p.gpus}});
  }
  answer["step_s"] = *step - *step % 60;
  answer["points"] = std::move(list);
  return JsonResponse(200, answer);
}

}  // namespace gpupool::controller::api
