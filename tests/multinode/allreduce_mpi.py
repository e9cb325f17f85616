"""One rank of an MPI all-reduce (mpi4py) for gpupool's multi-node tests
(tests/multinode/multinode_test.py), started by mpirun in task 0 of a `--mpi` job:
    mpirun --hostfile $GPUPOOL_HOSTFILE -np 3 python3 allreduce_mpi.py
mpirun starts its daemon (orted) for each host of the host file through its rsh agent,
OMPI_MCA_plm_rsh_agent = `gpupool exec`, which runs it inside that host's task; the
ranks inherit the task's environment, so GPUPOOL_TASK_INDEX tells where each ran.

Every rank all-reduces rank + 1 and prints one line:
    rank R of W (task T): sum S host H
where S = W*(W+1)/2, T is GPUPOOL_TASK_INDEX and H is GPUPOOL_TASK_HOST (set by the
stand-in agent of manual experiments; '-' otherwise).
"""
import os
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1)
sys.stdout.write("rank %d of %d (task %s): sum %d host %s\n" % (
    rank, world, os.environ.get("GPUPOOL_TASK_INDEX", "?"), total,
    os.environ.get("GPUPOOL_TASK_HOST", "-")))
sys.stdout.flush()
sys.exit(0 if total == world * (world + 1) // 2 else 1)
