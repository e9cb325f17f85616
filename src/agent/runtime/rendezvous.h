// Rendezvous: the variables and the host file that let the tasks of one job find each
// other (docs/cli.md, "Multi-node jobs"). Made on the node from the launch order's
// protocol::Rendezvous, so every task of a job sees the same hosts and port.
//
//   GPUPOOL_TASK_INDEX, GPUPOOL_NUM_TASKS, GPUPOOL_NODES (hosts in task order, commas),
//   GPUPOOL_HOSTFILE ("HOST slots=G" per task, G its GPUs and at least 1; tasks on one
//     host share a line with their slots added, as Open MPI requires; Horovod reads it too),
//   PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT
//     (torchrun reads its options from PET_*: `torchrun train.py` is the whole command),
//   MASTER_ADDR, MASTER_PORT, WORLD_SIZE (tasks), RANK (task index) for programs that
//     start one process per task and call init_process_group("env://"),
//   OMPI_MCA_plm_rsh_agent = gpupool exec (the slim gpupool-exec binary when it is
//     installed): mpirun starts its remote daemons through gpupool instead of ssh, and
//     GPUPOOL_SERVER for that exec to reach the controller.
// Pure functions except PickFreePort.
#pragma once

#include <map>
#include <string>

#include "common/status.h"
#include "protocol/agent_protocol.h"

namespace gpupool::agent {

struct RendezvousContext {
  std::string hostfile_path;  // where the task's host file is written
  std::string exec_agent;     // OMPI_MCA_plm_rsh_agent: "DIR/gpupool-exec" or "gpupool exec"
  std::string server;         // how jobs reach the controller (GPUPOOL_SERVER); "" = unset
  bool mpi = false;           // a --mpi job: mpirun starts the ranks (no LOCAL_RANK)
};

std::map<std::string, std::string> RendezvousEnv(const protocol::Rendezvous& r,
                                                 const RendezvousContext& c);

// "HOST slots=G" lines in task order, one per distinct host.
std::string HostfileText(const protocol::Rendezvous& r);

// A TCP port free on every address of this machine now (the kernel's choice for a bind
// to port 0), for task 0's rendezvous; the job binds it moments later.
Result<int> PickFreePort();

}  // namespace gpupool::agent
