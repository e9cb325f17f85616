#!/usr/bin/env python3
"""Gangs of GPU shares end to end (red team 7, finding 3; docs/sharing.md, "Gangs of
shares"): a real `gpupool up` on the fake 8-GPU node examples/nodes/nvidia-8xh100.json.

Checked: `--tasks 4 --gpu-share 0.25` (every task runs the command, RANK 0..3 for
init_process_group("nccl"), which refuses two ranks on one device) gives its four tasks
four distinct GPUs, each task told its own CUDA_VISIBLE_DEVICES; it used to put all four
on GPU 0. A gang with more shares than the pool has GPUs is refused at submission with
the reason. An --mpi gang of shares, held for mpirun (one launch per node holds every GPU
of its tasks there), still packs: its tasks are on one GPU, which task 0's launch holds
whole (exclusive). On MIG, a gang's shares take instances of different physical GPUs
(NCCL takes two instances of one GPU for one device: they share its PCI bus id).

Usage: gang_shares_pool_test.py PATH_TO_GPUPOOL
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
from pooltest import wait_for  # noqa: E402
NODE = os.path.join(HERE, "..", "..", "examples", "nodes", "nvidia-8xh100.json")
# GPU 0 in MIG mode (3g.40gb, 2g.20gb, two 1g.10gb), GPU 1 not.
MIG_NODE = os.path.join(HERE, "..", "..", "examples", "nodes", "nvidia-a100-mig.json")

# Each task records its environment and waits for the test's go file.
JOB = ('env | grep -E "^(CUDA_VISIBLE|GPUPOOL_GPU|RANK=|WORLD_SIZE=)" | sort '
       '> "$OUT/$GPUPOOL_JOB_ID.$GPUPOOL_TASK_INDEX.env.tmp"; '
       'mv "$OUT/$GPUPOOL_JOB_ID.$GPUPOOL_TASK_INDEX.env.tmp" '
       '"$OUT/$GPUPOOL_JOB_ID.$GPUPOOL_TASK_INDEX.env"; '
       'while [ ! -e "$OUT/go-all" ]; do sleep 0.05; done')


class PoolCase(unittest.TestCase):
    """A pool on `node`, and helpers; the tests are its subclasses'."""
    node = NODE

    def setUp(self):
        self.pool = pooltest.FakeNodePool(GPUPOOL, self.node, "gp-gangshare-")
        self.dir, self.out = self.pool.dir, self.pool.out
        self.cli, self.server_log, self.job = self.pool.cli, self.pool.server_log, self.pool.job

    def tearDown(self):
        self.pool.stop()

    def submit(self, *args):
        return self.cli("submit", "--cpus", "0.1", "-D", self.dir, "--env", "OUT=" + self.out,
                        *args, "--", "sh", "-c", JOB)

    def started(self, *args):
        r = self.submit(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        jid = int(r.stdout.split()[-1])
        return jid, pooltest.wait_job(self.job, jid, ("RUNNING",), 30, log=self.server_log)

    def task_env(self, jid, task):
        path = os.path.join(self.out, "%d.%d.env" % (jid, task))
        wait_for("task %d of job %d's environment" % (task, jid), lambda: os.path.exists(path))
        with open(path) as f:
            return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)

    def cli_json(self, *args):
        r = self.cli(*args, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)


class GangSharesPoolTest(PoolCase):
    def test_each_share_of_a_gang_gets_a_gpu_of_its_own(self):
        jid, j = self.started("--tasks", "4", "--gpu-share", "0.25")
        gpus = [tuple(p["gpu_uuids"]) for p in j["placement"]]
        self.assertEqual(len(gpus), 4)
        self.assertTrue(all(len(g) == 1 for g in gpus), gpus)
        self.assertEqual(len(set(gpus)), 4, gpus)
        envs = [self.task_env(jid, t) for t in range(4)]
        self.assertEqual(sorted(e["RANK"] for e in envs), ["0", "1", "2", "3"])
        self.assertEqual(len({e["CUDA_VISIBLE_DEVICES"] for e in envs}), 4, envs)
        for e in envs:
            self.assertEqual(e["WORLD_SIZE"], "4")
            self.assertEqual(e["GPUPOOL_GPU_MILLI"], "250")
            self.assertNotEqual(e["GPUPOOL_GPU_ENFORCEMENT"], "exclusive")

    def test_a_gang_with_more_shares_than_gpus_is_refused(self):
        r = self.submit("--tasks", "9", "--gpu-share", "0.25")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("its 9 tasks with a GPU share each need a GPU of their own", r.stderr)
        self.assertIn("have 8 GPUs in all", r.stderr)

    def test_an_mpi_gang_of_shares_still_packs(self):
        jid, j = self.started("--tasks", "4", "--gpu-share", "0.25", "--mpi")
        gpus = {tuple(p["gpu_uuids"]) for p in j["placement"]}
        self.assertEqual(len(gpus), 1, j["placement"])
        e = self.task_env(jid, 0)
        self.assertEqual(e["CUDA_VISIBLE_DEVICES"], next(iter(gpus))[0])
        self.assertEqual(e["GPUPOOL_GPU_ENFORCEMENT"], "exclusive")



class GangSharesOnMigPoolTest(PoolCase):
    node = MIG_NODE

    def test_a_gangs_shares_take_instances_of_different_gpus(self):
        mig_gpu, plain = self.cli_json("nodes")["nodes"][0]["gpus"]
        instances = {m["uuid"] for m in mig_gpu["mig_devices"]}
        jid, j = self.started("--tasks", "2", "--gpu-mem", "5G")
        got = [p["gpu_uuids"][0] for p in j["placement"]]
        # One on an instance of GPU 0 (the smallest, 1g.10gb), the other off GPU 0: two
        # instances of GPU 0 were what a gang got before.
        self.assertEqual(sum(u in instances for u in got), 1, got)
        self.assertIn(plain["uuid"], got)
        # Two physical GPUs: three shares can never run here.
        r = self.submit("--tasks", "3", "--gpu-mem", "5G")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("the nodes that could host them have 2 GPUs in all", r.stderr)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
