#!/usr/bin/env python3
"""A reboot-class Xid under a running gang (issue 29's end-to-end case, docs/health.md): a
server and two agents (node0, node1; fake 4-GPU nodes), a gang of two 4-GPU tasks spread
over both, and GPU 3 of node0 reporting Xid 79 (fallen off the bus) through its fake
node's scripted telemetry, with a 60 s telemetry interval (the agent's Xid watch sends
it at once). The gang must end FAILED naming the Xid and the GPU within 10 s, its task
on node1 must be stopped too, node0 must be drained ("health: GPU ... Xid 79"), and the
next gang (two 2-GPU tasks) must land on node1 alone while nothing starts on node0.

Usage: xid79_gang_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
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
XID_IN_S = 10  # seconds from writing the node files to node0 GPU 3's Xid 79


def node_file(directory, i, xid_at):
    with open(NODE) as f:
        node = json.load(f)
    for g in node["gpus"]:  # each agent its own GPUs
        g["uuid"] = g["uuid"][:-2] + str(i) + g["uuid"][-1]  # node1's GPU 3: ...013
    if xid_at is not None:
        # The fake's series are indexed by wall time (value at t: series[t % n]): GPU 3's
        # Xid starts at xid_at and stays for 300 s (its count at 1).
        n = 600
        first = xid_at % n
        on = [((t - first) % n) < 300 for t in range(n)]
        gpus = {}
        for g in node["gpus"]:
            bad = g["index"] == 3
            gpus[str(g["index"])] = {"xid_errors": [79 if bad and o else 0 for o in on],
                                     "xid_count": [1 if bad and o else 0 for o in on]}
        node["telemetry"] = {"step_s": 1, "gpus": gpus}
    path = os.path.join(directory, "node%d.json" % i)
    with open(path, "w") as f:
        json.dump(node, f)
    return path


class Xid79GangTest(unittest.TestCase):
    def setUp(self):
        self.dir = pooltest.make_test_dir("gp-xid79-")
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.sock)
        self.procs = []
        self.xid_at = int(time.time()) + XID_IN_S
        files = [node_file(self.dir, 0, self.xid_at), node_file(self.dir, 1, None)]
        self.spawn("server.log", [GPUPOOL, "server", "--state-dir", self.dir, "--port", "0"])
        pooltest.wait_for("the server", lambda: self.cli("whoami").returncode == 0,
                          timeout=20)
        for i, f in enumerate(files):
            self.spawn("agent%d.log" % i,
                       [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--state-dir",
                        os.path.join(self.dir, "agent%d" % i), "--fake", f, "--node-name",
                        "node%d" % i, "--address", "127.0.0.1", "--telemetry-interval", "60"])
        pooltest.wait_for("both agents", lambda: self.cli("nodes").stdout.count(" up ") == 2)

    def tearDown(self):
        pooltest.stop_processes(self.procs)
        pooltest.kill_leftovers(self.dir)
        pooltest.remove_dir(self.dir)

    def spawn(self, log, argv):
        with open(os.path.join(self.dir, log), "ab") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=out,
                                               start_new_session=True))

    def cli(self, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True,
                              env=self.env, timeout=60)

    def log(self):
        out = ""
        for name in ("server.log", "agent0.log", "agent1.log"):
            with open(os.path.join(self.dir, name), errors="replace") as f:
                out += "--- %s\n%s" % (name, f.read()[-2000:])
        return out

    def job(self, jid):
        r = self.cli("show", str(jid), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        return j.get("job", j)

    def submit(self, *args):
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, *args)  # output files here
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def test_a_gang_on_a_gpu_that_fell_off_the_bus_fails_and_the_next_lands_elsewhere(self):
        gang = self.submit("-n", "2", "--gpus", "4", "--", "sleep", "300")
        running = pooltest.wait_job(self.job, gang, ("RUNNING",), 30, log=self.log)
        self.assertEqual(sorted(p["node"] for p in running["placement"]), ["node0", "node1"])
        self.assertLess(time.time(), self.xid_at, "the gang started after the Xid: too slow")
        failed = pooltest.wait_job(self.job, gang, ("FAILED",), XID_IN_S + 20, log=self.log)
        self.assertIn("Xid 79", failed["reason"])
        # node0's GPU 3: its file's UUID made node0's own (gpupool agent --node-name).
        self.assertRegex(failed["reason"], r"GPU-[0-9a-f]{8}-1111-2222-3333-000000000003")
        took = failed["end_time_us"] / 1e6 - self.xid_at
        print("gang FAILED %.2f s after the Xid" % took, file=sys.stderr)
        self.assertLessEqual(took, 10)
        # Both tasks are stopped, on node1 too: each shim records its task's end.
        for i in range(2):
            status = os.path.join(self.dir, "agent%d" % i, "agent", "jobs", str(gang),
                                  "%d.1" % i, "status.json")
            pooltest.wait_for("task %d's end on node%d" % (i, i),
                              lambda: os.path.exists(status), timeout=20)
        nodes = self.cli("nodes")
        self.assertEqual(nodes.returncode, 0, nodes.stderr)
        line0 = [l for l in nodes.stdout.splitlines() if l.startswith("node0")][0]
        self.assertRegex(line0, r"drain")
        self.assertRegex(nodes.stdout, r"health: GPU GPU-[0-9a-f-]*003 Xid 79")
        # The next gang lands on node1 alone.
        nxt = self.submit("-n", "2", "--gpus", "2", "--", "sleep", "300")
        running = pooltest.wait_job(self.job, nxt, ("RUNNING",), 30, log=self.log)
        self.assertEqual([p["node"] for p in running["placement"]], ["node1", "node1"])
        # And a job that fits only on node0's GPUs waits.
        one = self.submit("--gpus", "1", "--", "sleep", "300")
        pooltest.wait_for("a pending reason for the job node0 cannot take",
                          lambda: self.job(one).get("pending_reason", "") != "")
        self.assertEqual(self.job(one)["state"], "PENDING")
        self.cli("cancel", str(nxt))
        self.cli("cancel", str(one))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("xid79_gang_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
