// `gpupool nodes`, `gpupool usage`, `gpupool token create|list|revoke`, `gpupool status`,
// `gpupool whoami`.
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "cli/client/client_common.h"
#include "cli/client/json_view.h"
#include "cli/client/render.h"
#include "cli/client/units.h"
#include "common/strings.h"
#include "net/http_client.h"

namespace gpupool::cli {
namespace {

struct SimpleState {
  ConnectionFlags conn;
  bool json = false;
};

// GET `path` and print it raw (--json) or rendered.
Status GetAndPrint(const ClientRuntime& rt, const SimpleState& s, const std::string& path,
                   const std::function<std::string(const Json&)>& render) {
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get(path));
  if (s.json) {
    PrintRaw(rt, answer.body);
  } else {
    Print(rt, render(answer.json));
  }
  return Status::Ok();
}

struct UsageState {
  SimpleState base;
  bool csv = false;
  std::string since;
  std::string until;
  std::string by;
};

Status RunUsage(const ClientRuntime& rt, const UsageState& s) {
  const int64_t now = rt.env.now_us();
  std::string path = "/v1/usage";
  std::string sep = "?";
  std::optional<int64_t> since;
  if (!s.since.empty()) {
    auto t = ParseTimePoint(s.since, now);
    if (!t.ok()) return Status::InvalidArgument("--since " + s.since + ": " + t.status().message());
    since = *t;
    path += sep + "since_us=" + std::to_string(*t);
    sep = "&";
  }
  int64_t until = now;
  if (!s.until.empty()) {
    auto t = ParseTimePoint(s.until, now);
    if (!t.ok()) return Status::InvalidArgument("--until " + s.until + ": " + t.status().message());
    until = *t;
    path += sep + "until_us=" + std::to_string(*t);
    sep = "&";
  }
  // Said in the flags' words (the server's names its query: since_us, until_us).
  if (since && *since >= until) {
    return Status::InvalidArgument(
        "--since " + s.since + " (" + FormatTimeUtc(*since) + ") is not before " +
        (s.until.empty() ? std::string("now (--until's default)")
                         : "--until " + s.until + " (" + FormatTimeUtc(until) + ")") +
        ": give an earlier --since");
  }
  if (!s.by.empty()) {
    if (s.by != "user" && s.by != "project") {
      return Status::InvalidArgument("--by " + s.by + ": use user or project");
    }
    path += sep + "by=" + s.by;
  }
  if (s.csv && s.base.json) return Status::InvalidArgument("--csv and --json: pick one");
  if (s.csv) return GetAndPrint(rt, s.base, path, [](const Json& j) { return RenderUsageCsv(j); });
  return GetAndPrint(rt, s.base, path, [](const Json& j) { return RenderUsage(j); });
}

struct TokenCreateState {
  SimpleState base;
  std::string user;
  std::string kind = "user";
  std::string expires;  // a duration from now ("90d"); empty: never
};

constexpr int64_t kMaxExpiryS = int64_t{10} * 366 * 24 * 3600;  // the API's expires_in_s bound

// Seconds from "90d", "12h", "1h30m", "45s": a unit is required, since a bare number
// (minutes, as time limits read it) is easy to misread as days here.
Result<int64_t> ParseExpiry(const std::string& text) {
  const bool bare = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  Result<int64_t> secs = bare ? Status::InvalidArgument("give a unit") : ParseDuration(text);
  if (!secs.ok() || *secs <= 0) {
    return Status::InvalidArgument("--expires " + text +
                                   ": give how long the token lasts with a unit, e.g. 90d, 12h, "
                                   "30m or 45s");
  }
  // The server's bound (expires_in_s), said in the flag's words.
  if (*secs > kMaxExpiryS) {
    return Status::InvalidArgument("--expires " + text +
                                   ": at most 3660d (10 years); leave --expires out for a token "
                                   "that never expires");
  }
  return *secs;
}

Status RunTokenCreate(const ClientRuntime& rt, const TokenCreateState& s) {
  if (s.kind != "user" && s.kind != "node" && s.kind != "metrics") {
    return Status::InvalidArgument("--kind " + s.kind + ": use user, node or metrics");
  }
  if (s.user.empty()) return Status::InvalidArgument("--user: give the user the token is for");
  int64_t expires_in_s = 0;
  if (!s.expires.empty()) {
    GP_ASSIGN_OR_RETURN(expires_in_s, ParseExpiry(s.expires));
  }
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.base.conn));
  OrderedJson body = {{"user", s.user}, {"kind", s.kind}};
  if (expires_in_s > 0) body["expires_in_s"] = expires_in_s;
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Post("/v1/tokens", DumpJson(body)));
  if (s.base.json) {
    PrintRaw(rt, answer.body);
    return Status::Ok();
  }
  const std::string token = GetString(answer.json, "token");
  if (token.empty()) return Status::Internal("the server's answer carries no token");
  // The token alone on stdout, so `TOKEN=$(gpupool token create ...)` works; advice on
  // stderr.
  Print(rt, token + "\n");
  const int64_t expires_us = GetInt(answer.json, "expires_us");
  *rt.env.err << "gpupool: a " << s.kind << " token for " << GetString(answer.json, "user", s.user)
              << " (id " << GetString(answer.json, "id", "?") << ", "
              << (expires_us > 0 ? "expires " + FormatTimeUtc(expires_us) : "never expires")
              << "); it is shown only this once: keep it secret and use it as GPUPOOL_TOKEN or "
                 "--token\n";
  return Status::Ok();
}

struct TokenRevokeState {
  SimpleState base;
  std::string id;
};

Status RunTokenRevoke(const ClientRuntime& rt, const TokenRevokeState& s) {
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.base.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Delete("/v1/tokens/" + s.id));
  if (s.base.json) {
    PrintRaw(rt, answer.body);
    return Status::Ok();
  }
  const Json* revoked = Field(answer.json, "revoked");
  const Json none = Json::object();
  const Json& r = revoked != nullptr ? *revoked : none;
  Print(rt, "revoked " + GetString(r, "kind", "?") + " token " + GetString(r, "id", s.id) + " of " +
                GetString(r, "user", "?") + "\n");
  return Status::Ok();
}

struct LimitsState {
  SimpleState base;
  std::string user;
  std::string project;
  bool all_users = false;
  std::optional<std::string> max_gpus;
  std::optional<std::string> max_running;
  std::optional<std::string> max_queued;
  std::optional<std::string> preemptible;  // yes, no or none (docs/preemption.md)
  std::optional<std::string> min_runtime;  // a duration, or none
  std::optional<std::string> grace;        // a duration, or none
  // Associations (docs/cli.md, "limits"): a project's members, a user's default project.
  std::optional<std::string> members;  // NAME,NAME... (replaces them), or none
  std::vector<std::string> add_members;
  std::vector<std::string> remove_members;
  std::optional<std::string> default_project;  // a project, or none
  std::optional<std::string> fair_share;       // a weight, or none (docs/deploy.md, "Fair share")
  bool Associations() const {
    return members || !add_members.empty() || !remove_members.empty() || default_project;
  }
};

// `limits set`'s associations into the entry: --members, --add-member and
// --remove-member (in that order) on a project's, --default-project on a user's.
Status SetAssociations(const LimitsState& s, Json* entry) {
  if ((s.members || !s.add_members.empty() || !s.remove_members.empty()) && s.project.empty()) {
    return Status::InvalidArgument(
        "--members, --add-member and --remove-member: a project's members; give --project NAME");
  }
  if (s.default_project && s.user.empty()) {
    return Status::InvalidArgument("--default-project: a user's; give --user NAME");
  }
  std::set<std::string> members;
  if (const Json* m = Field(*entry, "members"); m != nullptr && m->is_array()) {
    for (const Json& name : *m) {
      if (name.is_string()) members.insert(name.get<std::string>());
    }
  }
  if (s.members) {
    members.clear();
    if (*s.members != "none") {
      for (const std::string& name : Split(*s.members, ',')) {
        if (Trim(name).empty()) {
          return Status::InvalidArgument("--members " + *s.members +
                                         ": login names separated by commas, or none");
        }
        members.insert(std::string(Trim(name)));
      }
    }
  }
  for (const std::string& name : s.add_members) members.insert(std::string(Trim(name)));
  for (const std::string& name : s.remove_members) members.erase(std::string(Trim(name)));
  if (members.empty()) {
    entry->erase("members");
  } else {
    (*entry)["members"] = members;
  }
  if (s.default_project) {
    if (*s.default_project == "none") {
      entry->erase("default_project");
    } else {
      (*entry)["default_project"] = *s.default_project;
    }
  }
  return Status::Ok();
}

// `limits set`'s preemption defaults into `values` (-1: clear) and `preemptible`.
Status PreemptionDefaults(const LimitsState& s, std::map<std::string, int64_t>* values,
                          std::optional<std::optional<bool>>* preemptible) {
  if (s.preemptible) {
    if (*s.preemptible == "yes" || *s.preemptible == "no") {
      *preemptible = std::optional<bool>(*s.preemptible == "yes");
    } else if (*s.preemptible == "none") {
      *preemptible = std::optional<bool>();
    } else {
      return Status::InvalidArgument("--preemptible " + *s.preemptible +
                                     ": yes, no, or none (no default)");
    }
  }
  // A job's 0 is no value (the server's default), so an entry's 0 would not mean "at
  // once"; the bounds are the server's (limits.cc), said with the flag.
  for (const auto& [flag, key, value, most_s, most] :
       {std::tuple{"--min-runtime", "min_runtime_s", &s.min_runtime, int64_t{365} * 86400, "365d"},
        std::tuple{"--grace", "preempt_grace_s", &s.grace, int64_t{86400}, "24h"}}) {
    if (!*value) continue;
    if (**value == "none") {
      (*values)[key] = -1;
      continue;
    }
    Result<int64_t> secs = ParseDurationWithUnit(**value);
    if (!secs.ok() || *secs <= 0 || *secs > most_s) {
      return Status::InvalidArgument(std::string(flag) + " " + **value +
                                     ": a duration with its unit from 1s to " + most +
                                     " (90s, 10m, 2h), or none");
    }
    (*values)[key] = *secs;
  }
  return Status::Ok();
}

// What `limits set` changes in its entry: numbers (-1: clear) and the preemptible default
// (set: change it, to a value or none); the associations come from the state itself.
struct LimitsChange {
  std::map<std::string, int64_t> values;
  std::optional<std::optional<bool>> preemptible;
  std::optional<double> fair_share;  // <= 0: clear it
};

// `limits set --fair-share`: a weight above 0 and at most 1000000 (a user's or a project's),
// or none (weighs 1 again).
Status FairShareChange(const LimitsState& s, LimitsChange* c) {
  constexpr double kMaxFairShare = 1'000'000;  // the server's bound (sched::kMaxFairShare)
  if (!s.fair_share) return Status::Ok();
  if (s.all_users) {
    return Status::InvalidArgument(
        "--fair-share: a user's or a project's weight; give --user NAME or --project NAME (users "
        "and projects without one weigh 1)");
  }
  if (*s.fair_share == "none") {
    c->fair_share = 0;
    return Status::Ok();
  }
  std::optional<double> w = ParseDouble(Trim(*s.fair_share));
  if (!w || !std::isfinite(*w) || !(*w > 0) || *w > kMaxFairShare) {
    return Status::InvalidArgument("--fair-share " + *s.fair_share +
                                   ": a number above 0 and at most 1000000 (a weight: 2 gets "
                                   "twice the share of 1), or none");
  }
  c->fair_share = *w;
  return Status::Ok();
}

// The change of `limits set`, from its flags: InvalidArgument naming a bad one.
Result<LimitsChange> ParseLimitsChange(const LimitsState& s) {
  const int scopes = (s.user.empty() ? 0 : 1) + (s.project.empty() ? 0 : 1) + (s.all_users ? 1 : 0);
  if (scopes != 1) {
    return Status::InvalidArgument(
        "limits set: give one of --user NAME, --project NAME or --default (every user)");
  }
  if (!s.max_gpus && !s.max_running && !s.max_queued && !s.preemptible && !s.min_runtime &&
      !s.grace && !s.Associations() && !s.fair_share) {
    return Status::InvalidArgument(
        "limits set: give --max-gpus, --max-running or --max-queued (a number, or none), "
        "--preemptible, --min-runtime or --grace, --fair-share, or a project's --members "
        "(--add-member, --remove-member) or a user's --default-project");
  }
  const std::tuple<const char*, const char*, const std::optional<std::string>*> fields[] = {
      {"--max-gpus", "max_gpus", &s.max_gpus},
      {"--max-running", "max_running", &s.max_running},
      {"--max-queued", "max_queued", &s.max_queued}};
  LimitsChange c;
  for (const auto& [flag, key, value] : fields) {
    if (!*value) continue;
    if (**value == "none") {
      c.values[key] = -1;
      continue;
    }
    auto n = ParseInt64(Trim(**value));
    if (!n || *n < 0) {
      return Status::InvalidArgument(std::string(flag) + " " + **value +
                                     ": a whole number of at least 0, or none (no limit)");
    }
    c.values[key] = *n;
  }
  GP_RETURN_IF_ERROR(PreemptionDefaults(s, &c.values, &c.preemptible));
  GP_RETURN_IF_ERROR(FairShareChange(s, &c));
  Json checked = Json::object();  // the associations' flags, checked before any request
  GP_RETURN_IF_ERROR(SetAssociations(s, &checked));
  return c;
}

// The change into the one entry of `limits` (as GET /v1/limits answered them, with their
// revision, which goes back with them).
Status ApplyLimitsChange(const LimitsState& s, const LimitsChange& c, Json* limits) {
  Json* entry = nullptr;
  if (s.all_users) {
    entry = &(*limits)["default"];
  } else {
    entry = &(*limits)[s.user.empty() ? "projects" : "users"][s.user.empty() ? s.project : s.user];
  }
  if (!entry->is_object()) *entry = Json::object();
  for (const auto& [key, n] : c.values) {
    if (n < 0) {
      entry->erase(key);
    } else {
      (*entry)[key] = n;
    }
  }
  if (c.preemptible) {
    if (*c.preemptible) {
      (*entry)["preemptible"] = **c.preemptible;
    } else {
      entry->erase("preemptible");
    }
  }
  if (c.fair_share) {
    if (*c.fair_share > 0) {
      (*entry)["fair_share"] = *c.fair_share;
    } else {
      entry->erase("fair_share");
    }
  }
  return SetAssociations(s, entry);
}

// How many times `limits set` reads, changes and writes the limits when another admin's
// write comes between its read and its write (409) before it gives up.
constexpr int kLimitsSetAttempts = 5;

// `limits set`: reads the limits, changes the one entry, writes them back at the revision
// it read (admins). When they changed in between (another admin's `limits set`), the
// write is refused (409) and it starts again from a fresh read, so neither change is lost.
Status RunLimitsSet(const ClientRuntime& rt, const LimitsState& s) {
  GP_ASSIGN_OR_RETURN(LimitsChange change, ParseLimitsChange(s));
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.base.conn));
  for (int attempt = 1;; ++attempt) {
    GP_ASSIGN_OR_RETURN(ApiAnswer current, api.Get("/v1/limits"));
    Json limits = current.json;
    GP_RETURN_IF_ERROR(ApplyLimitsChange(s, change, &limits));
    Result<ApiAnswer> answer = api.Put("/v1/limits", limits.dump());
    if (answer.ok()) {
      if (s.base.json) {
        PrintRaw(rt, answer->body);
      } else {
        Print(rt, RenderLimits(answer->json));
      }
      return Status::Ok();
    }
    // A server without revisions overwrites: its 409s are not about this.
    if (answer.status().code() != StatusCode::kFailedPrecondition || !limits.contains("revision")) {
      return answer.status();
    }
    if (attempt == kLimitsSetAttempts) {
      return Status::FailedPrecondition(
          "limits set: the limits changed between this command's read and its write " +
          std::to_string(attempt) +
          " times in a row (other admins are changing them now); nothing was changed: run it "
          "again (the server said: " +
          answer.status().message() + ")");
    }
  }
}

struct NodeActionState {
  SimpleState base;
  std::string name;
  std::string reason;
  std::string gpu;  // resume: one GPU (docs/health.md)
};

// POST /v1/nodes/NAME/drain or /resume (admins), then says what the node does now.
Status RunNodeAction(const ClientRuntime& rt, const NodeActionState& s, const std::string& action) {
  if (action == "drain" && s.reason.empty()) {
    return Status::InvalidArgument(
        "--reason: say why the node is drained, e.g. --reason \"GPU 3 replacement\"");
  }
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.base.conn));
  OrderedJson body = OrderedJson::object();
  if (action == "drain") body["reason"] = s.reason;
  if (action == "resume" && !s.gpu.empty()) body["gpu"] = s.gpu;
  GP_ASSIGN_OR_RETURN(ApiAnswer answer,
                      // The name as given, escaped: `%6e1` must not drain n1, nor `n1?x` n1.
                      RetryDuringTakeover(
                          api,
                          [&] {
                            return api.Post("/v1/nodes/" + net::UrlEncode(s.name) + "/" + action,
                                            DumpJson(body));
                          },
                          *rt.env.err));
  if (s.base.json) {
    PrintRaw(rt, answer.body);
    return Status::Ok();
  }
  const Json* node = Field(answer.json, "node");
  const Json none = Json::object();
  const Json& n = node != nullptr ? *node : none;
  const std::string state = GetString(n, "state", "?");
  const int64_t running = GetInt(n, "running_jobs");
  std::string line = "node " + GetString(n, "name", s.name) + " " + state;
  if (state == "draining") {
    line += ": " + std::to_string(running) + " job" + (running == 1 ? "" : "s") +
            " still run there; nothing new starts (`gpupool node resume " + s.name + "` undoes it)";
  } else if (state == "drained") {
    line += ": nothing runs there and nothing new starts";
  } else if (action == "resume" && !s.gpu.empty()) {
    line += ": GPU " + s.gpu + " takes new jobs again";
  } else if (action == "resume") {
    line += ": new jobs start there again";
  }
  Print(rt, line + "\n");
  return Status::Ok();
}

// gpupool node show NAME (anyone who may list nodes).
Status RunNodeShow(const ClientRuntime& rt, const NodeActionState& s) {
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.base.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get("/v1/nodes"));
  if (s.base.json) {
    for (const Json& node : GetArray(answer.json, "nodes")) {
      if (GetString(node, "name") == s.name) {
        Print(rt, node.dump(2) + "\n");
        return Status::Ok();
      }
    }
  }
  GP_ASSIGN_OR_RETURN(std::string text, RenderNode(answer.json, s.name, rt.env.now_us()));
  Print(rt, text);
  return Status::Ok();
}

// gpupool node drain / resume (admins).
void RegisterNodeCommands(CLI::App& app, const RuntimePtr& rt) {
  CLI::App* node = app.add_subcommand("node", "Show a node in full; drain or resume it (admins)");
  node->require_subcommand(1);
  auto nd = std::make_shared<NodeActionState>();
  CLI::App* drain = node->add_subcommand(
      "drain",
      "Finish what runs on a node and start nothing new there (like scontrol ... "
      "State=DRAIN)");
  drain->add_option("name", nd->name, "the node, as `gpupool nodes` names it")->required();
  drain->add_option("--reason", nd->reason, "why, shown in `gpupool nodes` and pending reasons")
      ->required();
  drain->add_flag("--json", nd->base.json, "print the server's JSON");
  AddConnectionOptions(*drain, &nd->base.conn);
  drain->callback([rt, nd] { Report(*rt, RunNodeAction(*rt, *nd, "drain")); });
  auto nr = std::make_shared<NodeActionState>();
  auto ns = std::make_shared<NodeActionState>();
  CLI::App* show = node->add_subcommand(
      "show", "Show one node in full: each GPU's health, enforcement and latest telemetry");
  show->add_option("name", ns->name, "the node, as `gpupool nodes` names it")->required();
  show->add_flag("--json", ns->base.json, "print the server's JSON for this node");
  AddConnectionOptions(*show, &ns->base.conn);
  show->callback([rt, ns] { Report(*rt, RunNodeShow(*rt, *ns)); });

  CLI::App* resume = node->add_subcommand("resume", "Let new jobs start on a drained node again");
  resume->add_option("name", nr->name, "the node")->required();
  resume->add_option("--gpu", nr->gpu,
                     "only this GPU (index or UUID), out of service by the health policy "
                     "(docs/health.md)");
  resume->add_flag("--json", nr->base.json, "print the server's JSON");
  AddConnectionOptions(*resume, &nr->base.conn);
  resume->callback([rt, nr] { Report(*rt, RunNodeAction(*rt, *nr, "resume")); });
}

// `limits` and `limits set`.
void RegisterLimitsCommand(CLI::App& app, const RuntimePtr& rt) {
  auto ls = std::make_shared<LimitsState>();
  CLI::App* limits = app.add_subcommand(
      "limits", "Show the usage limits per user and project; `limits set` changes them (admins)");
  limits->add_flag("--json", ls->base.json, "print the server's JSON");
  AddConnectionOptions(*limits, &ls->base.conn);
  CLI::App* set = limits->add_subcommand("set", "Set or clear one user's or project's limits");
  set->add_option("--user", ls->user, "this user's limits");
  set->add_option("--project", ls->project, "this project's limits (all its members' jobs)");
  set->add_flag("--default", ls->all_users, "the limits of every user without their own");
  set->add_option("--max-gpus", ls->max_gpus, "GPUs in use at once, or none");
  set->add_option("--max-running", ls->max_running, "jobs running at once, or none");
  set->add_option("--max-queued", ls->max_queued, "jobs queued at once, or none");
  set->add_option("--preemptible", ls->preemptible,
                  "yes: their batch jobs are preemptible whatever they ask; no: only those "
                  "submitted --preemptible; none: no default (docs/preemption.md)");
  set->add_option("--min-runtime", ls->min_runtime,
                  "their preemptible jobs' --min-runtime when they give none, or none");
  set->add_option("--grace", ls->grace,
                  "their preemptible jobs' --grace when they give none, or none");
  set->add_option("--members", ls->members,
                  "a project's members, NAME,NAME...: only they may charge it where the server "
                  "enforces projects (enforce-projects members); none: clear them");
  set->add_option("--add-member", ls->add_members, "add these users to a project's members")
      ->delimiter(',');
  set->add_option("--remove-member", ls->remove_members, "take these users off a project's members")
      ->delimiter(',');
  set->add_option("--default-project", ls->default_project,
                  "the project a user's jobs without --project charge (one whose members list "
                  "them), or none: their own name");
  set->add_option("--fair-share", ls->fair_share,
                  "a user's or project's fair-share weight (Slurm's Fairshare=N): 2 gets twice "
                  "the share of 1 where fair share is by users (projects: --fair-by project); "
                  "none: 1 again");
  set->add_flag("--json", ls->base.json, "print the server's JSON");
  AddConnectionOptions(*set, &ls->base.conn);
  set->callback([rt, ls] { Report(*rt, RunLimitsSet(*rt, *ls)); });
  limits->callback([rt, ls, limits] {
    if (limits->got_subcommand("set")) return;
    Report(*rt,
           GetAndPrint(*rt, ls->base, "/v1/limits", [](const Json& j) { return RenderLimits(j); }));
  });
}

}  // namespace

void RegisterClusterCommands(CLI::App& app, const RuntimePtr& rt) {
  auto n = std::make_shared<SimpleState>();
  CLI::App* nodes = app.add_subcommand("nodes", "List the pool's nodes and their GPUs");
  nodes->add_flag("--json", n->json, "print the server's JSON");
  AddConnectionOptions(*nodes, &n->conn);
  nodes->callback([rt, n] {
    const int64_t now = rt->env.now_us();
    Report(*rt,
           GetAndPrint(*rt, *n, "/v1/nodes", [now](const Json& j) { return RenderNodes(j, now); }));
  });

  RegisterLimitsCommand(app, rt);
  RegisterNodeCommands(app, rt);

  auto u = std::make_shared<UsageState>();
  CLI::App* usage = app.add_subcommand(
      "usage",
      "GPU-hours allocated and used per user or project (a 0.25 share counts a quarter; used "
      "weighs it by the GPUs' measured utilisation, efficiency = used / allocated)");
  usage->add_option("--since", u->since,
                    "from this UTC date or time (2026-11-01, 2026-11-01T08:00) or this long ago "
                    "(7d, 12h); default 30 days ago");
  usage->add_option("--until", u->until, "up to this time (same forms); default now");
  usage->add_option("--by", u->by, "user or project (default user)");
  usage->add_flag("--json", u->base.json, "print the server's JSON");
  usage->add_flag("--csv", u->csv, "print CSV: KEY,gpu_hours,used_gpu_hours,efficiency,jobs");
  AddConnectionOptions(*usage, &u->base.conn);
  usage->callback([rt, u] { Report(*rt, RunUsage(*rt, *u)); });

  CLI::App* token = app.add_subcommand("token", "Bearer tokens for TCP access (admins)");
  token->require_subcommand(1);
  auto tc = std::make_shared<TokenCreateState>();
  CLI::App* create = token->add_subcommand("create", "Create a token; it is shown only once");
  create
      ->add_option("--user", tc->user,
                   "the user (for --kind node the node, for --kind metrics the service) it "
                   "is for")
      ->required();
  create
      ->add_option("--kind", tc->kind,
                   "user (a person's token), node (an agent's join token, for that node only) "
                   "or metrics (a service account: reads /metrics and the aggregates only)")
      ->capture_default_str();
  create->add_option("--expires", tc->expires,
                     "refused after this long: 90d, 12h, 30m, 45s (default: never)");
  create->add_flag("--json", tc->base.json, "print the server's JSON");
  AddConnectionOptions(*create, &tc->base.conn);
  create->callback([rt, tc] { Report(*rt, RunTokenCreate(*rt, *tc)); });
  auto tl = std::make_shared<SimpleState>();
  CLI::App* list = token->add_subcommand("list", "List tokens (never their secrets)");
  list->add_flag("--json", tl->json, "print the server's JSON");
  AddConnectionOptions(*list, &tl->conn);
  list->callback([rt, tl] {
    const int64_t now = rt->env.now_us();
    Report(*rt, GetAndPrint(*rt, *tl, "/v1/tokens",
                            [now](const Json& j) { return RenderTokens(j, now); }));
  });
  auto tr = std::make_shared<TokenRevokeState>();
  CLI::App* revoke =
      token->add_subcommand("revoke", "Revoke a token: it is refused (401) from now on");
  revoke->add_option("ID", tr->id, "the token's id, as `gpupool token list` shows it")->required();
  revoke->add_flag("--json", tr->base.json, "print the server's JSON");
  AddConnectionOptions(*revoke, &tr->base.conn);
  revoke->callback([rt, tr] { Report(*rt, RunTokenRevoke(*rt, *tr)); });

  auto st = std::make_shared<SimpleState>();
  CLI::App* status = app.add_subcommand(
      "status", "Which controller leads, and the standbys (several controllers on PostgreSQL)");
  status->add_flag("--json", st->json, "print the server's JSON");
  AddConnectionOptions(*status, &st->conn);
  status->callback([rt, st] {
    Report(*rt, GetAndPrint(*rt, *st, "/v1/controllers",
                            [](const Json& j) { return RenderControllers(j); }));
  });

  auto w = std::make_shared<SimpleState>();
  CLI::App* whoami = app.add_subcommand("whoami", "Who the server takes you for");
  whoami->add_flag("--json", w->json, "print the server's JSON");
  AddConnectionOptions(*whoami, &w->conn);
  whoami->callback([rt, w] {
    Report(*rt, GetAndPrint(*rt, *w, "/v1/whoami", [](const Json& j) { return RenderWhoami(j); }));
  });
}

}  // namespace gpupool::cli
