// Environments: named images and directories that jobs run in (environments.h), and
// whether the pool's nodes can run one.
#include "controller/environments.h"

#include "controller/api/handlers.h"
#include "envcheck/needs.h"
#include "jobs/job_json.h"

namespace gpupool::controller::api {
namespace {

OrderedJson EnvironmentToJson(const store::EnvironmentRecord& e) {
  OrderedJson j;
  j["name"] = e.name + ":" + e.version;
  j["kind"] = e.kind;
  j["location"] = e.location;
  OrderedJson needs = OrderedJson::parse(e.needs_json, nullptr, /*allow_exceptions=*/false);
  j["needs"] = needs.is_discarded() ? OrderedJson::object() : std::move(needs);
  j["owner"] = e.owner;
  j["created_us"] = e.created_us;
  if (!e.image_id.empty()) j["image_id"] = e.image_id;
  if (!e.dir_digest.empty()) j["dir_digest"] = e.dir_digest;
  return j;
}

}  // namespace

net::HttpResponse ListEnvironments(const ApiContext& ctx, const Call&) {
  Result<std::vector<store::EnvironmentRecord>> list = ctx.environments->List();
  if (!list.ok()) return ErrorResponse(list.status());
  OrderedJson out = OrderedJson::array();
  for (const auto& e : *list) out.push_back(EnvironmentToJson(e));
  return JsonResponse(200, {{"environments", std::move(out)}});
}

// POST /v1/environments {"name", "image" | "dir"}: registers one.
net::HttpResponse AddEnvironment(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 64 << 10, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonFields f(*body, "");
  std::string name;
  std::string image;
  std::string dir;
  f.Required("name", &name);
  f.Optional("image", &image);
  f.Optional("dir", &dir);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  if (image.empty() == dir.empty()) {
    return ErrorResponse(Status::InvalidArgument("give exactly one of image or dir"));
  }
  const std::string kind = !image.empty() ? "image" : "dir";
  Result<store::EnvironmentRecord> e =
      ctx.environments->Add(name, kind, !image.empty() ? image : dir, c.caller);
  if (!e.ok()) return ErrorResponse(e.status());
  return JsonResponse(201, {{"environment", EnvironmentToJson(*e)}});
}

// POST /v1/environments/check {"image" | "dir" | "environment", "node"?}: whether the
// pool's nodes (or one) can run it.
net::HttpResponse CheckEnvironment(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 64 << 10, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonFields f(*body, "");
  std::string image;
  std::string dir;
  std::string environment;
  std::string node;
  f.Optional("image", &image);
  f.Optional("dir", &dir);
  f.Optional("environment", &environment);
  f.Optional("node", &node);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  const int given = !image.empty() + !dir.empty() + !environment.empty();
  if (given != 1) {
    return ErrorResponse(Status::InvalidArgument("give exactly one of image, dir or environment"));
  }
  const std::string kind = !image.empty() ? "image" : !dir.empty() ? "dir" : "environment";
  const std::string location = !image.empty() ? image : !dir.empty() ? dir : environment;
  Result<jobs::EnvNeeds> needs = ctx.environments->NeedsOf(kind, location, c.caller);
  if (!needs.ok()) return ErrorResponse(needs.status());
  OrderedJson nodes = OrderedJson::array();
  bool any = false;
  bool known = node.empty();
  for (const NodeView& v : ctx.controller->Nodes()) {
    if (!node.empty() && v.name != node) continue;
    known = true;
    Status s = envcheck::CheckNeeds(*needs, envcheck::OfferFromNode(v.info, v.name));
    any = any || s.ok();
    nodes.push_back({{"name", v.name}, {"ok", s.ok()}, {"reason", s.message()}});
  }
  if (!known) return ErrorResponse(Status::NotFound("no node '" + node + "' in this pool"));
  return JsonResponse(
      200, {{"needs", jobs::NeedsToJson(*needs)}, {"runnable", any}, {"nodes", std::move(nodes)}});
}

net::HttpResponse GetEnvironment(const ApiContext& ctx, const Call& c) {
  Result<store::EnvironmentRecord> e = ctx.environments->Get(c.Param("ref"));
  if (!e.ok()) return ErrorResponse(e.status());
  return JsonResponse(200, {{"environment", EnvironmentToJson(*e)}});
}

net::HttpResponse RemoveEnvironment(const ApiContext& ctx, const Call& c) {
  const std::string& ref = c.Param("ref");
  Status s = ctx.environments->Remove(
      ref, c.caller.user, c.caller.admin,
      [&ctx](const std::string& r) { return ctx.controller->JobsUsingEnvironment(r); });
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, {{"removed", ref}});
}

}  // namespace gpupool::controller::api
