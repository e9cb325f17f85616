#include "protocol/http_controller_link.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <optional>

#include "common/json.h"
#include "net/http_status.h"

namespace gpupool::protocol {
namespace {

// How long a call may take beyond the wait the controller was asked for; an exec
// session's I/O is given longer, its client may be slow to read.
constexpr int kCallMs = 10'000;
constexpr int kExecCallMs = 15'000;

std::string Query(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string q;
  for (const auto& [name, value] : params) {
    q += (q.empty() ? "?" : "&") + name + "=" + net::UrlEncode(value);
  }
  return q;
}

class HttpControllerLink final : public ControllerLink {
 public:
  explicit HttpControllerLink(net::HttpClient client) : client_(std::move(client)) {
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ >= 0) client_.set_cancel_fd(stop_fd_);
  }
  ~HttpControllerLink() override {
    if (stop_fd_ >= 0) ::close(stop_fd_);
  }

  Result<RegistrationReply> Register(const Registration& r) override {
    GP_ASSIGN_OR_RETURN(
        net::HttpResponse sent,
        client_.Send("POST", kRegisterPath, DumpJson(EncodeRegistration(r)), kCallMs));
    if (sent.status == 409) {
      // A controller that cannot talk to this agent's protocol refuses with its version
      // (EncodeRegistrationRefusal): answered as a reply of that version, which the
      // agent's compatibility check then refuses for good. Any other 409 is an error.
      Result<Json> j = ParseJson(sent.body, "controller answer");
      // Another agent runs the node (Registration::agent_id): final, as AlreadyExists.
      if (j.ok() && IsAgentIdRefusal(*j)) {
        return Status::AlreadyExists(LinkStatusFromHttp(sent.status, sent.body).message());
      }
      if (std::optional<Version> v = j.ok() ? DecodeRegistrationRefusal(*j) : std::nullopt;
          v && !CheckCompatible(kVersion, *v, "the controller").ok()) {
        return RegistrationReply{*v, ""};
      }
    }
    GP_ASSIGN_OR_RETURN(Json answer, AnswerOf(sent));
    return DecodeRegistrationReply(answer);
  }

  Result<Work> PollWork(const std::string& node, int wait_ms) override {
    // A controller that takes the poll and never answers (frozen) is given up on within
    // wait_ms + 10 s; the next poll goes to the next controller of the list.
    GP_ASSIGN_OR_RETURN(
        Json answer,
        Call("GET", kWorkPath + Query({{"node", node}, {"wait_ms", std::to_string(wait_ms)}}), "",
             wait_ms + kCallMs));
    Result<Work> work = DecodeWork(answer);
    if (!work.ok()) return work.status().WithContext("work from the controller");
    return work;
  }

  Status PostEvents(const EventBatch& batch) override {
    return Call("POST", kEventsPath, DumpJson(EncodeEventBatch(batch)), kCallMs).status();
  }

  Status PostTelemetry(const TelemetryBatch& batch) override {
    return Call("POST", kTelemetryPath, DumpJson(EncodeTelemetryBatch(batch)), kCallMs).status();
  }

  Status AnswerLogRead(const LogAnswer& a) override {
    return Call("POST", kLogsPath + Query(LogAnswerQuery(a)), LogAnswerBody(a), kCallMs).status();
  }

  Result<ExecOutputAck> PostExecOutput(int64_t exec_id, const std::string& node,
                                       const ExecOutput& output, int wait_ms) override {
    GP_ASSIGN_OR_RETURN(Json answer,
                        Call("POST",
                             ExecOutputPath(exec_id) +
                                 Query({{"node", node}, {"wait_ms", std::to_string(wait_ms)}}),
                             DumpJson(EncodeExecOutput(output)), wait_ms + kExecCallMs));
    return DecodeExecOutputAck(answer);
  }

  Result<ExecInput> TakeExecInput(int64_t exec_id, const std::string& node, int64_t after,
                                  int wait_ms) override {
    GP_ASSIGN_OR_RETURN(Json answer,
                        Call("GET",
                             ExecInputPath(exec_id) + Query({{"node", node},
                                                             {"after", std::to_string(after)},
                                                             {"wait_ms", std::to_string(wait_ms)}}),
                             "", wait_ms + kExecCallMs));
    return DecodeExecInput(answer);
  }

  void Shutdown() override {
    const uint64_t one = 1;
    if (stop_fd_ >= 0) (void)!::write(stop_fd_, &one, sizeof one);
  }

 private:
  Result<Json> Call(const std::string& method, const std::string& path, const std::string& body,
                    int timeout_ms) {
    GP_ASSIGN_OR_RETURN(net::HttpResponse r, client_.Send(method, path, body, timeout_ms));
    return AnswerOf(r);
  }
  static Result<Json> AnswerOf(const net::HttpResponse& r) {
    if (r.status / 100 != 2) return LinkStatusFromHttp(r.status, r.body);
    return ParseJson(r.body.empty() ? "{}" : r.body, "controller answer");
  }

  net::HttpClient client_;
  int stop_fd_ = -1;  // an eventfd Shutdown() signals; cancels the client's calls
};

}  // namespace

Status LinkStatusFromHttp(int http_status, const std::string& body) {
  // The codes of net/http_status.h, except that every answer worth another try (429, 5xx)
  // is Unavailable: what the agent's callers retry on.
  const Status s = net::StatusFromHttp(http_status, body);
  const StatusCode code = net::HttpStatusIsTransient(http_status) || http_status < 100
                              ? StatusCode::kUnavailable
                              : s.code();
  return Status(code, "controller answered " + std::to_string(http_status) + ": " + s.message());
}

std::shared_ptr<ControllerLink> NewHttpControllerLink(net::HttpClient client) {
  return std::make_shared<HttpControllerLink>(std::move(client));
}

}  // namespace gpupool::protocol
