"""One rank of an MPI all-reduce (mpi4py), started by mpirun in task 0 of a gpupool
`--mpi` job: `mpirun --hostfile $GPUPOOL_HOSTFILE -np 3 python3 allreduce_mpi.py`.
mpirun starts its daemons on the other tasks' hosts through `gpupool exec` (the
OMPI_MCA_plm_rsh_agent gpupool sets), so each rank runs inside a task's allocation.

Prints one line per rank, which tests/multinode/multinode_test.py checks:
    rank R of W (task T): sum S
"""
import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print("rank %d of %d (task %s): sum %d" % (comm.Get_rank(), comm.Get_size(),
                                         os.environ.get("GPUPOOL_TASK_INDEX", "?"), total),
      flush=True)
