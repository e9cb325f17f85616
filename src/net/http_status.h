// The one mapping between Status codes and HTTP statuses, used by both ends of every
// gpupool HTTP exchange: the API server answers a Status with HttpStatusOf, and its
// clients (the CLI, the agent, the agent's exec relay) turn a non-2xx answer back into a
// Status with StatusFromHttp. Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::net {

// The HTTP status that answers an error of `code`: InvalidArgument 400,
// PermissionDenied 403, NotFound 404, AlreadyExists and FailedPrecondition 409,
// ResourceExhausted 413, Unimplemented 501, Unavailable 503, any other 500. (The API
// answers some ResourceExhausted errors, bounds on waiting or queued work, with 429
// instead; it says so where it does.)
int HttpStatusOf(StatusCode code);

// The code of an error answered with `http_status`: 400 InvalidArgument, 401 and 403
// PermissionDenied, 404 NotFound, 409 FailedPrecondition, 413 and 429
// ResourceExhausted, 501 Unimplemented, 503 Unavailable, any other Internal.
StatusCode StatusCodeOfHttp(int http_status);

// Whether asking again later may get another answer: 429 (too much at once) and 5xx
// (the server cannot serve now). Any other non-2xx answer stands.
bool HttpStatusIsTransient(int http_status);

// The error a non-2xx answer stands for: StatusCodeOfHttp's code, and the message of
// the body's {"error": "..."}; without one, "the server answered HTTP N" and, when short,
// the body itself (made valid UTF-8).
Status StatusFromHttp(int http_status, std::string_view body);

}  // namespace gpupool::net
