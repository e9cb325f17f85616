// The handlers of the REST API, one per route, by resource: one file each under
// src/controller/api/. The route table (route_table.cc) says which route each answers and
// who may call it; docs/api.md and docs/openapi.json say what they answer.
#pragma once

#include "controller/api/handler.h"

namespace gpupool::controller::api {

// ui.cc: the dashboard (dashboard.h): its page and assets, sign-in, sign-out, the session.
net::HttpResponse ServeDashboardAsset(const ApiContext& ctx, const Call& c);
net::HttpResponse DashboardLogin(const ApiContext& ctx, const Call& c);
net::HttpResponse DashboardLogout(const ApiContext& ctx, const Call& c);
net::HttpResponse DashboardSession(const ApiContext& ctx, const Call& c);

// admin.cc: the server itself (health, readiness, schema, identity, leadership), limits
// and tokens.
net::HttpResponse Healthz(const ApiContext& ctx, const Call& c);
net::HttpResponse Readyz(const ApiContext& ctx, const Call& c);
net::HttpResponse ServeOpenApi(const ApiContext& ctx, const Call& c);
net::HttpResponse Whoami(const ApiContext& ctx, const Call& c);
net::HttpResponse ListControllers(const ApiContext& ctx, const Call& c);
net::HttpResponse GetLimits(const ApiContext& ctx, const Call& c);
net::HttpResponse PutLimits(const ApiContext& ctx, const Call& c);
net::HttpResponse CreateToken(const ApiContext& ctx, const Call& c);
net::HttpResponse ListTokens(const ApiContext& ctx, const Call& c);
net::HttpResponse RevokeToken(const ApiContext& ctx, const Call& c);

// jobs.cc: submission, the queue, a job, cancel, hold and release, logs.
net::HttpResponse SubmitJob(const ApiContext& ctx, const Call& c);
net::HttpResponse ListJobs(const ApiContext& ctx, const Call& c);
net::HttpResponse GetJob(const ApiContext& ctx, const Call& c);
net::HttpResponse CancelJobOrArray(const ApiContext& ctx, const Call& c);
net::HttpResponse SignalJob(const ApiContext& ctx, const Call& c);
net::HttpResponse HoldJob(const ApiContext& ctx, const Call& c);
net::HttpResponse ReleaseJob(const ApiContext& ctx, const Call& c);
net::HttpResponse CheckpointDone(const ApiContext& ctx, const Call& c);
net::HttpResponse AllocAlive(const ApiContext& ctx, const Call& c);
net::HttpResponse ReadJobLogs(const ApiContext& ctx, const Call& c);

// exec.cc: commands in running jobs (gpupool exec) and interactive sessions (gpupool
// run, alloc, exec --pty / -i), for their clients.
net::HttpResponse StartExec(const ApiContext& ctx, const Call& c);
net::HttpResponse AttachJob(const ApiContext& ctx, const Call& c);
net::HttpResponse GetExec(const ApiContext& ctx, const Call& c);
net::HttpResponse ReadExecOutput(const ApiContext& ctx, const Call& c);
net::HttpResponse ReadExecStream(const ApiContext& ctx, const Call& c);
net::HttpResponse PushExecInput(const ApiContext& ctx, const Call& c);
net::HttpResponse CancelExec(const ApiContext& ctx, const Call& c);

// environments.cc: named images and directories jobs run in.
net::HttpResponse ListEnvironments(const ApiContext& ctx, const Call& c);
net::HttpResponse AddEnvironment(const ApiContext& ctx, const Call& c);
net::HttpResponse CheckEnvironment(const ApiContext& ctx, const Call& c);
net::HttpResponse GetEnvironment(const ApiContext& ctx, const Call& c);
net::HttpResponse RemoveEnvironment(const ApiContext& ctx, const Call& c);

// nodes.cc: the pool's nodes, drain and resume.
net::HttpResponse ListNodes(const ApiContext& ctx, const Call& c);
net::HttpResponse DrainNode(const ApiContext& ctx, const Call& c);
net::HttpResponse ResumeNode(const ApiContext& ctx, const Call& c);

// telemetry.cc: Prometheus metrics, usage and GPU telemetry series.
net::HttpResponse ScrapeMetrics(const ApiContext& ctx, const Call& c);
net::HttpResponse ReportUsage(const ApiContext& ctx, const Call& c);
net::HttpResponse TelemetrySeries(const ApiContext& ctx, const Call& c);

// agent.cc: the agent protocol (protocol/agent_protocol.h). Each acts only for the node
// the caller may act for (ActAsNode, endpoint_access.h) and changes nothing when the
// request names another.
net::HttpResponse ServeAgentRegister(const ApiContext& ctx, const Call& c);
net::HttpResponse ServeAgentWork(const ApiContext& ctx, const Call& c);
// The same long poll answered later (Controller::AwaitWork): no thread waits.
void AwaitAgentWork(const ApiContext& ctx, const Call& c, std::shared_ptr<net::HttpResponder> out);
net::HttpResponse ServeAgentEvents(const ApiContext& ctx, const Call& c);
net::HttpResponse ServeAgentLogAnswer(const ApiContext& ctx, const Call& c);
net::HttpResponse ServeAgentTelemetry(const ApiContext& ctx, const Call& c);
net::HttpResponse ServeAgentExecInput(const ApiContext& ctx, const Call& c);
net::HttpResponse ServeAgentExecOutput(const ApiContext& ctx, const Call& c);

}  // namespace gpupool::controller::api
