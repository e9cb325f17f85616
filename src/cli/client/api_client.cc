#include "cli/client/api_client.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <utility>

#include "common/strings.h"
#include "net/http_status.h"

namespace gpupool::cli {
namespace {

std::string HeaderValue(const net::HttpResponse& r, std::string_view name) {
  // Header names are compared without case: HTTP says they are case-insensitive.
  for (const auto& [k, v] : r.headers) {
    if (ToLower(k) == name) return std::string(Trim(v));
  }
  return "";
}

// Whether every address is a Unix socket that does not exist: a pool that is not running.
bool OnlyMissingSockets(const ApiClient& api) {
  for (const net::ServerAddress& a : api.addresses()) {
    struct stat st {};
    if (a.kind != net::ServerAddress::Kind::kUnix || ::stat(a.path.c_str(), &st) == 0) return false;
  }
  return !api.addresses().empty();
}

}  // namespace

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    case StatusCode::kNotFound:
      return kExitNotFound;
    case StatusCode::kPermissionDenied:
      return kExitPermission;
    case StatusCode::kUnavailable:
      return kExitUnreachable;
    default:
      return kExitFailure;
  }
}

Result<std::vector<net::ServerAddress>> ResolveServerAddress(const std::string& flag,
                                                             const std::string& env_server,
                                                             uid_t uid,
                                                             const std::string& env_xdg_state_home,
                                                             const std::string& env_home,
                                                             const std::string& system_socket) {
  if (!flag.empty()) {
    auto a = net::ParseServerAddressList(flag);
    if (!a.ok()) return a.status().WithContext("--server " + flag);
    return a;
  }
  if (!env_server.empty()) {
    auto a = net::ParseServerAddressList(env_server);
    if (!a.ok()) return a.status().WithContext("GPUPOOL_SERVER=" + env_server);
    return a;
  }
  net::ServerAddress a;
  a.kind = net::ServerAddress::Kind::kUnix;
  if (uid == 0) {
    a.path = system_socket;
  } else if (!env_xdg_state_home.empty() && env_xdg_state_home[0] == '/') {
    a.path = env_xdg_state_home + "/gpupool/gpupool.sock";
  } else if (!env_home.empty()) {
    a.path = env_home + "/.local/state/gpupool/gpupool.sock";
  } else {
    return Status::InvalidArgument(
        "cannot find the default server socket: HOME is not set; pass --server unix:PATH or "
        "set GPUPOOL_SERVER");
  }
  // No pool of the user's own here, but the host's (a packaged server): that one.
  std::error_code ec;
  if (uid != 0 && !std::filesystem::exists(a.path, ec) &&
      std::filesystem::exists(system_socket, ec)) {
    a.path = system_socket;
  }
  return std::vector<net::ServerAddress>{std::move(a)};
}

ApiClient::ApiClient(std::vector<net::ServerAddress> addresses, std::string token)
    : http_(std::move(addresses), std::move(token)) {}

Result<ApiAnswer> ApiClient::Get(const std::string& path_and_query) const {
  return Call("GET", path_and_query, "");
}

Result<ApiAnswer> ApiClient::Post(const std::string& path, const std::string& body) const {
  return Call("POST", path, body);
}

Result<ApiAnswer> ApiClient::Put(const std::string& path, const std::string& body) const {
  return Call("PUT", path, body);
}

Result<ApiAnswer> ApiClient::Delete(const std::string& path) const {
  return Call("DELETE", path, "");
}

Result<ApiAnswer> ApiClient::Call(const std::string& method, const std::string& path,
                                  const std::string& body) const {
  GP_ASSIGN_OR_RETURN(net::HttpResponse resp, http_.Send(method, path, body));
  if (resp.status < 200 || resp.status > 299) return net::StatusFromHttp(resp.status, resp.body);
  auto j = ParseJson(resp.body, "the server's answer to " + method + " " + path);
  if (!j.ok()) return Status::Internal(j.status().message());
  if (!j->is_object()) {
    return Status::Internal("the server's answer to " + method + " " + path +
                            " is not a JSON object; is the server a gpupool server of this "
                            "version?");
  }
  return ApiAnswer{std::move(j).value(), std::move(resp.body)};
}

Result<LogChunk> ApiClient::ReadLog(int64_t job_id, const std::string& stream, int64_t offset,
                                    int wait_ms, int task) const {
  std::string path =
      "/v1/jobs/" + std::to_string(job_id) + "/logs?stream=" + net::UrlEncode(stream);
  if (task > 0) path += "&task=" + std::to_string(task);
  return ReadOutput(path, offset, wait_ms);
}

Result<LogChunk> ApiClient::ReadOutput(const std::string& path_and_query, int64_t offset,
                                       int wait_ms) const {
  std::string path = path_and_query + "&offset=" + std::to_string(offset);
  if (wait_ms > 0) path += "&wait_ms=" + std::to_string(wait_ms);
  // A long poll may take wait_ms; give the transport that plus a margin.
  GP_ASSIGN_OR_RETURN(net::HttpResponse resp,
                      http_.Send("GET", path, "", 30'000 + std::max(wait_ms, 0)));
  if (resp.status < 200 || resp.status > 299) return net::StatusFromHttp(resp.status, resp.body);
  LogChunk chunk;
  chunk.bytes = std::move(resp.body);
  chunk.next_offset = offset + static_cast<int64_t>(chunk.bytes.size());
  if (auto next = ParseInt64(HeaderValue(resp, "x-gpupool-next-offset")); next && *next >= 0) {
    chunk.next_offset = *next;
    chunk.offset_header_seen = true;
  }
  chunk.eof = HeaderValue(resp, "x-gpupool-eof") == "1";
  return chunk;
}

bool IsTransient(const Status& status) {
  return status.code() == StatusCode::kUnavailable ||
         (status.code() == StatusCode::kResourceExhausted &&
          status.message().find("waiting") != std::string::npos);
}

Result<ApiAnswer> RetryDuringTakeover(const ApiClient& api,
                                      const std::function<Result<ApiAnswer>()>& call,
                                      std::ostream& err, bool* retried, const RetryTiming& timing) {
  const auto start = std::chrono::steady_clock::now();
  std::chrono::milliseconds pause = timing.first_pause;
  for (int attempt = 0;; ++attempt) {
    Result<ApiAnswer> r = call();
    if (retried != nullptr) *retried = attempt > 0;
    const bool again = !r.ok() && IsTransient(r.status());
    if (!again || OnlyMissingSockets(api)) return r;
    if (std::chrono::steady_clock::now() + pause > start + timing.window) return r;
    if (attempt == 0) {  // said once: a wrong address should not look like a hang
      err << "gpupool: " << r.status().message() << "\n  trying again for up to "
          << std::chrono::duration_cast<std::chrono::seconds>(timing.window).count()
          << " s (a controller may be taking over; Ctrl-C stops)\n";
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, timing.most_pause);
  }
}

}  // namespace gpupool::cli
