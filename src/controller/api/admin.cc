// The server itself (health, readiness, its schema, who is calling, which controller
// leads), the pool's limits, and tokens (admins only, as is PUT /v1/limits: the route
// table says so).
#include <optional>
#include <string>

#include "common/strings.h"
#include "controller/api/handlers.h"
#include "controller/limits.h"
#include "controller/openapi_document.h"
#include "controller/tokens.h"
#include "sched/admission/project_names.h"

namespace gpupool::controller::api {

net::HttpResponse Healthz(const ApiContext&, const Call&) {
  return JsonResponse(200, {{"ok", true}});
}

// GET /readyz: the server can do its job: the store answers and the scheduler loop goes
// round. 503 naming what is not ready otherwise.
net::HttpResponse Readyz(const ApiContext& ctx, const Call&) {
  std::vector<std::string> problems;
  if (Result<std::vector<store::NodeRecord>> nodes = ctx.store->ListNodes(); !nodes.ok()) {
    problems.push_back("the store does not answer: " + nodes.status().message());
  }
  if (!ctx.controller->SchedulerLooping()) problems.push_back("the scheduler loop is not running");
  if (ctx.stopping->load()) problems.push_back("the server is shutting down");
  if (problems.empty()) return JsonResponse(200, {{"ok", true}});
  return JsonResponse(503, {{"ok", false}, {"problems", problems}});
}

// docs/openapi.json as it was when the server was built.
net::HttpResponse ServeOpenApi(const ApiContext&, const Call&) {
  net::HttpResponse resp;
  resp.content_type = "application/json";
  resp.body = std::string(OpenApiDocument());
  return resp;
}

net::HttpResponse Whoami(const ApiContext&, const Call& c) {
  return JsonResponse(200, {{"user", c.caller.user},
                            {"uid", c.caller.uid},
                            {"admin", c.caller.admin},
                            {"kind", CallerKindName(c.who.kind)}});
}

// GET /v1/controllers: which controller leads and which stand by (SetControllersView);
// a controller on a store of its own has neither lease nor standbys.
net::HttpResponse ListControllers(const ApiContext& ctx, const Call&) {
  if (!*ctx.controllers_view) {
    return JsonResponse(200, {{"leader", nullptr},
                              {"controllers", OrderedJson::array()},
                              {"note",
                               "one controller on a store of its own (SQLite): there is no "
                               "lease and no standby"}});
  }
  Result<OrderedJson> view = (*ctx.controllers_view)();
  if (!view.ok()) return ErrorResponse(view.status());
  return JsonResponse(200, *view);
}

namespace {

// The limits with their revision, in the body ("revision") and as the ETag ("7").
net::HttpResponse LimitsAnswer(const RevisedLimits& l) {
  OrderedJson body = LimitsToJson(l.limits);
  body["revision"] = l.revision;
  net::HttpResponse r = JsonResponse(200, body);
  r.headers["ETag"] = "\"" + std::to_string(l.revision) + "\"";
  return r;
}

// The revision a PUT expects, from If-Match ("7", or * for any) or the body's
// "revision"; -1 when it names none (the PUT overwrites). InvalidArgument naming the
// header or field when it is malformed, or when the two disagree.
Result<int64_t> ExpectedRevision(const net::HttpRequest& r, const Json& body) {
  int64_t from_body = -1;
  if (auto it = body.find("revision"); it != body.end() && it->is_number_integer()) {
    from_body = it->get<int64_t>();  // LimitsFromJson checked it is 0 or more
  } else if (it != body.end() && it->is_null()) {
    // Not "no revision": a client whose revision went missing would overwrite unchecked.
    return Status::InvalidArgument(
        "limits.revision: null: send the revision GET /v1/limits answered, or leave the field "
        "out to overwrite the limits");
  }
  std::string tag(Trim(r.Header("if-match")));
  if (tag.empty() || tag == "*") return from_body;
  if (tag.size() > 2 && tag.front() == '"' && tag.back() == '"') {
    tag = tag.substr(1, tag.size() - 2);
  }
  std::optional<int64_t> n = ParseInt64(tag);
  if (!n || *n < 0) {
    return Status::InvalidArgument("If-Match: " + std::string(r.Header("if-match")) +
                                   ": the ETag GET /v1/limits answered, e.g. \"7\" (or *)");
  }
  if (from_body >= 0 && from_body != *n) {
    return Status::InvalidArgument("If-Match \"" + tag + "\" and limits.revision " +
                                   std::to_string(from_body) +
                                   " disagree: send the revision GET /v1/limits answered");
  }
  return *n;
}

}  // namespace

net::HttpResponse GetLimits(const ApiContext& ctx, const Call&) {
  return LimitsAnswer(ctx.controller->GetLimits());
}

namespace {

// Limits apply to the accounts jobs run as: a user row, or a project's member, the
// limits did not have yet must name an account on this host, or a typo would limit (or
// admit) nobody and say nothing. Those already there stay, so a deleted account does
// not block every later change.
Status CheckLimitUsers(const Limits& next, const Limits& current) {
  auto check = [](const std::string& field, const std::string& name) {
    if (IsPosixUserName(name) && HasPosixAccount(name)) return Status::Ok();
    return Status::InvalidArgument(
        field + ": there is no user '" + name +
        "' on the controller host; limits apply to the login names jobs run as: give an "
        "existing one (`getent passwd NAME`), or create the account first");
  };
  for (const auto& [name, limit] : next.users) {
    if (!current.users.contains(name)) GP_RETURN_IF_ERROR(check("limits.users." + name, name));
  }
  for (const auto& [project, limit] : next.projects) {
    const Limit* was = current.ForProject(project);
    for (const std::string& m : limit.members) {
      if (was != nullptr && was->members.contains(m)) continue;
      GP_RETURN_IF_ERROR(check("limits.projects." + project + ".members", m));
    }
  }
  return Status::Ok();
}

// A project's name, when the limits did not have it yet: it is printed in every view
// (no control characters), is not "none" (which `gpupool limits set` reads as nothing:
// `--members none`, `--default-project none`), and is not the login name of a user its
// members leave out: that user's jobs without --project charge it (jobs::AccountingProject)
// and AdmitProject lets them name it, whoever its members are; nor does it print like
// another entry's name (ConfusableSkeleton: all-Cyrillic "сосо" and "coco").
Status CheckProjectNames(const Limits& next, const Limits& current) {
  // The entries' names, before and after: a new one must not print like another.
  sched::ProjectNames entries = sched::ProjectNames::Of(next);
  entries.AddAll(current);
  for (const auto& [project, limit] : next.projects) {
    const Limit* was = current.ForProject(project);
    if (was == nullptr && (HasControlCharacter(project) || HasInvisibleCharacter(project) ||
                           project.starts_with(' ') || project.ends_with(' '))) {
      return Status::InvalidArgument(
          "limits.projects: a project name of 1..64 characters without control or invisible "
          "characters or spaces at either end, e.g. \"vision\"");
    }
    if (was == nullptr && project == "(none)") {
      return Status::InvalidArgument(
          "limits.projects.(none): '(none)' is how /metrics labels jobs without a "
          "project; name the project otherwise");
    }
    if (was == nullptr && MixesLookAlikeScripts(project)) {
      return Status::InvalidArgument(
          "limits.projects: a project name mixes Latin, Greek or Cyrillic letters, which "
          "print alike (a Cyrillic i lists like a Latin one); write it in one script");
    }
    if (was == nullptr && entries.HasLookAlikeOf(project)) {
      return Status::InvalidArgument(
          "limits.projects: a new project name prints like that of another entry (look-alike "
          "letters of another script, as a Cyrillic c and a Latin one, or other capitals); "
          "change the entry that is there, or name the project otherwise");
    }
    if (was == nullptr && project == "none") {
      return Status::InvalidArgument(
          "limits.projects.none: `gpupool limits set` reads 'none' as nothing (--members none, "
          "--default-project none); name the project otherwise");
    }
    const bool members_changed = was == nullptr || was->members != limit.members;
    if (members_changed && !limit.members.empty() && !limit.members.contains(project) &&
        IsPosixUserName(project) && HasPosixAccount(project)) {
      return Status::InvalidArgument(
          "limits.projects." + project + ".members: '" + project +
          "' is also a login name, and that user's jobs without --project charge project '" +
          project + "' whoever its members are; add them (--add-member " + project +
          ") or name the project otherwise");
    }
  }
  return Status::Ok();
}

}  // namespace

net::HttpResponse PutLimits(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 1 << 20, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<Limits> l = LimitsFromJson(*body);
  if (!l.ok()) return ErrorResponse(l.status());
  Result<int64_t> expected = ExpectedRevision(c.r, *body);
  if (!expected.ok()) return ErrorResponse(expected.status());
  // The names are checked against the limits the write replaces, under the write (not
  // ones read here, which another admin's write could replace first); admins only hear
  // about them: SetLimits refuses anyone else first.
  auto check = [](const Limits& next, const Limits& replaced) -> Status {
    GP_RETURN_IF_ERROR(CheckLimitUsers(next, replaced));
    return CheckProjectNames(next, replaced);
  };
  Result<RevisedLimits> set = ctx.controller->SetLimits(std::move(*l), c.caller, *expected, check);
  if (!set.ok()) return ErrorResponse(set.status());
  return LimitsAnswer(*set);
}

net::HttpResponse CreateToken(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  Result<Json> body = BodyJson(r, 1 << 16, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  std::string user;
  std::string kind = "user";
  int64_t expires_in_s = 0;
  JsonFields f(*body, "");
  f.Required("user", &user);
  f.Optional("kind", &kind);
  // Ten years at most; 0 (the default) never expires.
  f.Optional("expires_in_s", &expires_in_s, 0, int64_t{10} * 366 * 24 * 3600);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  if (kind != "user" && kind != "node" && kind != "metrics") {
    return ErrorResponse(Status::InvalidArgument("kind: use user, node or metrics"));
  }
  if (Status s = ValidateTokenSubject(kind, user); !s.ok()) return ErrorResponse(s);
  Result<std::pair<std::string, std::string>> tok = NewToken();
  if (!tok.ok()) return ErrorResponse(tok.status());
  store::TokenRecord rec{tok->second, user, kind, ctx.clock->NowMicros()};
  if (expires_in_s > 0) rec.expires_us = rec.created_us + expires_in_s * 1'000'000;
  Status s = ctx.store->PutToken(rec);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(201, {{"token", tok->first},
                            {"id", TokenId(rec)},
                            {"user", user},
                            {"kind", kind},
                            {"expires_us", rec.expires_us}});
}

// Admins only (the route table), as are CreateToken and RevokeToken.
net::HttpResponse ListTokens(const ApiContext& ctx, const Call&) {
  Result<std::vector<store::TokenRecord>> tokens = ctx.store->ListTokens();
  if (!tokens.ok()) return ErrorResponse(tokens.status());
  OrderedJson list = OrderedJson::array();
  for (const auto& t : *tokens) {
    list.push_back({{"id", TokenId(t)},
                    {"user", t.user},
                    {"kind", t.kind},
                    {"created_us", t.created_us},
                    {"expires_us", t.expires_us},
                    {"last_used_us", t.last_used_us}});
  }
  return JsonResponse(200, {{"tokens", std::move(list)}});
}

net::HttpResponse RevokeToken(const ApiContext& ctx, const Call& c) {
  Result<store::TokenRecord> t = FindTokenById(*ctx.store, c.Param("token_id"));
  if (!t.ok()) return ErrorResponse(t.status());
  if (Status s = ctx.store->DeleteToken(t->token_hash); !s.ok()) return ErrorResponse(s);
  return JsonResponse(200,
                      {{"revoked", {{"id", TokenId(*t)}, {"user", t->user}, {"kind", t->kind}}}});
}

}  // namespace gpupool::controller::api
