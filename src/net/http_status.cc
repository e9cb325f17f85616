#include "net/http_status.h"

#include "common/json.h"
#include "common/strings.h"

namespace gpupool::net {
namespace {

struct Mapping {
  StatusCode code;
  int http;
};

// The mapping, both ways. Where several codes share a status (409), the first is what a
// client reads back.
constexpr Mapping kMapping[] = {
    {StatusCode::kOk, 200},
    {StatusCode::kInvalidArgument, 400},
    {StatusCode::kPermissionDenied, 403},
    {StatusCode::kNotFound, 404},
    {StatusCode::kFailedPrecondition, 409},
    {StatusCode::kAlreadyExists, 409},
    {StatusCode::kResourceExhausted, 413},
    {StatusCode::kInternal, 500},
    {StatusCode::kUnimplemented, 501},
    {StatusCode::kUnavailable, 503},
};
// Statuses the API answers that no code maps to, as clients read them: not authenticated,
// and too much waiting or queued at once.
constexpr Mapping kAlsoRead[] = {
    {StatusCode::kPermissionDenied, 401},
    {StatusCode::kResourceExhausted, 429},
};

}  // namespace

int HttpStatusOf(StatusCode code) {
  for (const Mapping& m : kMapping) {
    if (m.code == code) return m.http;
  }
  return 500;
}

StatusCode StatusCodeOfHttp(int http_status) {
  for (const Mapping& m : kMapping) {
    if (m.http == http_status) return m.code;
  }
  for (const Mapping& m : kAlsoRead) {
    if (m.http == http_status) return m.code;
  }
  return StatusCode::kInternal;
}

bool HttpStatusIsTransient(int http_status) { return http_status == 429 || http_status >= 500; }

Status StatusFromHttp(int http_status, std::string_view body) {
  std::string message;
  if (auto j = ParseJson(body, "answer", 1 << 20); j.ok() && j->is_object()) {
    if (auto it = j->find("error"); it != j->end() && it->is_string()) {
      message = it->get<std::string>();
    }
  }
  if (message.empty()) {
    message = "the server answered HTTP " + std::to_string(http_status);
    const std::string_view text = Trim(body);
    if (!text.empty() && text.size() < 300) message += ": " + SanitizeUtf8(text);
  }
  return Status(StatusCodeOfHttp(http_status), std::move(message));
}

}  // namespace gpupool::net
