// ApiClient: the client side of the REST API (docs/api.md) for the `gpupool` user
// commands. It wraps net::HttpClient, turns non-2xx answers into Status values whose
// code says what kind of failure it was and whose message is the server's own `error`
// text, and knows how to find the server (--server, GPUPOOL_SERVER, the default socket),
// or the list of controllers among which HttpClient finds the leader.
//
// Status codes map to the CLI's documented exit codes through ExitCodeFor(). Thread-safe
// like HttpClient: every call opens its own connection.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "net/http_client.h"

namespace gpupool::cli {

// Exit codes scripts can rely on (docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // server-side or other failure
inline constexpr int kExitUsage = 2;        // bad option or value (also a 400 answer)
inline constexpr int kExitNotFound = 3;     // no such job, node, ...
inline constexpr int kExitPermission = 4;   // permission denied or not authenticated
inline constexpr int kExitUnreachable = 5;  // no server at the address

int ExitCodeFor(const Status& status);

// The server addresses to use: `flag` if given, else `env_server` (GPUPOOL_SERVER), each a
// comma list of controllers (net::ParseServerAddressList), else the default local
// socket: `system_socket` (/var/lib/gpupool/gpupool.sock, the packaged server's) for uid
// 0, else the user's own $XDG_STATE_HOME/gpupool/gpupool.sock, else
// $HOME/.local/state/gpupool/gpupool.sock (a `gpupool up` of the user's) when that socket
// exists, else `system_socket` when it exists, else the user's own path (for the error).
// Empty strings count as absent. kInvalidArgument naming the flag or variable.
Result<std::vector<net::ServerAddress>> ResolveServerAddress(
    const std::string& flag, const std::string& env_server, uid_t uid,
    const std::string& env_xdg_state_home, const std::string& env_home,
    const std::string& system_socket = "/var/lib/gpupool/gpupool.sock");

// A 2xx answer: the body as sent (for --json) and parsed (a JSON object).
struct ApiAnswer {
  Json json;
  std::string body;
};

// One read of a job's log.
struct LogChunk {
  std::string bytes;
  int64_t next_offset = 0;
  bool eof = false;                 // the job has ended and everything was read
  bool offset_header_seen = false;  // X-Gpupool-Next-Offset came back (headers are visible)
};

class ApiClient {
 public:
  // `addresses`: the controllers, in order of preference (see net::HttpClient).
  ApiClient(std::vector<net::ServerAddress> addresses, std::string token);

  // GET/POST/DELETE a JSON API path; a 2xx answer whose body is a JSON object.
  Result<ApiAnswer> Get(const std::string& path_and_query) const;
  Result<ApiAnswer> Post(const std::string& path, const std::string& body) const;
  Result<ApiAnswer> Delete(const std::string& path) const;
  Result<ApiAnswer> Put(const std::string& path, const std::string& body) const;

  // GET /v1/jobs/ID/logs (of task `task`). `wait_ms` > 0 asks the server to wait for
  // new bytes.
  Result<LogChunk> ReadLog(int64_t job_id, const std::string& stream, int64_t offset, int wait_ms,
                           int task = 0) const;
  // GET of any output path that answers like the log endpoint (X-Gpupool-Next-Offset,
  // X-Gpupool-Eof): `path_and_query` without the offset, which this adds.
  Result<LogChunk> ReadOutput(const std::string& path_and_query, int64_t offset, int wait_ms) const;

  // The address the next call starts at (the leader, as far as known), and the list.
  net::ServerAddress address() const { return http_.address(); }
  const std::vector<net::ServerAddress>& addresses() const { return http_.addresses(); }

 private:
  Result<ApiAnswer> Call(const std::string& method, const std::string& path,
                         const std::string& body) const;
  net::HttpClient http_;
};

// Sends a request that is safe to repeat (`call`: a submission with its submit_key, a
// cancel, a hold) again while no controller answers it (kUnavailable, or a 429 saying the
// server is waiting): a standby takes over in about its lease (5 s by default). Tries for
// up to `window`, 200 ms apart at first and at most a second, and says once on `err` that
// it is trying again. Gives up at once when every address is a Unix socket that does not
// exist (a pool that is not running: a standby takes over through TCP addresses, never by
// making a socket appear). `retried`, when given, is set when the answer is a later try's:
// an earlier try may have been carried out before its answer was lost.
// Whether a failed request may well succeed if made again: no server answered (one
// restarting, a standby during a takeover, a timeout), or one asked the client to wait
// (its request limiter).
bool IsTransient(const Status& status);

struct RetryTiming {
  std::chrono::milliseconds window{60'000};
  std::chrono::milliseconds first_pause{200};
  std::chrono::milliseconds most_pause{1'000};
};
Result<ApiAnswer> RetryDuringTakeover(const ApiClient& api,
                                      const std::function<Result<ApiAnswer>()>& call,
                                      std::ostream& err, bool* retried = nullptr,
                                      const RetryTiming& timing = {});

}  // namespace gpupool::cli
