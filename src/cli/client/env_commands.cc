// `gpupool env add|list|rm` (named environments) and the pool side of `env check`: thin
// clients of /v1/environments (docs/api.md). `env inspect` and the local `env check` live
// in src/cli/env_command.cc.
#include <algorithm>
#include <cctype>
#include <memory>

#include "cli/client/client_common.h"
#include "cli/client/json_view.h"
#include "cli/client/table.h"
#include "common/strings.h"

namespace gpupool::cli {
namespace {

std::string JoinArray(const Json& j, std::string_view key) {
  std::string out;
  for (const Json& v : GetArray(j, key)) {
    if (v.is_string()) out += (out.empty() ? "" : " ") + v.get<std::string>();
  }
  return out.empty() ? "-" : out;
}

std::string RenderEnvironments(const Json& answer) {
  Table t({"ENVIRONMENT", "KIND", "LOCATION", "CUDA", "MIN DRIVER", "CODE", "OWNER"});
  for (const Json& e : GetArray(answer, "environments")) {
    const Json* needs = Field(e, "needs");
    const Json empty = Json::object();
    const Json& n = needs != nullptr && needs->is_object() ? *needs : empty;
    std::string code = JoinArray(n, "sass");
    if (const std::string ptx = JoinArray(n, "ptx"); ptx != "-") {
      code = (code == "-" ? "" : code + " ") + ptx;
    }
    if (const std::string gfx = JoinArray(n, "gfx_targets"); gfx != "-") {
      code = (code == "-" ? "" : code + " ") + gfx;
    }
    const std::string cuda = GetString(n, "cuda");
    const std::string driver = GetString(n, "min_driver");
    std::string location = GetString(e, "location");
    // What it runs: the image id recorded at registration (re-tagging changes nothing).
    if (const std::string id = GetString(e, "image_id"); !id.empty()) {
      location +=
          " (" + id.substr(id.rfind(':') == std::string::npos ? 0 : id.rfind(':') + 1, 12) + ")";
    }
    t.AddRow({GetString(e, "name"), GetString(e, "kind"), location, cuda.empty() ? "-" : cuda,
              driver.empty() ? "-" : driver, code, GetString(e, "owner")});
  }
  if (t.rows() == 0)
    return "no environments registered; add one with `gpupool env add NAME:VERSION --image REF`\n";
  return t.Render();
}

struct EnvState {
  ConnectionFlags conn;
  bool json = false;
  std::string ref;
  std::string image;
  std::string dir;
};

Status RunAdd(const ClientRuntime& rt, const EnvState& s) {
  if (s.image.empty() == s.dir.empty()) {
    return Status::InvalidArgument("env add " + s.ref +
                                   ": give exactly one of --image REF or --dir PATH");
  }
  OrderedJson body;
  body["name"] = s.ref;
  if (!s.image.empty()) body["image"] = s.image;
  if (!s.dir.empty()) {
    if (s.dir.front() != '/') {
      return Status::InvalidArgument("--dir " + s.dir +
                                     ": give an absolute path (the server reads it)");
    }
    body["dir"] = s.dir;
  }
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Post("/v1/environments", DumpJson(body)));
  if (s.json) {
    PrintRaw(rt, answer.body);
    return Status::Ok();
  }
  Json list = Json::object();
  list["environments"] = Json::array({answer.json["environment"]});
  Print(rt, "added " + s.ref + "\n" + RenderEnvironments(list));
  return Status::Ok();
}

}  // namespace

void RegisterEnvPoolCommands(CLI::App& app, const RuntimePtr& rt) {
  CLI::App* env = nullptr;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == "env") env = sub;
  }
  if (env == nullptr) {
    env = app.add_subcommand("env", "inspect, check and name GPU software environments");
    env->require_subcommand(1);
  }
  auto add_state = std::make_shared<EnvState>();
  CLI::App* add = env->add_subcommand(
      "add", "register an immutable, inspected environment NAME:VERSION (an image or a directory)");
  add->add_option("name", add_state->ref,
                  "NAME:VERSION, e.g. torch:2.4; names are their first registrant's, and "
                  "PREFIX/NAME:VERSION (site/torch:2.4) is for admins")
      ->required();
  add->add_option("--image", add_state->image, "an image in podman's store on the server's host");
  add->add_option("--dir", add_state->dir, "a directory (conda env, virtualenv) on the nodes");
  add->add_flag("--json", add_state->json, "print the server's answer as JSON");
  AddConnectionOptions(*add, &add_state->conn);
  add->callback([rt, add_state] { Report(*rt, RunAdd(*rt, *add_state)); });

  auto list_state = std::make_shared<EnvState>();
  CLI::App* list = env->add_subcommand("list", "the registered environments");
  list->add_flag("--json", list_state->json, "print the server's answer as JSON");
  AddConnectionOptions(*list, &list_state->conn);
  list->callback([rt, list_state] {
    Report(*rt, [&]() -> Status {
      GP_ASSIGN_OR_RETURN(ApiClient api, Connect(*rt, list_state->conn));
      GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get("/v1/environments"));
      if (list_state->json) {
        PrintRaw(*rt, answer.body);
      } else {
        Print(*rt, RenderEnvironments(answer.json));
      }
      return Status::Ok();
    }());
  });

  auto rm_state = std::make_shared<EnvState>();
  CLI::App* rm = env->add_subcommand(
      "rm", "remove environment NAME:VERSION (refused while queued or running jobs use it)");
  rm->add_option("name", rm_state->ref, "NAME:VERSION")->required();
  AddConnectionOptions(*rm, &rm_state->conn);
  rm->callback([rt, rm_state] {
    Report(*rt, [&]() -> Status {
      GP_ASSIGN_OR_RETURN(ApiClient api, Connect(*rt, rm_state->conn));
      const std::string& ref = rm_state->ref;
      const bool plain = !ref.empty() && std::all_of(ref.begin(), ref.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == ':' || c == '.' || c == '_' ||
               c == '-' || c == '/';
      });
      if (!plain || ref.front() == '/') {
        return Status::InvalidArgument("env rm " + ref +
                                       ": not NAME:VERSION, e.g. torch:2.4 or site/torch:2.4");
      }
      GP_RETURN_IF_ERROR(api.Delete("/v1/environments/" + ref).status());
      Print(*rt, "removed " + rm_state->ref + "\n");
      return Status::Ok();
    }());
  });
}

int PoolEnvCheck(const std::string& kind, const std::string& location, const std::string& node,
                 const std::string& server, const std::string& token, bool json,
                 ClientEnvironment env) {
  CommandContext ctx;
  ClientRuntime rt;
  rt.env = std::move(env);
  rt.ctx = &ctx;
  Status s = [&]() -> Status {
    GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, ConnectionFlags{server, token}));
    OrderedJson body;
    body[kind] = location;
    if (!node.empty()) body["node"] = node;
    GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Post("/v1/environments/check", DumpJson(body)));
    const bool runnable = answer.json.value("runnable", false);
    if (json) {
      PrintRaw(rt, answer.body);
    } else {
      std::string out;
      for (const Json& n : GetArray(answer.json, "nodes")) {
        const bool ok = n.value("ok", false);
        out += (ok ? "OK: node " + GetString(n, "name") + " can run " + location
                   : "NO: node " + GetString(n, "name") + ": " + GetString(n, "reason")) +
               "\n";
      }
      if (out.empty()) out = "NO: the pool has no nodes yet\n";
      Print(rt, out);
    }
    if (!runnable) ctx.exit_code = kExitFailure;
    return Status::Ok();
  }();
  Report(rt, s);
  return ctx.exit_code;
}

}  // namespace gpupool::cli
