#include "controller/api/handler.h"

#include "common/strings.h"
#include "net/http_status.h"

namespace gpupool::controller::api {

const std::string& Call::Param(std::string_view name) const {
  static const std::string kNone;
  for (const auto& [n, v] : params) {
    if (n == name) return v;
  }
  return kNone;
}

net::HttpResponse JsonResponse(int status, const OrderedJson& body) {
  net::HttpResponse r;
  r.status = status;
  r.body = DumpJson(body);
  return r;
}

net::HttpResponse ErrorResponse(const Status& s) {
  return JsonResponse(net::HttpStatusOf(s.code()), {{"error", s.message()}});
}

net::HttpResponse ErrorOrTooMany(const Status& s) {
  net::HttpResponse r = ErrorResponse(s);
  if (s.code() == StatusCode::kResourceExhausted) r.status = 429;
  return r;
}

Result<int64_t> QueryInt(const net::HttpRequest& r, const std::string& name, int64_t fallback,
                         int64_t min, int64_t max) {
  const std::string v = r.Query(name);
  if (v.empty()) return fallback;
  auto parsed = ParseInt64(v);
  if (!parsed || *parsed < min || *parsed > max) {
    return Status::InvalidArgument("query parameter " + name + "='" + v +
                                   "' must be an integer in " + std::to_string(min) + ".." +
                                   std::to_string(max));
  }
  return *parsed;
}

Result<Json> BodyJson(const net::HttpRequest& r, size_t max_bytes, int max_depth,
                      bool empty_is_object) {
  if (empty_is_object && r.body.empty()) return Json::object();
  return ParseJson(r.body, "request body", max_bytes, max_depth);
}

}  // namespace gpupool::controller::api
