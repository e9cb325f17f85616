#!/usr/bin/env python3
"""Every row of the Xid table by injection (issue 29's tests, docs/health.md): a real
`gpupool up` on a fake 16-GPU node whose GPU i reports the Xid of row i through the fake
node's scripted telemetry, all at the same moment, with a 60 s telemetry interval (the
agent's Xid watch sends them at once) and the circuit breaker opened wide
(--health-breaker 1). Within 10 s each GPU must be in the state its row says (cordon-gpu:
cordoned; application, ignore: healthy; an unknown Xid: suspect), the node must stay up,
and of sixteen one-GPU jobs submitted afterwards exactly those fitting on GPUs in service
must run, none on a cordoned GPU. Xid 79 (cordon-node) has its own test
(xid79_gang_test.py): it would drain this one node.

Usage: xid_rows_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
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
XID_IN_S = 8

# docs/health.md's table, row by row: Xid -> the state one occurrence leaves the GPU in.
ROWS = [(13, "healthy"), (31, "healthy"), (43, "healthy"), (45, "healthy"), (48, "cordoned"),
        (63, "healthy"), (64, "cordoned"), (68, "healthy"), (74, "cordoned"), (92, "healthy"),
        (94, "healthy"), (95, "cordoned"), (109, "healthy"), (119, "cordoned"),
        (120, "cordoned"), (999, "suspect")]


class XidRowsTest(unittest.TestCase):
    def setUp(self):
        self.dir = pooltest.make_test_dir("gp-xidrows-")
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(self.dir, "gpupool.sock"))
        with open(NODE) as f:
            node = json.load(f)
        template = node["gpus"][0]
        node["gpus"] = []
        self.xid_at = int(time.time()) + XID_IN_S
        n = 600
        first = self.xid_at % n
        on = [((t - first) % n) < 300 for t in range(n)]
        gpus = {}
        for i, (xid, _) in enumerate(ROWS):
            g = dict(template, index=i, uuid="GPU-00000000-1111-2222-3333-%012d" % i,
                     pci_bus_id="0000:%02x:00.0" % (16 + i), minor_number=i,
                     device_nodes=["/dev/nvidia%d" % i])
            node["gpus"].append(g)
            gpus[str(i)] = {"xid_errors": [xid if o else 0 for o in on],
                            "xid_count": [1 if o else 0 for o in on]}
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
        self.wait_up()

    def wait_up(self):
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
        return node["state"], {g["index"]: g.get("health", {}).get("state", "healthy")
                               for g in node["gpus"]}

    def test_each_row_leaves_its_gpu_as_the_table_says_and_nothing_lands_on_a_cordoned_one(self):
        want = {i: state for i, (_, state) in enumerate(ROWS)}
        pooltest.wait_for("the Xids' effects", lambda: self.states()[1] == want,
                          timeout=XID_IN_S + 10 + 15)
        took = time.time() - self.xid_at
        print("every GPU in its row's state %.1f s after the Xids" % took, file=sys.stderr)
        self.assertLessEqual(took, 10, self.states())
        node_state, _ = self.states()
        self.assertEqual(node_state, "up")  # no row here takes the whole node out
        jobs = []
        for _ in ROWS:
            r = self.cli("submit", "--cpus", "0.05", "--gpus", "1", "-D", self.dir, "--", "sleep", "300")
            self.assertEqual(r.returncode, 0, r.stderr)
            jobs.append(int(r.stdout.split()[-1]))
        in_service = sum(1 for s in want.values() if s != "cordoned")
        pooltest.wait_for("the jobs that fit to start", lambda: sum(
            self.job(j)["state"] == "RUNNING" for j in jobs) == in_service, timeout=30)
        used = set()
        for j in jobs:
            rec = self.job(j)
            if rec["state"] == "RUNNING":
                used.update(rec["placement"][0]["gpu_indices"])
            else:
                self.assertEqual(rec["state"], "PENDING", rec)
        self.assertEqual(used, {i for i, s in want.items() if s != "cordoned"})
        for j in jobs:
            self.cli("cancel", str(j))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("xid_rows_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
