#!/usr/bin/env python3
"""GPU health end to end (issue 29, docs/health.md): a `gpupool up` on a fake 4-GPU node
whose GPU 1 reports Xid 95 (uncontained ECC error, reset-class) 8 s after the pool
starts, through the fake node's scripted telemetry (docs/node-schema.md), with a 60 s
telemetry interval: the agent's Xid watch sends the Xid at once, not with the next
round. A job holding all four GPUs must end FAILED naming the Xid within 10 s of it, GPU 1
must be shown cordoned by `gpupool nodes`, a job asking for four GPUs must then wait,
naming the cordoned GPU in its pending reason, and one asking for three must run on the
others.

Usage: health_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
XID_IN_S = 8  # seconds from the pool's start to GPU 1's Xid 95


class HealthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pooltest.make_test_dir("gp-health-")
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(cls.dir, "gpupool.sock"))
        with open(NODE) as f:
            node = json.load(f)
        # The fake's series are indexed by wall time (value at t: series[t % n]): GPU 1's
        # Xid starts XID_IN_S seconds from now, once the job below runs, and stays for
        # 300 s (its count at 1) before the series wraps round.
        n = 600
        cls.xid_at = int(time.time()) + XID_IN_S
        first = cls.xid_at % n
        on = [((i - first) % n) < 300 for i in range(n)]
        gpus = {}
        for g in node["gpus"]:
            bad = g["index"] == 1
            gpus[str(g["index"])] = {
                "util_pct": [50],
                "xid_errors": [95 if bad and o else 0 for o in on],
                "xid_count": [1 if bad and o else 0 for o in on]}
        node["telemetry"] = {"step_s": 1, "gpus": gpus}
        node_file = os.path.join(cls.dir, "node.json")
        with open(node_file, "w") as f:
            json.dump(node, f)
        cls.log = os.path.join(cls.dir, "server.log")
        log = open(cls.log, "ab")
        cls.pool = subprocess.Popen([GPUPOOL, "up", "--state-dir", cls.dir, "--port", "0",
                                     "--fake", node_file, "--telemetry-interval", "60"],
                                    stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 30
        while " up " not in cls.cli("nodes").stdout:
            if time.time() > deadline:
                raise AssertionError("the pool did not come up: " + cls.server_log())
            time.sleep(0.1)

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

    @classmethod
    def job(cls, jid):
        r = cls.cli("show", str(jid), "--json")
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        return j.get("job", j)

    def submit(self, *args):
        r = self.cli("submit", "-D", self.dir, *args)  # output files there
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def test_a_reset_class_xid_fails_the_job_and_cordons_only_that_gpu(self):
        whole = self.submit("--gpus", "4", "--", "sleep", "300")
        pooltest.wait_job(self.job, whole, ("RUNNING",), 30, log=self.server_log)
        self.assertLess(time.time(), self.xid_at, "the job started after the Xid: too slow")
        failed = pooltest.wait_job(self.job, whole, ("FAILED",), XID_IN_S + 15,
                                   log=self.server_log)
        self.assertIn("Xid 95", failed["reason"])
        self.assertIn("uncontained ECC error", failed["reason"])
        # Issue 29 item 3: from the event to the job's end in at most 10 s, with a 60 s
        # telemetry interval (the default is 5 s): the Xid does not wait for a round.
        took = failed["end_time_us"] / 1e6 - self.xid_at
        print("job FAILED %.2f s after the Xid" % took, file=sys.stderr)
        self.assertLessEqual(took, 10)
        nodes = self.cli("nodes")
        self.assertEqual(nodes.returncode, 0, nodes.stderr)
        self.assertRegex(nodes.stdout, r"GPU 1: cordoned: Xid 95")
        self.assertIn(" up ", nodes.stdout)  # the node's other GPUs keep working
        # `node show` has the GPU's whole health record: who, since when, its strike.
        shown = self.cli("node", "show", "vm")
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertRegex(shown.stdout, r"GPU 1 \(GPU-[^)]*\): cordoned since \S+ by policy: "
                                       r"Xid 95: uncontained ECC error.*strikes 1 of 3")
        missing = self.cli("node", "show", "nosuchnode")
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("no node 'nosuchnode'", missing.stderr)
        # Four GPUs no longer fit; three do, on the healthy ones.
        four = self.submit("--gpus", "4", "--", "sleep", "300")
        three = self.submit("--gpus", "3", "--", "sleep", "300")
        running = pooltest.wait_job(self.job, three, ("RUNNING",), 30, log=self.server_log)
        self.assertNotIn(1, running["placement"][0]["gpu_indices"])
        waiting = self.job(four)
        self.assertEqual(waiting["state"], "PENDING")
        # Its pending reason names the GPU out of service that keeps it waiting.
        self.assertRegex(waiting.get("pending_reason", ""),
                         r"node vm: GPU 1 \(GPU-[^)]*\) cordoned: Xid 95: uncontained ECC error")
        # An admin puts GPU 1 back in service: the four-GPU job runs once the other ends.
        self.assertEqual(self.cli("cancel", str(three)).returncode, 0)
        r = self.cli("node", "resume", "vm", "--gpu", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("GPU 1 takes new jobs again", r.stdout)
        pooltest.wait_job(self.job, four, ("RUNNING",), 30, log=self.server_log)
        self.assertNotIn("GPU 1: cordoned", self.cli("nodes").stdout)
        self.cli("cancel", str(four))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("health_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
