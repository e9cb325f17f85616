"""One rank of a CPU (gloo) all-reduce, started by torchrun in every task of a gpupool
job: `gpupool submit --tasks 3 --gpus 2 -- python3 -m torch.distributed.run allreduce.py`.
torchrun takes its whole configuration from the PET_* variables gpupool sets, and this
program from the variables torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR/PORT).

Started once per task without torchrun (`-- python3 allreduce.py`), the same program
reads gpupool's own MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK instead.

Prints one line per rank, which tests/multinode/multinode_test.py checks:
    rank R of W (task T): sum S
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
    print("rank %d of %d (task %s): sum %d" % (rank, world, os.environ.get("GPUPOOL_TASK_INDEX", "?"),
                                             int(t.item())), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
