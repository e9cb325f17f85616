#!/usr/bin/env python3
"""AMD partitions and advisory CU masks end to end (issue 28 item 4, docs/sharing.md "AMD
GPUs"): a real `gpupool up` on the fake node examples/nodes/amd-mi300x-cpx.json, one
MI300X in CPX/NPS4, so eight partitions of 38 CUs, each listed as a GPU of its own.

Checked: every view shows the partitioning; a whole-GPU job (7 partitions) is told
"exclusive" and gets no CU mask; two shares then land on the one partition left, are told
"none" (a CU mask is no enforcement) and get disjoint HSA_CU_MASKs of their size, the
pool's mask replacing one the user passed; `gpupool show` says "none" as well.

Usage: amd_pool_test.py PATH_TO_GPUPOOL
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
from pooltest import read_env  # noqa: E402
NODE = os.path.join(HERE, "..", "..", "examples", "nodes", "amd-mi300x-cpx.json")

# A job that records its environment and waits for the test's go file.
JOB = ('env | grep -E "^(HSA_|ROCR_|HIP_|GPUPOOL_GPU)" | sort > "$OUT/$GPUPOOL_JOB_ID.env"; '
       'while [ ! -e "$OUT/go-all" ]; do sleep 0.05; done')


def cus(mask):
    """The CU numbers of an HSA_CU_MASK "0:<list>" for device 0."""
    device, _, cu_list = mask.partition(":")
    assert device == "0", mask
    out = set()
    for part in cu_list.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


class AmdPoolTest(unittest.TestCase):
    def setUp(self):
        self.pool = pooltest.FakeNodePool(GPUPOOL, NODE, "gp-amd-")
        self.dir, self.out = self.pool.dir, self.pool.out
        self.cli, self.server_log, self.job = self.pool.cli, self.pool.server_log, self.pool.job

    def tearDown(self):
        self.pool.stop()

    def running(self, *args):
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, "--env", "OUT=" + self.out,
                     *args, "--", "sh", "-c", JOB)
        self.assertEqual(r.returncode, 0, r.stderr)
        jid = int(r.stdout.split()[-1])
        pooltest.wait_job(self.job, jid, ("RUNNING",), 30, log=self.server_log)
        return jid, read_env(self.out, jid)

    def test_partitions_are_gpus_and_shares_get_disjoint_advisory_cu_masks(self):
        node = json.loads(self.cli("nodes", "--json").stdout)["nodes"][0]
        self.assertEqual(len(node["gpus"]), 8)
        for g in node["gpus"]:
            self.assertEqual((g["compute_partition"], g["memory_partition"], g["compute_units"]),
                             ("CPX", "NPS4", 38), g)
            self.assertEqual(g["enforcement"], "none")
        listing = "AMD partitions, each scheduled as a GPU of its own (docs/sharing.md):\n"
        text = self.cli("nodes").stdout
        self.assertIn(listing + node["name"] + " GPUs 0-7: CPX, NPS4, 38 CUs\n", text)
        self.assertIn(listing, self.cli("node", "show", node["name"]).stdout)

        whole, ew = self.running("--gpus", "7")
        self.assertEqual(ew["GPUPOOL_GPU_ENFORCEMENT"], "exclusive")
        self.assertNotIn("HSA_CU_MASK", ew)
        held = set(ew["ROCR_VISIBLE_DEVICES"].split(","))
        free = [g["uuid"] for g in node["gpus"] if g["uuid"] not in held]
        self.assertEqual(len(free), 1, ew)

        # Both shares go to the one partition left; the pool's mask replaces the user's.
        a, ea = self.running("--gpu-share", "0.5", "--env", "HSA_CU_MASK=0:0-37")
        b, eb = self.running("--gpu-share", "0.25")
        for env in (ea, eb):
            self.assertEqual(env["ROCR_VISIBLE_DEVICES"], free[0])
            self.assertEqual(env["GPUPOOL_GPU_ENFORCEMENT"], "none")
        self.assertEqual(ea["HSA_CU_MASK"], "0:0-18")  # 19 of 38 CUs, the lowest
        self.assertEqual(len(cus(eb["HSA_CU_MASK"])), 9)  # 0.25 of 38, rounded down
        self.assertFalse(cus(ea["HSA_CU_MASK"]) & cus(eb["HSA_CU_MASK"]), (ea, eb))
        self.assertEqual(self.job(a)["gpu_enforcement"], "none")
        self.assertEqual(self.job(whole)["gpu_enforcement"], "exclusive")


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
