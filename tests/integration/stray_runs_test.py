#!/usr/bin/env python3
"""A node taken over by an agent with another state directory (docs/deploy.md, "Taking
over a node"): the runs its previous agent left are stopped before the node registers.

A server (`--node-timeout 2`) and an agent of the fake 4-GPU node "n1" (state directory
A) running a plain job on all 4 GPUs; a second job of 4 GPUs waits. The agent is killed
(SIGKILL): its job's supervisor and process run on. Once the node is down, an agent
starts under the same --node-name with state directory B, which knows nothing of that
run. It must stop the run (the job's process is gone, its cgroup removed, the agent log
names the job) before it registers: the waiting job, placed on the node's GPUs once it
is up, records that the first job's process no longer exists as it starts. The first
job ends LOST (the node stopped responding), never SUCCEEDED.

Needs root and cgroups (the agent finds the runs by their job cgroups). Usage:
stray_runs_test.py PATH_TO_GPUPOOL
"""
import glob
import os
import signal
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "node-4gpu.json")
call = pooltest.call


def job_cgroups(jid, shim):
    """The cgroups of job `jid`'s run 0.1 under the shim `shim` (agent/cgroup.h: other
    pools on this host may have a job of that id) in every hierarchy (v1) or the unified
    one (v2)."""
    leaf = "job-%d-0.1-%d" % (jid, shim)
    return (glob.glob("/sys/fs/cgroup/*/gpupool/" + leaf) +
            glob.glob("/sys/fs/cgroup/gpupool/" + leaf))


def parent_of(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(next(ln.split()[1] for ln in f if ln.startswith("PPid:")))


class StrayRunsTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (job cgroups, jobs run as the submitting user)")
        self.dir = pooltest.make_test_dir("gp-strays-")
        self.procs = []
        self.addCleanup(self.clean_up)

    def clean_up(self):
        if pooltest.test_failed(self):
            sys.stderr.write(pooltest.log_tails(self.dir, ("server.log", "a.log", "b.log"),
                                                6000))
        pooltest.stop_processes(self.procs)
        for name in ("a", "b"):
            pooltest.kill_leftovers(os.path.join(self.dir, name))
        pooltest.remove_dir(self.dir)

    def spawn(self, cmd, logname):
        return pooltest.spawn_logged(cmd, os.path.join(self.dir, logname), self.procs)

    def node_state(self):
        st, body = call(self.sock, "GET", "/v1/nodes")
        self.assertEqual(st, 200, body)
        return next((n["state"] for n in body["nodes"] if n["name"] == "n1"), "")

    def start_agent(self, state):
        if not hasattr(self, "token"):  # the node's, for both of its agents
            st, body = call(self.sock, "POST", "/v1/tokens", {"user": "n1", "kind": "node"})
            self.assertEqual(st, 201, body)
            self.token = body["token"]
        p = self.spawn(
            [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--token", self.token,
             "--state-dir", os.path.join(self.dir, state), "--fake", NODE, "--node-name", "n1",
             "--telemetry-interval", "0"], state + ".log")
        pooltest.wait_for("node n1 up", lambda: self.node_state() == "up", timeout=30)
        return p

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        self.assertEqual(st, 200, body)
        return body["job"]

    def submit(self, script):
        st, resp = call(self.sock, "POST", "/v1/jobs", {
            "command": ["sh", "-c", script], "workdir": self.dir, "request": {"gpus": 4}})
        self.assertEqual(st, 201, resp)
        return resp["job"]["id"]

    def test_runs_a_previous_agent_left_are_stopped_before_the_node_registers(self):
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.spawn([GPUPOOL, "server", "--state-dir", self.dir, "--port", "0",
                    "--node-timeout", "2"], "server.log")

        def up():
            try:
                return call(self.sock, "GET", "/v1/whoami")[0] == 200
            except OSError:
                return False
        pooltest.wait_for("the server", up, timeout=20)
        agent_a = self.start_agent("a")
        # Which pool its runs are of, for the sweep (another pool's would be left alone).
        with open(os.path.join(self.dir, "a", "agent", "controller")) as f:
            self.assertEqual(f.read().strip(), "unix:" + self.sock)
        pidfile = os.path.join(self.dir, "old.pid")
        record = os.path.join(self.dir, "record")
        old = self.submit("echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 4321" % (
            pidfile, pidfile, pidfile))
        pooltest.wait_job(self.job, old, ("RUNNING",), 30)
        pooltest.wait_for("the old job's pid", lambda: os.path.exists(pidfile), timeout=20)
        with open(pidfile) as f:
            pid = int(f.read())
        shim = parent_of(pid)  # the job's supervisor: its pid names the job's cgroups
        self.assertTrue(job_cgroups(old, shim), "job %d has no cgroup: nothing to find" % old)
        # Waits for the node's GPUs; as it starts, records whether the old job still runs.
        new = self.submit(
            's=$(cut -d" " -f3 /proc/{p}/stat 2>/dev/null); '
            'if [ -n "$s" ] && [ "$s" != Z ]; then echo alive; else echo gone; fi > {r}'.format(
                p=pid, r=record))
        self.assertEqual(self.job(new)["state"], "PENDING")

        os.kill(agent_a.pid, signal.SIGKILL)
        agent_a.wait()
        pooltest.wait_for("node n1 down", lambda: self.node_state() not in ("up", ""),
                          timeout=30)
        self.assertTrue(pooltest.alive(pid), "the old job died with its agent")
        self.start_agent("b")

        j = pooltest.wait_job(self.job, new, ("SUCCEEDED", "FAILED", "LOST"), 60)
        self.assertEqual(j["state"], "SUCCEEDED", j)
        with open(record) as f:
            self.assertEqual(f.read().strip(), "gone",
                             "job %d ran beside job %d on the same GPUs" % (new, old))
        self.assertFalse(pooltest.alive(pid))
        self.assertEqual(job_cgroups(old, shim), [])
        self.assertFalse(pooltest.alive(shim), "the old job's supervisor runs on")
        self.assertIn(self.job(old)["state"], ("LOST", "FAILED"))
        with open(os.path.join(self.dir, "b.log")) as f:
            log = f.read()
        self.assertIn("node n1: stopped job %d's run 0.1 left by a previous agent" % old, log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
