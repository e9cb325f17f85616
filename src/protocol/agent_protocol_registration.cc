// The agent's registration (POST /v1/agent/register) on the wire: apart from
// agent_protocol.cc, which holds the other messages.
#include <algorithm>
#include <tuple>

#include "gpu/node_json.h"
#include "protocol/agent_protocol.h"

namespace gpupool::protocol {
namespace {

// As agent_protocol.cc's: readers ignore fields they do not know; a job has at most
// this many tasks.
constexpr bool kRegistrationLenient = false;
constexpr int kRegistrationMaxTasks = 4096;

}  // namespace

OrderedJson EncodeRegistration(const Registration& r) {
  OrderedJson j;
  j["protocol"] = VersionString(r.version);
  j["node"] = r.node;
  if (!r.agent_id.empty()) j["agent_id"] = r.agent_id;
  if (!r.address.empty()) j["address"] = r.address;
  j["info"] = gpu::NodeToJson(r.info);
  j["cpu_milli"] = r.cpu_milli;
  j["memory_mib"] = r.memory_mib;
  auto tasks = [](const std::vector<RunningTask>& list) {
    OrderedJson out = OrderedJson::array();
    for (const RunningTask& t : list) {
      out.push_back({{"job_id", t.job_id}, {"task_index", t.task_index}, {"attempt", t.attempt}});
    }
    return out;
  };
  j["running"] = tasks(r.running);
  if (!r.ended.empty()) j["ended"] = tasks(r.ended);
  if (r.health_pending) j["health_pending"] = true;
  return j;
}

Result<Registration> DecodeRegistration(const Json& j) {
  Registration r;
  std::string version;
  JsonFields f(j, "", kRegistrationLenient);
  f.Optional("protocol", &version);
  f.Optional("node", &r.node);
  f.Optional("agent_id", &r.agent_id);
  f.Optional("address", &r.address);
  f.Optional("cpu_milli", &r.cpu_milli, 0);
  f.Optional("memory_mib", &r.memory_mib, 0);
  f.Optional("health_pending", &r.health_pending);
  const Json* info = f.Member("info");
  const Json* running = f.Array("running");
  const Json* ended = f.Array("ended");
  GP_RETURN_IF_ERROR(f.Finish());
  if (version.empty()) {
    return Status::FailedPrecondition(
        "protocol: missing; this agent predates the versioned agent protocol (" +
        VersionString(kVersion) + "): upgrade gpupool on the node");
  }
  GP_ASSIGN_OR_RETURN(r.version, ParseVersion(version));
  if (r.agent_id.size() > 128 || std::any_of(r.agent_id.begin(), r.agent_id.end(),
                                             [](char c) { return c < 0x21 || c > 0x7e; })) {
    return Status::InvalidArgument("agent_id: at most 128 printable ASCII characters");
  }
  if (r.address.size() > 253) return Status::InvalidArgument("address: longer than 253 bytes");
  if (info == nullptr) return Status::InvalidArgument("info: required (the node's GPUs)");
  GP_ASSIGN_OR_RETURN(r.info, gpu::NodeFromJson(*info, "info", /*reject_unknown=*/false));
  for (auto [list, name, out] :
       {std::tuple{running, "running", &r.running}, std::tuple{ended, "ended", &r.ended}}) {
    if (list == nullptr) continue;
    for (size_t i = 0; i < list->size(); ++i) {
      RunningTask t;
      JsonFields rf((*list)[i], std::string(name) + "[" + std::to_string(i) + "]",
                    kRegistrationLenient);
      rf.Required("job_id", &t.job_id, 1);
      rf.Optional("task_index", &t.task_index, 0, kRegistrationMaxTasks - 1);
      rf.Required("attempt", &t.attempt, 0);
      GP_RETURN_IF_ERROR(rf.Finish());
      out->push_back(t);
    }
  }
  return r;
}

OrderedJson EncodeAgentIdRefusal(const std::string& why) {
  OrderedJson j;
  j["error"] = why;
  j["refused"] = "agent_id";
  return j;
}

bool IsAgentIdRefusal(const Json& j) {
  if (!j.is_object()) return false;
  auto it = j.find("refused");
  return it != j.end() && it->is_string() && it->get<std::string>() == "agent_id";
}

}  // namespace gpupool::protocol
