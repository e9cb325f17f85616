#!/usr/bin/env python3
"""A launch a frozen agent had been sent, cancelled before the agent thawed (docs/cli.md,
"cancel"; src/agent/runtime/README.md): nothing of the job runs.

A server and one agent on the fake 4-GPU node. The agent is frozen (SIGSTOP) while its
poll waits at the controller; a job is submitted, and its launch goes to that poll's
answer, which the frozen agent does not read. The job is cancelled (the cancel waits at
the controller, behind the launch), then the agent thawed. The agent used to start the
task on the launch and stop it on the cancel of its next poll: the job's command ran. It
takes the controller's cancel before it starts anything now: the job ends CANCELLED
"before it started", and its command never wrote its marker.

Needs root (jobs run as the submitting user). Usage: frozen_launch_test.py PATH_TO_GPUPOOL
"""
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


class FrozenLaunchTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (jobs run as the submitting user)")
        self.dir = pooltest.make_test_dir("gp-frozen-")
        self.procs = []
        self.agent = None
        self.addCleanup(self.clean_up)

    def clean_up(self):
        if self.agent is not None and self.agent.poll() is None:
            os.kill(self.agent.pid, signal.SIGCONT)
        if pooltest.test_failed(self):
            sys.stderr.write(pooltest.log_tails(self.dir, ("server.log", "agent.log"), 6000))
        pooltest.stop_processes(self.procs)
        pooltest.kill_leftovers(os.path.join(self.dir, "n1"))
        pooltest.remove_dir(self.dir)

    def node(self):
        st, body = call(self.sock, "GET", "/v1/nodes")
        self.assertEqual(st, 200, body)
        return next((n for n in body["nodes"] if n["name"] == "n1"), {})

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        self.assertEqual(st, 200, body)
        return body["job"]

    def test_a_launch_cancelled_while_its_agent_was_frozen_never_runs(self):
        self.sock = os.path.join(self.dir, "gpupool.sock")
        # A node timeout well past the freeze: the node stays up, its poll waits (up to
        # half of it) at the controller.
        pooltest.spawn_logged([GPUPOOL, "server", "--state-dir", self.dir, "--port", "0",
                               "--node-timeout", "30"],
                              os.path.join(self.dir, "server.log"), self.procs)

        def up():
            try:
                return call(self.sock, "GET", "/v1/whoami")[0] == 200
            except OSError:
                return False
        pooltest.wait_for("the server", up, timeout=20)
        st, body = call(self.sock, "POST", "/v1/tokens", {"user": "n1", "kind": "node"})
        self.assertEqual(st, 201, body)
        self.agent = pooltest.spawn_logged(
            [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--token", body["token"],
             "--state-dir", os.path.join(self.dir, "n1"), "--fake", NODE, "--node-name", "n1",
             "--telemetry-interval", "0"], os.path.join(self.dir, "agent.log"), self.procs)
        pooltest.wait_for("node n1 up", lambda: self.node().get("state") == "up")

        os.kill(self.agent.pid, signal.SIGSTOP)
        marker = os.path.join(self.dir, "ran")
        st, body = call(self.sock, "POST", "/v1/jobs", {
            "command": ["sh", "-c", "echo ran > %s; exec sleep 60" % marker],
            "workdir": self.dir, "request": {"gpus": 1}})
        self.assertEqual(st, 201, body)
        jid = body["job"]["id"]
        pooltest.wait_job(self.job, jid, ("ASSIGNED",), 20)
        placed_us = self.job(jid)["placed_time_us"]
        # The controller has answered the frozen agent's poll with the launch once it has
        # looked at the node's work since the job was placed (it notes the node heard from
        # then; the agent itself sends nothing while frozen).
        pooltest.wait_for("the launch in the frozen agent's poll answer",
                          lambda: self.node().get("last_heartbeat_us", 0) >= placed_us,
                          timeout=10)
        st, body = call(self.sock, "POST", "/v1/jobs/%d/cancel" % jid, {})
        self.assertEqual(st, 200, body)
        os.kill(self.agent.pid, signal.SIGCONT)
        j = pooltest.wait_job(self.job, jid, pooltest.FINAL_STATES, 20)
        self.assertEqual(j["state"], "CANCELLED", j)
        self.assertIn("before it started", j.get("reason", ""), j)
        self.assertFalse(os.path.exists(marker), "the cancelled job's command ran")
        self.assertEqual(self.node().get("state"), "up")


if __name__ == "__main__":
    unittest.main(verbosity=2)
