// ControllerLink: the agent's view of its controller. Every message a node agent sends
// to the controller, and every answer it reads, is one call here: registration, the long
// poll for work, task events and exec reports, GPU telemetry, answers to log reads, and
// the two directions of an interactive exec session's I/O. The messages are this
// module's structs (agent_protocol.h, endpoints.h); how they travel is the
// implementation's business:
//   - NewHttpControllerLink (http_controller_link.h): HTTP to the controller's REST API,
//     following the leader among several controllers (net::HttpClient);
//   - FakeControllerLink (fake_controller_link.h): an in-process controller for tests of
//     the agent, scripted and recorded.
//
// Errors, the same for every call and every implementation: kUnavailable when the
// controller could not be reached or answered that it is busy or failing (429, 5xx: try
// again later), or after Shutdown(); kNotFound when it does not know the node (register
// again) or the exec session; any other code when it refused the call for good (a bad
// message, no permission: its words in the message); a reply that cannot be read is
// kInvalidArgument naming the field.
//
// Thread-safe: the agent's threads (poll, events, telemetry, launches, exec relays) share
// one link; ownership is shared, as an exec relay may outlive the agent loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "protocol/agent_protocol.h"
#include "protocol/endpoints.h"

namespace gpupool::protocol {

class ControllerLink {
 public:
  virtual ~ControllerLink() = default;

  // POST /v1/agent/register: the controller's version and the address it recorded.
  virtual Result<RegistrationReply> Register(const Registration& registration) = 0;
  // GET /v1/agent/work: waits up to `wait_ms` for orders for `node` (the controller may
  // answer an empty Work sooner). kNotFound: the controller does not know the node.
  virtual Result<Work> PollWork(const std::string& node, int wait_ms) = 0;
  // POST /v1/agent/events: Ok means the controller has recorded the batch (acknowledged).
  virtual Status PostEvents(const EventBatch& batch) = 0;
  // POST /v1/agent/telemetry (protocol 1.3 and later).
  virtual Status PostTelemetry(const TelemetryBatch& batch) = 0;
  // POST /v1/agent/logs: the answer to one log read.
  virtual Status AnswerLogRead(const LogAnswer& answer) = 0;
  // POST /v1/agent/exec/ID/output: what a session's command printed. The answer waits up
  // to `wait_ms` while the client is behind. kNotFound (or another non-Unavailable
  // code): the session is gone for the controller.
  virtual Result<ExecOutputAck> PostExecOutput(int64_t exec_id, const std::string& node,
                                               const ExecOutput& output, int wait_ms) = 0;
  // GET /v1/agent/exec/ID/input: the client's input after item `after`, waiting up to
  // `wait_ms` for some.
  virtual Result<ExecInput> TakeExecInput(int64_t exec_id, const std::string& node, int64_t after,
                                          int wait_ms) = 0;

  // The agent stops: every call in flight ends at once, and every later one fails at
  // once, with kUnavailable. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace gpupool::protocol
