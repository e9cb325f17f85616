// `gpupool queue`, `gpupool show ID`, `gpupool cancel ID...`, `gpupool hold|release ID...`.
#include <cctype>

#include "cli/client/client_common.h"
#include "cli/client/json_view.h"
#include "cli/client/render.h"
#include "common/strings.h"
#include "jobs/job.h"

namespace gpupool::cli {
namespace {

struct QueueState {
  ConnectionFlags conn;
  bool all = false;
  std::string user;
  std::vector<std::string> states;
  bool json = false;
};

Status RunQueue(const ClientRuntime& rt, const QueueState& s) {
  std::vector<std::string> query;
  std::string states;
  for (const std::string& raw : s.states) {
    std::string upper(Trim(raw));
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (!jobs::ParseJobState(upper)) {
      return Status::InvalidArgument("--state " + raw +
                                     ": unknown state; use PENDING, ASSIGNED, RUNNING, "
                                     "SUCCEEDED, FAILED, CANCELLED, TIMEOUT or LOST");
    }
    states += (states.empty() ? "" : ",") + upper;
  }
  // Without --state the queue is what is still to run or running.
  query.push_back(states.empty() ? "active=1" : "state=" + net::UrlEncode(states));
  if (s.all) query.push_back("all=1");
  if (!s.user.empty()) query.push_back("user=" + net::UrlEncode(s.user));
  std::string path = "/v1/jobs";
  for (size_t i = 0; i < query.size(); ++i) path += (i == 0 ? "?" : "&") + query[i];
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get(path));
  if (s.json) {
    PrintRaw(rt, answer.body);
  } else {
    Print(rt, RenderQueue(answer.json, rt.env.now_us()));
  }
  if (GetBool(answer.json, "all_refused")) {
    *rt.env.err << "gpupool: --all lists everyone's jobs for admins only; these are your own\n";
  }
  return Status::Ok();
}

struct ShowState {
  ConnectionFlags conn;
  std::string id;
  bool json = false;
};

Status RunShow(const ClientRuntime& rt, const ShowState& s) {
  GP_ASSIGN_OR_RETURN(int64_t id, ParseJobId(s.id));
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get("/v1/jobs/" + std::to_string(id)));
  if (s.json) {
    PrintRaw(rt, answer.body);
  } else {
    Print(rt, RenderJob(GetObject(answer.json, "job"), rt.env.now_us()));
  }
  return Status::Ok();
}

struct CancelState {
  ConnectionFlags conn;
  std::vector<std::string> ids;
};

// Cancels each job in turn; one failure does not stop the others. The exit code is the
// first failure's.
void RunCancel(const ClientRuntime& rt, const CancelState& s) {
  // "12" is a job (or, for an array's first element, the whole array); "12_5" is element
  // 5 of array 12.
  std::vector<std::pair<int64_t, int64_t>> ids;  // (id, element or -1)
  for (const std::string& text : s.ids) {
    const size_t us = text.find('_');
    auto id = ParseJobId(text.substr(0, us));
    if (!id.ok()) return Report(rt, id.status());
    int64_t element = -1;
    if (us != std::string::npos) {
      auto e = ParseInt64(text.substr(us + 1));
      if (!e || *e < 0) {
        return Report(rt, Status::InvalidArgument("job id '" + text +
                                                  "': an array element is ARRAY_INDEX, e.g. 12_5"));
      }
      element = *e;
    }
    ids.emplace_back(*id, element);
  }
  auto api = Connect(rt, s.conn);
  if (!api.ok()) return Report(rt, api.status());
  int first_failure = kExitOk;
  for (const auto& [id, element] : ids) {
    const std::string name =
        std::to_string(id) + (element >= 0 ? "_" + std::to_string(element) : "");
    auto answer = api->Post("/v1/jobs/" + std::to_string(id) + "/cancel" +
                                (element >= 0 ? "?element=" + std::to_string(element) : ""),
                            "");
    if (!answer.ok()) {
      Report(rt, answer.status().WithContext("job " + name));
      if (first_failure == kExitOk) first_failure = rt.ctx->exit_code;
      continue;
    }
    if (const int64_t n = GetInt(answer->json, "array_cancelled"); n > 0) {
      Print(rt, "Cancelled array " + name + " (" + std::to_string(n) + " element" +
                    (n == 1 ? "" : "s") + " still queued or running)\n");
      continue;
    }
    const std::string state = GetString(GetObject(answer->json, "job"), "state");
    Print(rt, state == "CANCELLED" || state.empty()
                  ? "Cancelled job " + name + "\n"
                  : "Cancelling job " + name + " (" + state + "; it is being stopped)\n");
  }
  rt.ctx->exit_code = first_failure;
}

// Holds or releases each job in turn, like RunCancel.
void RunHold(const ClientRuntime& rt, const CancelState& s, bool hold) {
  std::vector<int64_t> ids;
  for (const std::string& text : s.ids) {
    auto id = ParseJobId(text);
    if (!id.ok()) return Report(rt, id.status());
    ids.push_back(*id);
  }
  auto api = Connect(rt, s.conn);
  if (!api.ok()) return Report(rt, api.status());
  int first_failure = kExitOk;
  for (int64_t id : ids) {
    auto answer = api->Post("/v1/jobs/" + std::to_string(id) + (hold ? "/hold" : "/release"), "");
    if (!answer.ok()) {
      Report(rt, answer.status().WithContext("job " + std::to_string(id)));
      if (first_failure == kExitOk) first_failure = rt.ctx->exit_code;
      continue;
    }
    Print(rt, std::string(hold ? "Held" : "Released") + " job " + std::to_string(id) + "\n");
  }
  rt.ctx->exit_code = first_failure;
}

}  // namespace

void RegisterJobCommands(CLI::App& app, const RuntimePtr& rt) {
  auto q = std::make_shared<QueueState>();
  CLI::App* queue = app.add_subcommand("queue", "List jobs waiting or running");
  queue->add_flag("--all", q->all, "everyone's jobs (admins)");
  queue->add_option("--user", q->user, "only this user's jobs (admins)");
  queue->add_option("--state", q->states, "only jobs in these states, e.g. PENDING,RUNNING")
      ->delimiter(',')
      ->allow_extra_args(false);
  queue->add_flag("--json", q->json, "print the server's JSON");
  AddConnectionOptions(*queue, &q->conn);
  queue->callback([rt, q] { Report(*rt, RunQueue(*rt, *q)); });

  auto sh = std::make_shared<ShowState>();
  CLI::App* show = app.add_subcommand("show", "Show everything about one job");
  show->add_option("id", sh->id, "job id")->required();
  show->add_flag("--json", sh->json, "print the server's JSON");
  AddConnectionOptions(*show, &sh->conn);
  show->callback([rt, sh] { Report(*rt, RunShow(*rt, *sh)); });

  auto c = std::make_shared<CancelState>();
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel jobs");
  cancel->add_option("ids", c->ids, "job ids")->required();
  AddConnectionOptions(*cancel, &c->conn);
  cancel->callback([rt, c] { RunCancel(*rt, *c); });

  auto h = std::make_shared<CancelState>();
  CLI::App* hold = app.add_subcommand(
      "hold", "Keep pending jobs from starting until `gpupool release` (like scontrol hold)");
  hold->add_option("ids", h->ids, "job ids")->required();
  AddConnectionOptions(*hold, &h->conn);
  hold->callback([rt, h] { RunHold(*rt, *h, true); });
  auto rl = std::make_shared<CancelState>();
  CLI::App* release = app.add_subcommand("release", "Let held jobs start again");
  release->add_option("ids", rl->ids, "job ids")->required();
  AddConnectionOptions(*release, &rl->conn);
  release->callback([rt, rl] { RunHold(*rt, *rl, false); });
}

}  // namespace gpupool::cli
