// Who runs a node (docs/deploy.md, "One daemon per state directory"): the check that
// tells a restart of the node's own agent from a second agent under its name. Pure: the
// caller passes what it knows of the node's current agent and the time.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpupool::controller::internal {

// The node's current agent, as far as a registration under its name is concerned.
struct CurrentAgent {
  std::string id;  // "": an agent that sent none (or stored before ids were)
  std::string address;
  int64_t last_seen_us = 0;  // its last poll, or the controller's load of the store
  bool up = false;           // not timed out
  bool heard = false;        // polled since the controller loaded the store
};

// A second agent under a node's name (a cloned machine, a copied command line) is not a
// restart of the first: taken for one, it would have the first agent's running jobs
// declared lost and both would poll as one node. Refused while the first is up and polled
// within the node timeout, and after a controller's restart (the id is stored) until the
// node timeout from the load has passed without it; a node whose agent died may be taken
// over (a reinstalled machine); an agent that sends no id (older) is taken as before.
Status CheckAgentIdentity(const std::string& node, const CurrentAgent& current,
                          const std::string& id, int64_t now_us, int64_t node_timeout_us);

// The IP address of an agent's connection, "1.2.3.4:5678" or "[::1]:5678"; "" for "unix"
// and the unknown.
std::string RemoteIp(const std::string& remote);

}  // namespace gpupool::controller::internal
