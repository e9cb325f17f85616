#!/usr/bin/env python3
"""Application Xids pinned on their job's user, end to end (docs/health.md, "Whose Xid it
is"): a real `gpupool up` on a fake 2-GPU node whose both GPUs report Xid 43 (a
device-side assert, application-class) three times, 2 s apart, through the fake node's
scripted telemetry, XID_IN_S seconds after the pool starts. A one-GPU job of one user runs
on one of them throughout. That GPU's three Xids are pinned on the job's user: it must stay
healthy (before attribution it was cordoned, a strike). The other GPU's came with no job on
it: the third must cordon it, as before.

Usage: xid_owner_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
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
XID_IN_S = 12  # from now to the first Xid: the job must run by then
XID_GAP_S = 2


class XidOwnerTest(unittest.TestCase):
    def setUp(self):
        self.dir = pooltest.make_test_dir("gp-xidowner-")
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(self.dir, "gpupool.sock"))
        with open(NODE) as f:
            node = json.load(f)
        node["gpus"] = node["gpus"][:2]
        # The fake's series are indexed by wall time (value at t: series[t % n]): the count
        # steps 1, 2, 3 from xid_at, XID_GAP_S apart, and holds for the rest of 300 s.
        n = 600
        self.xid_at = int(time.time()) + XID_IN_S
        first = self.xid_at % n
        since = [(t - first) % n for t in range(n)]
        count = [0 if s >= 300 else min(3, 1 + s // XID_GAP_S) for s in since]
        gpus = {str(g["index"]): {"xid_errors": [43 if c else 0 for c in count],
                                  "xid_count": count} for g in node["gpus"]}
        node["telemetry"] = {"step_s": 1, "gpus": gpus}
        node.pop("links", None)
        node_file = os.path.join(self.dir, "node.json")
        with open(node_file, "w") as f:
            json.dump(node, f)
        self.log = os.path.join(self.dir, "server.log")
        with open(self.log, "ab") as log:
            self.pool = subprocess.Popen(
                [GPUPOOL, "up", "--state-dir", self.dir, "--port", "0", "--config", "", "--fake",
                 node_file, "--telemetry-interval", "60", "--health-breaker", "1"],
                stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 30
        while " up " not in self.cli("nodes").stdout:
            if time.time() > deadline or self.pool.poll() is not None:
                raise AssertionError("the pool did not come up: " + self.server_log())
            time.sleep(0.1)

    def tearDown(self):
        pooltest.stop_processes([self.pool])
        pooltest.kill_leftovers(self.dir)
        pooltest.remove_dir(self.dir)

    def cli(self, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True,
                              env=self.env, timeout=60)

    def server_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]

    def job(self, jid):
        r = self.cli("show", str(jid), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        return j.get("job", j)

    def states(self):
        r = self.cli("nodes", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        node = json.loads(r.stdout)["nodes"][0]
        return {g["index"]: g.get("health", {}).get("state", "healthy") for g in node["gpus"]}

    def test_one_users_repeated_xids_leave_its_gpu_in_service(self):
        r = self.cli("submit", "--cpus", "0.05", "--gpus", "1", "-D", self.dir, "--",
                     "sleep", "300")
        self.assertEqual(r.returncode, 0, r.stderr)
        jid = int(r.stdout.split()[-1])
        pooltest.wait_for("the job to run", lambda: self.job(jid)["state"] == "RUNNING",
                          timeout=XID_IN_S)
        self.assertLess(time.time(), self.xid_at, "the job started after the first Xid")
        held = self.job(jid)["placement"][0]["gpu_indices"][0]
        free = 1 - held
        last = self.xid_at + 2 * XID_GAP_S
        pooltest.wait_for("the free GPU's cordon", lambda: self.states()[free] == "cordoned",
                          timeout=last - time.time() + 10)
        # Past the third Xid on both GPUs (the agent sends each within a second).
        time.sleep(max(0.0, last + 2 - time.time()))
        self.assertEqual(self.states()[held], "healthy", self.server_log())
        self.assertEqual(self.job(jid)["state"], "RUNNING")
        self.cli("cancel", str(jid))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("xid_owner_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
