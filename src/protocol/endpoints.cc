#include "protocol/endpoints.h"

#include <climits>

#include "common/strings.h"

namespace gpupool::protocol {
namespace {

constexpr char kNotFound[] = "not_found";
constexpr char kRefused[] = "refused";
constexpr char kIo[] = "io";

// A query parameter that must be an integer in [min, max]; `fallback` when absent.
Result<int64_t> IntParam(const std::function<std::string(const std::string&)>& query,
                         const std::string& name, int64_t fallback, int64_t min, int64_t max) {
  const std::string v = query(name);
  if (v.empty()) return fallback;
  std::optional<int64_t> parsed = ParseInt64(v);
  if (!parsed || *parsed < min || *parsed > max) {
    return Status::InvalidArgument("query parameter " + name + "='" + v +
                                   "' must be an integer in " + std::to_string(min) + ".." +
                                   std::to_string(max));
  }
  return *parsed;
}

}  // namespace

std::string ExecInputPath(int64_t exec_id) {
  return "/v1/agent/exec/" + std::to_string(exec_id) + "/input";
}

std::string ExecOutputPath(int64_t exec_id) {
  return "/v1/agent/exec/" + std::to_string(exec_id) + "/output";
}

std::vector<std::pair<std::string, std::string>> LogAnswerQuery(const LogAnswer& a) {
  std::vector<std::pair<std::string, std::string>> q = {{"node", a.node},
                                                        {"id", std::to_string(a.id)}};
  if (a.status.ok()) {
    q.emplace_back("size", std::to_string(a.size));
  } else {
    const StatusCode c = a.status.code();
    q.emplace_back("error", c == StatusCode::kNotFound           ? kNotFound
                            : c == StatusCode::kPermissionDenied ? kRefused
                                                                 : kIo);
  }
  return q;
}

std::string LogAnswerBody(const LogAnswer& a) {
  return a.status.ok() ? a.data : a.status.message();
}

Result<LogAnswer> DecodeLogAnswer(const std::function<std::string(const std::string&)>& query,
                                  std::string body) {
  LogAnswer a;
  a.node = query("node");
  if (query("id").empty()) return Status::InvalidArgument("id: the request's id");
  GP_ASSIGN_OR_RETURN(a.id, IntParam(query, "id", 0, 1, INT64_MAX));
  GP_ASSIGN_OR_RETURN(a.size, IntParam(query, "size", 0, 0, INT64_MAX));
  const std::string error = query("error");
  if (error.empty()) {
    a.data = std::move(body);
  } else if (error == kNotFound) {
    a.status = Status::NotFound(std::move(body));
  } else if (error == kRefused) {
    a.status = Status::PermissionDenied(std::move(body));
  } else if (error == kIo) {
    a.status = Status::Unavailable(std::move(body));
  } else {
    return Status::InvalidArgument("error: use not_found, refused or io");
  }
  return a;
}

}  // namespace gpupool::protocol
