#!/usr/bin/env python3
"""MIG instances as schedulable devices end to end (issue 28 item 1, docs/sharing.md): a
real `gpupool up` on the fake node examples/nodes/nvidia-a100-mig.json: GPU 0 is in MIG
mode, cut into 3g.40gb, 2g.20gb and two 1g.10gb instances; GPU 1 is not.

Checked: GPU 0 states enforcement "mig" and lists its instances; a whole-GPU job takes
GPU 1 and a second one waits (a GPU in MIG mode takes shares only); a `--gpu-mem 10G`
share gets the smallest instance that holds 10 GiB (2g.20gb: a 1g.10gb has 9.5 GiB) and
runs with its MIG- UUID, `GPUPOOL_GPU_ENFORCEMENT=mig` and the instance's memory as its
cap; a second share gets another instance (a 1g.10gb), never the one held; a share
larger than the largest instance waits, saying so; `gpupool nodes`, `gpupool node` and
`gpupool show` name the instances and who holds them (an array's element as ARRAY_INDEX);
a share is charged its instance's part of the GPU (`charged_milli`, `show`), not its ask.

Usage: mig_pool_test.py PATH_TO_GPUPOOL
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
from pooltest import read_env, wait_for  # noqa: E402
NODE = os.path.join(HERE, "..", "..", "examples", "nodes", "nvidia-a100-mig.json")

# A job that records its environment and waits for the test's go file.
JOB = ('env | grep -E "^(CUDA_|NVIDIA_|GPUPOOL_GPU)" | sort > "$OUT/$GPUPOOL_JOB_ID.env"; '
       'while [ ! -e "$OUT/go-$GPUPOOL_JOB_ID" ] && [ ! -e "$OUT/go-all" ]; do sleep 0.05; done')


class MigPoolTest(unittest.TestCase):
    def setUp(self):
        self.pool = pooltest.FakeNodePool(GPUPOOL, NODE, "gp-mig-")
        self.dir, self.out = self.pool.dir, self.pool.out
        self.cli, self.server_log, self.job = self.pool.cli, self.pool.server_log, self.pool.job

    def tearDown(self):
        self.pool.stop()

    def wait(self, jid, states, timeout=30):
        return pooltest.wait_job(self.job, jid, states, timeout, log=self.server_log)

    def submit(self, *args):
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, "--env", "OUT=" + self.out,
                     *args, "--", "sh", "-c", JOB)
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def wait_reason(self, jid, words):
        def reason():
            j = self.job(jid)
            self.assertEqual(j["state"], "PENDING")
            return words in j.get("pending_reason", "")
        wait_for("job %d's reason to say %r" % (jid, words), reason)
        return self.job(jid)["pending_reason"]

    def test_shares_get_whole_instances_and_whole_gpu_jobs_never_do(self):
        node = json.loads(self.cli("nodes", "--json").stdout)["nodes"][0]
        mig_gpu, plain = node["gpus"]
        self.assertEqual(mig_gpu["enforcement"], "mig")
        self.assertEqual(plain["enforcement"], "none")
        instances = {m["profile"] + "#" + str(i): m for i, m in enumerate(mig_gpu["mig_devices"])}
        self.assertEqual(sorted(m["profile"] for m in mig_gpu["mig_devices"]),
                         ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"])
        by_uuid = {m["uuid"]: m for m in instances.values()}

        whole = self.submit("--gpus", "1")
        jw = self.wait(whole, ("RUNNING",))
        self.assertEqual(jw["placement"][0]["gpu_uuids"], [plain["uuid"]])
        self.assertEqual(read_env(self.out, whole)["GPUPOOL_GPU_ENFORCEMENT"], "exclusive")

        a = self.submit("--gpu-mem", "10G")
        ja = self.wait(a, ("RUNNING",))
        ua = ja["placement"][0]["gpu_uuids"][0]
        self.assertTrue(ua.startswith("MIG-"), ja["placement"])
        self.assertEqual(by_uuid[ua]["profile"], "2g.20gb")
        self.assertEqual(ja["placement"][0]["gpu_indices"], [mig_gpu["index"]])
        ea = read_env(self.out, a)
        self.assertEqual(ea["CUDA_VISIBLE_DEVICES"], ua)
        self.assertEqual(ea["NVIDIA_VISIBLE_DEVICES"], ua)
        self.assertEqual(ea["GPUPOOL_GPU_ENFORCEMENT"], "mig")
        self.assertEqual(int(ea["GPUPOOL_GPU_MEM_LIMIT_BYTES"]), by_uuid[ua]["memory_total_bytes"])
        self.assertFalse([k for k in ea if k.startswith("CUDA_MPS")], ea)
        # `show` says how each job's GPU is held to it, as the job's environment does.
        self.assertEqual(self.job(a)["gpu_enforcement"], "mig")
        self.assertEqual(self.job(whole)["gpu_enforcement"], "exclusive")
        self.assertIn("GPU mode:   mig", self.cli("show", str(a)).stdout)

        b = self.submit("--gpu-mem", "4G")
        jb = self.wait(b, ("RUNNING",))
        ub = jb["placement"][0]["gpu_uuids"][0]
        self.assertNotEqual(ub, ua)
        self.assertEqual(by_uuid[ub]["profile"], "1g.10gb")
        self.assertEqual(read_env(self.out, b)["CUDA_VISIBLE_DEVICES"], ub)
        # Each is charged the instance it holds, its part of the GPU's memory (9728 and
        # 19968 of 81920 MiB), not its ask (4 and 10 GiB of 80: 0.05, 0.125); the job still
        # sees its share as asked.
        self.assertEqual(jb["placement"][0]["gpu_milli"], 50)
        self.assertEqual(jb["placement"][0]["charged_milli"], 118)
        self.assertEqual(ja["placement"][0]["charged_milli"], 243)
        self.assertEqual(read_env(self.out, b)["GPUPOOL_GPU_MILLI"], "50")
        self.assertIn("charged 0.118 GPU", self.cli("show", str(b)).stdout)

        # Jobs that cannot start now go last: the queue keeps its order (no time limits
        # here for backfill to go by).
        big = self.submit("--gpu-mem", "50G")
        second_whole = self.submit("--gpus", "1")
        reason = self.wait_reason(big, "no idle MIG instance has 50.0 GiB")
        self.assertIn("GPU", reason)
        self.wait_reason(second_whole, "idle GPU")

        # Every view names the instances and who holds them.
        node = json.loads(self.cli("nodes", "--json").stdout)["nodes"][0]
        held = {m["uuid"]: m.get("job") for m in node["gpus"][0]["mig_devices"]}
        self.assertEqual(held[ua], a)
        self.assertEqual(held[ub], b)
        self.assertEqual(sum(1 for j in held.values() if j is None), 2)
        text = self.cli("nodes").stdout
        self.assertIn("MIG instances, each held whole by one job:", text)
        self.assertIn("GPU 0 2g.20gb (%s): job %d" % (ua, a), text)
        self.assertIn("GPU 0 3g.40gb", text)
        self.assertIn("(%s): job %d" % (ub, b), self.cli("node", "show", node["name"]).stdout)
        self.assertIn("MIG instance held whole", self.cli("show", str(a)).stdout)

        # The instance goes back whole: a third share of 10 GiB takes A's instance again.
        for jid in (big, second_whole):
            self.assertEqual(self.cli("cancel", str(jid)).returncode, 0)
        open(os.path.join(self.out, "go-%d" % a), "w").close()
        self.assertEqual(self.wait(a, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")
        c = self.submit("--gpu-mem", "10G")
        self.assertEqual(self.wait(c, ("RUNNING",))["placement"][0]["gpu_uuids"], [ua])

        # An array's elements on the two instances left are named as their user names
        # them, ARRAY_INDEX, not by their store ids.
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, "--env", "OUT=" + self.out,
                     "--array", "0-1", "--gpu-mem", "4G", "--", "sh", "-c", JOB)
        self.assertEqual(r.returncode, 0, r.stderr)
        arr = int(r.stdout.split()[3])  # "Submitted array job N (0-1; ...)"
        wait_for("array %d's elements to run" % arr,
                 lambda: all(self.job("%d_%d" % (arr, i))["state"] == "RUNNING" for i in (0, 1)))
        node = json.loads(self.cli("nodes", "--json").stdout)["nodes"][0]
        text = self.cli("nodes").stdout
        for i in (0, 1):
            ui = self.job("%d_%d" % (arr, i))["placement"][0]["gpu_uuids"][0]
            m = [m for m in node["gpus"][0]["mig_devices"] if m["uuid"] == ui][0]
            self.assertEqual((m["array_id"], m["array_index"]), (arr, i), m)
            self.assertIn("(%s): job %d_%d\n" % (ui, arr, i), text)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
