#!/usr/bin/env python3
"""A launch a frozen agent had been sent, cancelled before the agent thawed (docs/cli.md,
"cancel"; src/agent/runtime/README.md): nothing of the job runs.

A server and one agent on the fake 4-GPU node. The agent is frozen (SIGSTOP) while its
poll waits at the controller; a job is submitted, and its launch goes to that poll's
answer, which the frozen agent does not read. The job is cancelled (the cancel waits at
the controller, behind the launch), then the agent thawed. The agent used to start the
task on the launch and stop it on the cancel of its next poll: the job's command ran. It
takes the controller's cancel before it starts anything now: the job ends CANCELLED
"before it started", and its command never wrote its marker. The same for an exec
session's request and its cancel.

Needs root (jobs run as the submitting user). Usage: frozen_launch_test.py PATH_TO_GPUPOOL
"""
import os
import signal
import sys
import time
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

    def start_pool(self):
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
            [GPUPOOL, "--log-level", "info", "agent", "--controller", "unix:" + self.sock, "--token", body["token"],
             "--state-dir", os.path.join(self.dir, "n1"), "--fake", NODE, "--node-name", "n1",
             "--telemetry-interval", "0"], os.path.join(self.dir, "agent.log"), self.procs)
        pooltest.wait_for("node n1 up", lambda: self.node().get("state") == "up")

    def freeze_agent_in_its_poll(self):
        # Its poll waits at the controller once the node is heard from after now (the
        # controller notes it at a poll's start, and every 5 s while it waits).
        now_us = int(time.time() * 1e6)
        pooltest.wait_for("the agent's poll", lambda: self.node().get("last_heartbeat_us", 0) >= now_us,
                          timeout=10)
        os.kill(self.agent.pid, signal.SIGSTOP)

    def test_a_launch_cancelled_while_its_agent_was_frozen_never_runs(self):
        self.start_pool()
        self.freeze_agent_in_its_poll()
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

    def test_an_exec_cancelled_while_its_agent_was_frozen_never_runs(self):
        # The same for a gpupool exec session (and so for mpirun's daemons): its request in
        # the frozen agent's poll answer, its cancel (DELETE, as its client going away
        # does) waiting behind it.
        self.start_pool()
        st, body = call(self.sock, "POST", "/v1/jobs", {
            "command": ["sleep", "300"], "workdir": self.dir, "request": {"gpus": 1}})
        self.assertEqual(st, 201, body)
        jid = body["job"]["id"]
        pooltest.wait_job(self.job, jid, ("RUNNING",), 20)
        self.freeze_agent_in_its_poll()
        marker = os.path.join(self.dir, "exec-ran")
        # The controller answers the waiting poll as it takes the request: noted then.
        asked_us = int(time.time() * 1e6)
        st, body = call(self.sock, "POST", "/v1/jobs/%d/exec" % jid, {
            "task": 0, "argv": ["sh", "-c", "echo ran > %s; exec sleep 60" % marker]})
        self.assertEqual(st, 201, body)
        eid = body["id"]
        pooltest.wait_for("the exec request in the frozen agent's poll answer",
                          lambda: self.node().get("last_heartbeat_us", 0) >= asked_us,
                          timeout=10)
        st, body = call(self.sock, "DELETE", "/v1/exec/%s" % eid)
        self.assertEqual(st, 200, body)
        os.kill(self.agent.pid, signal.SIGCONT)

        def session():
            st, body = call(self.sock, "GET", "/v1/exec/%s" % eid)
            self.assertEqual(st, 200, body)
            return body
        pooltest.wait_for("the exec session's end", lambda: session().get("ended"), timeout=20)
        x = session()
        self.assertFalse(x.get("started"), x)
        self.assertIn("before it started", x.get("error", ""), x)
        self.assertFalse(os.path.exists(marker), "the cancelled exec session's command ran")
        # Refused by the agent, which had the request (not ended by the controller unsent).
        with open(os.path.join(self.dir, "agent.log")) as f:
            self.assertIn("exec %s in job %d task 0 attempt 1 not started: cancelled before it "
                          "started" % (eid, jid), f.read())
        self.assertEqual(self.job(jid)["state"], "RUNNING")


if __name__ == "__main__":
    unittest.main(verbosity=2)
