// The agent protocol's endpoints (protocol/agent_protocol.h): registration, work (a
// long poll), task events, answers to log reads, GPU telemetry, and the agent's side of
// exec sessions. Only agents may call them (the route table); each acts only for the
// node its caller may act for (ActAsNode).
#include "controller/api/handlers.h"
#include "controller/endpoint_access.h"
#include "controller/telemetry_service.h"
#include "protocol/agent_protocol.h"
#include "protocol/endpoints.h"

namespace gpupool::controller::api {

net::HttpResponse ServeAgentRegister(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Identity& who = c.who;
  Result<Json> body = BodyJson(r, 8 << 20, 64);
  if (!body.ok()) return ErrorResponse(body.status());
  // Who may act for the node named is checked before anything else is read.
  std::string named;
  if (body->is_object()) {
    if (auto n = body->find("node"); n != body->end() && n->is_string()) named = *n;
  }
  if (Status s = ActAsNode(who, &named); !s.ok()) return ErrorResponse(s);
  Result<protocol::Registration> reg = protocol::DecodeRegistration(*body);
  if (!reg.ok()) return ErrorResponse(reg.status());
  reg->node = named;
  if (reg->node.empty()) return ErrorResponse(Status::InvalidArgument("node: the node's name"));
  // An agent too far from this controller's protocol hears 409 with this side's version,
  // and stops: retrying cannot help (protocol::EncodeRegistrationRefusal).
  if (Status s = protocol::CheckCompatible(protocol::kVersion, reg->version,
                                           "the agent on node " + reg->node);
      !s.ok()) {
    return JsonResponse(409, protocol::EncodeRegistrationRefusal(protocol::kVersion, s.message()));
  }
  Result<protocol::RegistrationReply> reply =
      ctx.controller->RegisterNode(std::move(*reg), r.peer ? std::string() : r.remote);
  if (reply.status().code() == StatusCode::kAlreadyExists) {  // another agent's node
    return JsonResponse(409, protocol::EncodeAgentIdRefusal(reply.status().message()));
  }
  if (!reply.ok()) return ErrorResponse(reply.status());
  return JsonResponse(200, protocol::EncodeRegistrationReply(*reply));
}

net::HttpResponse ServeAgentWork(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Identity& who = c.who;
  std::string node = r.Query("node");
  if (Status s = ActAsNode(who, &node); !s.ok()) return ErrorResponse(s);
  Result<int64_t> wait_ms = QueryInt(r, "wait_ms", 0, 0, 60'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<AgentWork> work = ctx.controller->WaitForWork(node, *wait_ms);
  if (!work.ok()) return ErrorResponse(work.status());
  return JsonResponse(200, protocol::EncodeWork(*work, ctx.controller->NodeVersion(node)));
}

void AwaitAgentWork(const ApiContext& ctx, const Call& c, std::shared_ptr<net::HttpResponder> out) {
  std::string node = c.r.Query("node");
  if (Status s = ActAsNode(c.who, &node); !s.ok()) {
    out->Complete(ErrorResponse(s));
    return;
  }
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 60'000);
  if (!wait_ms.ok()) {
    out->Complete(ErrorResponse(wait_ms.status()));
    return;
  }
  Controller* controller = ctx.controller;
  const uint64_t ticket =
      controller->AwaitWork(node, *wait_ms, [controller, node, out](Result<AgentWork> work) {
        if (!work.ok()) {
          out->Complete(ErrorResponse(work.status()));
          return;
        }
        out->Complete(
            JsonResponse(200, protocol::EncodeWork(*work, controller->NodeVersion(node))));
      });
  // A client that left (or a server that stops) takes its waiter with it at once.
  if (ticket != 0) out->OnAbandoned([controller, ticket] { controller->CancelWorkWait(ticket); });
}

net::HttpResponse ServeAgentEvents(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Identity& who = c.who;
  Result<Json> body = BodyJson(r, 8 << 20, 16);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<protocol::EventBatch> batch = protocol::DecodeEventBatch(*body);
  if (!batch.ok()) return ErrorResponse(batch.status());
  if (Status s = ActAsNode(who, &batch->node); !s.ok()) return ErrorResponse(s);
  if (batch->node.empty()) return ErrorResponse(Status::InvalidArgument("node: the node's name"));
  Status s = ctx.controller->ApplyEvents(batch->node, *batch);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, {{"ok", true}});
}

// An agent's answer to a log read: the bytes as the body, the file's size in `size`; or
// `error` (not_found, refused, io) with the agent's words as the body.
net::HttpResponse ServeAgentLogAnswer(const ApiContext& ctx, const Call& c) {
  std::string node = c.r.Query("node");
  if (Status s = ActAsNode(c.who, &node); !s.ok()) return ErrorResponse(s);
  if (node.empty())
    return ErrorResponse(Status::InvalidArgument("node: the answering node's name"));
  Result<protocol::LogAnswer> answer =
      protocol::DecodeLogAnswer([&](const std::string& name) { return c.r.Query(name); }, c.r.body);
  if (!answer.ok()) return ErrorResponse(answer.status());
  if (answer->status.ok()) {
    ctx.controller->log_relay().Answer(node, answer->id,
                                       LogChunk{std::move(answer->data), answer->size});
  } else {
    ctx.controller->log_relay().Answer(node, answer->id, answer->status);
  }
  return JsonResponse(200, {{"ok", true}});
}

// POST /v1/agent/telemetry (protocol 1.3): the samples go to the telemetry service
// (telemetry_service.h), whose own thread writes them to the store and applies the idle
// policy.
net::HttpResponse ServeAgentTelemetry(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 8 << 20, 16);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<protocol::TelemetryBatch> batch = protocol::DecodeTelemetryBatch(*body);
  if (!batch.ok()) return ErrorResponse(batch.status());
  if (Status s = ActAsNode(c.who, &batch->node); !s.ok()) return ErrorResponse(s);
  if (batch->node.empty()) return ErrorResponse(Status::InvalidArgument("node: the node's name"));
  if (!ctx.controller->NodeUp(batch->node)) {
    return ErrorResponse(
        Status::NotFound("node " + batch->node + " is not registered; the agent registers first"));
  }
  // Xids act at once (GPU health), before the samples go to the telemetry service.
  if (Status s = ctx.controller->ObserveGpuErrors(batch->node, batch->samples); !s.ok()) {
    return ErrorResponse(s);
  }
  if (Status s = ctx.controller->ObserveHardwareHealth(batch->node, batch->samples); !s.ok()) {
    return ErrorResponse(s);
  }
  if (batch->health) {
    if (Status s = ctx.controller->ObserveHealthReport(batch->node, *batch->health); !s.ok()) {
      return ErrorResponse(s);
    }
  }
  if (batch->disk) {
    if (Status s = ctx.controller->ObserveDiskReport(batch->node, *batch->disk); !s.ok()) {
      return ErrorResponse(s);
    }
  }
  const size_t kept = ctx.telemetry->Ingest(std::move(*batch));
  return JsonResponse(200, {{"ok", true}, {"accepted", kept}});
}

// GET /v1/agent/exec/EID/input?node&after&wait_ms: the client's input for the agent.
net::HttpResponse ServeAgentExecInput(const ApiContext& ctx, const Call& c) {
  std::string node = c.r.Query("node");
  if (Status s = ActAsNode(c.who, &node); !s.ok()) return ErrorResponse(s);
  Result<int64_t> after = QueryInt(c.r, "after", 0, 0, INT64_MAX);
  if (!after.ok()) return ErrorResponse(after.status());
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 30'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<protocol::ExecInput> in = ctx.controller->TakeExecInput(node, c.id, *after, *wait_ms);
  if (!in.ok()) return ErrorResponse(in.status());
  return JsonResponse(200, protocol::EncodeExecInput(*in));
}

// POST /v1/agent/exec/EID/output?node&wait_ms: what the session's command printed; the
// answer waits up to wait_ms while the client is behind.
net::HttpResponse ServeAgentExecOutput(const ApiContext& ctx, const Call& c) {
  std::string node = c.r.Query("node");
  if (Status s = ActAsNode(c.who, &node); !s.ok()) return ErrorResponse(s);
  Result<Json> body = BodyJson(c.r, 2 << 20, 4);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<protocol::ExecOutput> out = protocol::DecodeExecOutput(*body);
  if (!out.ok()) return ErrorResponse(out.status());
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 30'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<protocol::ExecOutputAck> ack = ctx.controller->PutExecOutput(node, c.id, *out, *wait_ms);
  if (!ack.ok()) return ErrorResponse(ack.status());
  return JsonResponse(200, protocol::EncodeExecOutputAck(*ack));
}

}  // namespace gpupool::controller::api
