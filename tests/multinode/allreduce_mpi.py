"""One rank of an MPI all-reduce (mpi4py) for gpupool's multi-node tests
(tests/multinode/multinode_test.py), started by mpirun in task 0 of a `--mpi` job:
    mpirun --hostfile $GPUPOOL_HOSTFILE -np 3 python3 allreduce_mpi.py
mpirun starts its daemon (orted) for each host of the host file through its rsh agent,
OMPI_MCA_plm_rsh_agent = `gpupool exec`, which runs it inside that host's task; the
ranks inherit the task's environment, so GPUPOOL_TASK_INDEX tells where each ran.

Every rank all-reduces rank + 1 and prints one line:
    rank R of W (task T): sum S host H gpus G local L uses U
where S = W*(W+1)/2, T is GPUPOOL_TASK_INDEX, H is GPUPOOL_TASK_HOST (set by the
stand-in agent of manual experiments; '-' otherwise), G the CUDA_VISIBLE_DEVICES it
inherited ('-' when empty), L its OMPI_COMM_WORLD_LOCAL_RANK and U the GPU it would use:
entry L modulo their number of G, the selection docs/cli.md ("Multi-node jobs") shows.
"""
import os
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1)
gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
uses = gpus[local % len(gpus)] if gpus else "-"
sys.stdout.write("rank %d of %d (task %s): sum %d host %s gpus %s local %d uses %s\n" % (
    rank, world, os.environ.get("GPUPOOL_TASK_INDEX", "?"), total,
    os.environ.get("GPUPOOL_TASK_HOST", "-"), ",".join(gpus) or "-", local, uses))
sys.stdout.flush()
sys.exit(0 if total == world * (world + 1) // 2 else 1)
