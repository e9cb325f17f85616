// The ControllerLink over HTTP: each call is one request to the controller's REST API
// (docs/api.md, "Agent protocol") through a net::HttpClient, which follows the leader
// among several controllers. Shutdown() signals an eventfd the client waits on, so a
// long poll in flight ends at once.
#pragma once

#include <memory>

#include "net/http_client.h"
#include "protocol/controller_link.h"

namespace gpupool::protocol {

std::shared_ptr<ControllerLink> NewHttpControllerLink(net::HttpClient client);

// How an HTTP answer's status maps to the link's errors (controller_link.h): 429 and 5xx
// kUnavailable (worth another try), any other net::StatusCodeOfHttp's code (404
// kNotFound, 400 kInvalidArgument, 401 and 403 kPermissionDenied, 409
// kFailedPrecondition, ...); the message is "controller answered STATUS: " and the
// answer's `error` text (or what net::StatusFromHttp says of its body).
Status LinkStatusFromHttp(int http_status, const std::string& body);

}  // namespace gpupool::protocol
