"""One rank of a CPU (gloo) all-reduce for gpupool's multi-node tests
(tests/multinode/multinode_test.py).

With torchrun, in every task of a job:
    gpupool submit --tasks 3 --gpus 2 -- python3 -m torch.distributed.run allreduce.py
torchrun takes its whole configuration from the PET_* variables gpupool sets
(PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT: the
'static' rendezvous, node rank 0 serving the store on PET_MASTER_PORT) and this program
from the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK, MASTER_*).
Debian 12's torchrun also needs PET_REDIRECTS=2 PET_TEE=2: its defaults (0) crash it
under Python 3.11 ('NoneType' object has no attribute 'get').

Without torchrun, one process per task (`-- python3 allreduce.py`), it reads gpupool's
own MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK instead (init_method env://).

Every rank all-reduces tensor([rank + 1]) and prints one line:
    rank R of W (task T): sum S local_rank L node_rank N
where S = W*(W+1)/2, T is GPUPOOL_TASK_INDEX, and L, N are torchrun's LOCAL_RANK and
GROUP_RANK ('-' without torchrun).
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    env = os.environ.get
    # One write per line: ranks of a node share the terminal.
    sys.stdout.write("rank %d of %d (task %s): sum %d local_rank %s node_rank %s\n" % (
        rank, world, env("GPUPOOL_TASK_INDEX", "?"), int(t.item()), env("LOCAL_RANK", "-"),
        env("GROUP_RANK", "-")))
    sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    return 0 if int(t.item()) == world * (world + 1) // 2 else 1


if __name__ == "__main__":
    sys.exit(main())
