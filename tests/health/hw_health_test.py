#!/usr/bin/env python3
"""The hardware health thresholds end to end (issue 29, docs/health.md): a `gpupool up` on a
fake 4-GPU node whose scripted telemetry (docs/node-schema.md), sampled every second, says
GPU 1 failed a row remapping, GPU 2 slows its clocks down (HW slowdown) and GPU 3 counts 3
uncorrected ECC errors. With no health program, the policy's threshold rows must cordon
GPUs 1 and 3 and make GPU 2 suspect (`gpupool nodes` says so); then a 2-GPU job must run on
GPUs 0 and 2 only, and a 3-GPU job must wait.

Usage: hw_health_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
from pooltest import wait_for  # noqa: E402
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")


class HardwareHealthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pooltest.make_test_dir("gp-hwhealth-")
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(cls.dir, "gpupool.sock"))
        with open(NODE) as f:
            node = json.load(f)
        faults = {1: {"remapped_rows_failed": 1, "remapped_rows": 5},
                  2: {"hw_slowdown": 1},
                  3: {"ecc_uncorrected": 3}}
        node["telemetry"] = {"step_s": 1, "gpus": {
            str(g["index"]): dict({"util_pct": [10], "remapped_rows_failed": 0, "hw_slowdown": 0,
                                   "ecc_uncorrected": 0}, **faults.get(g["index"], {}))
            for g in node["gpus"]}}
        node_file = os.path.join(cls.dir, "node.json")
        with open(node_file, "w") as f:
            json.dump(node, f)
        cls.log = os.path.join(cls.dir, "server.log")
        with open(cls.log, "ab") as log:
            cls.pool = subprocess.Popen(
                [GPUPOOL, "up", "--state-dir", cls.dir, "--port", "0", "--config", "",
                 "--fake", node_file, "--telemetry-interval", "1"],
                stdout=log, stderr=log, start_new_session=True)

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes([cls.pool])
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def cli(cls, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True,
                              env=cls.env, timeout=60)

    @classmethod
    def server_log(cls):
        with open(cls.log, errors="replace") as f:
            return f.read()[-4000:]

    def job(self, jid):
        r = self.cli("show", str(jid), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        return j.get("job", j)

    def submit(self, *args):
        r = self.cli("submit", "-D", self.dir, *args)  # output files there
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def test_each_row_moves_its_gpu_and_no_job_lands_on_a_cordoned_one(self):
        def health():
            out = self.cli("nodes").stdout
            return out if "GPU 3: cordoned" in out and "GPU 1: cordoned" in out else None
        nodes = wait_for("GPUs 1 and 3 cordoned (" + self.server_log() + ")", health, 30)
        self.assertRegex(nodes, r"GPU 1: cordoned: remapped-rows-failed")
        self.assertRegex(nodes, r"GPU 2: suspect: hw-slowdown")
        self.assertRegex(nodes, r"GPU 3: cordoned: ecc-uncorrected: .*3 \(cordon at 3\)")
        self.assertNotIn("GPU 0:", nodes)
        two = self.submit("--gpus", "2", "--", "sleep", "300")
        three = self.submit("--gpus", "3", "--", "sleep", "300")
        running = pooltest.wait_job(self.job, two, ("RUNNING",), 30, log=self.server_log)
        self.assertEqual(sorted(running["placement"][0]["gpu_indices"]), [0, 2])
        self.assertEqual(self.job(three)["state"], "PENDING")
        self.cli("cancel", str(two))
        self.cli("cancel", str(three))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("hw_health_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
