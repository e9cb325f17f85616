#include "agent/runtime/rendezvous.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace gpupool::agent {

std::map<std::string, std::string> RendezvousEnv(const protocol::Rendezvous& r,
                                                 const RendezvousContext& c) {
  std::map<std::string, std::string> env;
  const std::string index = std::to_string(r.task_index);
  const std::string tasks = std::to_string(r.num_tasks);
  std::string nodes;
  for (const std::string& h : r.hosts) nodes += (nodes.empty() ? "" : ",") + h;
  const std::string master = r.hosts.empty() ? std::string("127.0.0.1") : r.hosts.front();
  const int slots = static_cast<size_t>(r.task_index) < r.slots.size()
                        ? std::max(1, r.slots[static_cast<size_t>(r.task_index)])
                        : 1;
  env["GPUPOOL_TASK_INDEX"] = index;
  env["GPUPOOL_NUM_TASKS"] = tasks;
  env["GPUPOOL_NODES"] = nodes;
  if (!c.hostfile_path.empty()) env["GPUPOOL_HOSTFILE"] = c.hostfile_path;
  env["PET_NNODES"] = tasks;
  env["PET_NODE_RANK"] = index;
  env["PET_NPROC_PER_NODE"] = std::to_string(slots);
  env["PET_MASTER_ADDR"] = master;
  env["MASTER_ADDR"] = master;
  env["WORLD_SIZE"] = tasks;
  env["RANK"] = index;
  if (!c.mpi) {
    // A task sees only its own GPUs and is torchrun's "node" (PET_NODE_RANK): a process
    // it starts directly, one per task, is local rank 0 of 1, so the usual
    // torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) picks the task's first GPU.
    // torchrun in the task gives its workers their own. Not for --mpi: mpirun's ranks
    // have OMPI_COMM_WORLD_LOCAL_RANK, and a LOCAL_RANK of 0 inherited by every rank on
    // a host would send them all to one GPU.
    env["LOCAL_RANK"] = "0";
    env["LOCAL_WORLD_SIZE"] = "1";
  }
  if (r.master_port > 0) {
    env["PET_MASTER_PORT"] = std::to_string(r.master_port);
    env["MASTER_PORT"] = std::to_string(r.master_port);
  }
  if (!c.exec_agent.empty()) env["OMPI_MCA_plm_rsh_agent"] = c.exec_agent;
  if (!c.server.empty()) env["GPUPOOL_SERVER"] = c.server;
  return env;
}

std::string HostfileText(const protocol::Rendezvous& r) {
  // Open MPI refuses a host named on two lines with slot counts, so tasks that share a
  // host share its line, their slots added.
  std::vector<std::pair<std::string, int>> lines;
  for (size_t t = 0; t < r.hosts.size(); ++t) {
    const int slots = t < r.slots.size() ? std::max(1, r.slots[t]) : 1;
    auto same = std::find_if(lines.begin(), lines.end(),
                             [&](const auto& l) { return l.first == r.hosts[t]; });
    if (same != lines.end()) {
      same->second += slots;
    } else {
      lines.emplace_back(r.hosts[t], slots);
    }
  }
  std::string text;
  for (const auto& [host, slots] : lines) text += host + " slots=" + std::to_string(slots) + "\n";
  return text;
}

Result<int> PickFreePort() {
  // IPv6 with v4 mapped: free on every address of both families.
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(std::string("socket: ") + std::strerror(errno));
  int rc = 0;
  if (v6) {
    int off = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (rc != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::Unavailable(std::string("cannot find a free port: ") + std::strerror(err));
  }
  ::close(fd);
  const int port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return port;
}

}  // namespace gpupool::agent
