#!/usr/bin/env python3
"""A job placed on a node whose agent just died (docs/health.md, "A node lost before it
had the job"): no poll answer carried its launch, so its node's loss sends it back to the
queue instead of ending it LOST, and it runs once the agent is back.

A server (`--node-timeout 3`) and an agent on the fake node "n1". The agent is killed
(SIGKILL); a job pinned to n1 (-w n1, no --requeue) is submitted and placed there before
the node is declared lost. After the loss it is PENDING (not LOST), its reason naming n1;
the agent is started again: the job runs there and SUCCEEDS, with no earlier attempt.

Needs root (jobs run as the submitting user). Usage: never_launched_test.py PATH_TO_GPUPOOL
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
TIMEOUT_S = 3


class NeverLaunchedTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (jobs run as the submitting user)")
        self.dir = pooltest.make_test_dir("gp-neverlaunched-")
        self.procs = []
        self.addCleanup(self.clean_up)
        self.sock = os.path.join(self.dir, "gpupool.sock")
        pooltest.spawn_logged([GPUPOOL, "server", "--state-dir", self.dir, "--port", "0",
                               "--node-timeout", str(TIMEOUT_S)],
                              os.path.join(self.dir, "server.log"), self.procs)

        def up():
            try:
                return call(self.sock, "GET", "/v1/whoami")[0] == 200
            except OSError:
                return False
        pooltest.wait_for("the server", up, timeout=20)
        st, body = call(self.sock, "POST", "/v1/tokens", {"user": "n1", "kind": "node"})
        self.assertEqual(st, 201, body)
        self.token = body["token"]

    def clean_up(self):
        if pooltest.test_failed(self):
            sys.stderr.write(pooltest.log_tails(self.dir, ("server.log", "n1.log"), 6000))
        pooltest.stop_processes(self.procs)
        pooltest.kill_leftovers(os.path.join(self.dir, "n1"))
        pooltest.remove_dir(self.dir)

    def start_agent(self):
        agent = pooltest.spawn_logged(
            [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--token", self.token,
             "--state-dir", os.path.join(self.dir, "n1"), "--fake", NODE, "--node-name", "n1",
             "--telemetry-interval", "0"], os.path.join(self.dir, "n1.log"), self.procs)
        pooltest.wait_for("node n1 up", lambda: self.node_state() == "up", timeout=20)
        return agent

    def node_state(self):
        st, body = call(self.sock, "GET", "/v1/nodes")
        self.assertEqual(st, 200, body)
        return next((n["state"] for n in body["nodes"] if n["name"] == "n1"), "")

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        self.assertEqual(st, 200, body)
        return body["job"]

    def log(self):
        return pooltest.log_tails(self.dir, ("server.log",), 3000)

    def test_a_job_placed_on_a_dead_agents_node_is_queued_again_and_runs_on_its_return(self):
        agent = self.start_agent()
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait()
        st, resp = call(self.sock, "POST", "/v1/jobs", {
            "command": ["true"], "workdir": self.dir,
            "request": {"gpus": 1, "nodelist": ["n1"]}})
        self.assertEqual(st, 201, resp)
        jid = resp["job"]["id"]
        # Placed on n1 while it still counts as up (its loss comes --node-timeout after
        # its last poll), then back in the queue or lost with it.

        def after_the_loss():
            j = self.job(jid)
            placed = "placed on node n1" in j.get("reason", "")
            return j if j["state"] not in ("ASSIGNED", "PENDING") or placed else None
        j = pooltest.wait_for("n1's loss to reach job %d" % jid, after_the_loss, timeout=20)
        self.assertEqual(j["state"], "PENDING", j)
        self.assertIn("placed on node n1, whose agent stopped answering before it could be "
                      "started", j.get("reason", ""))
        self.assertFalse(j.get("earlier_attempts"), j)
        self.assertEqual(self.node_state(), "down")
        self.start_agent()
        j = pooltest.wait_job(self.job, jid, pooltest.FINAL_STATES, 30, log=self.log)
        self.assertEqual(j["state"], "SUCCEEDED", j)
        self.assertEqual(j["placement"][0]["node"], "n1", j)
        self.assertFalse(j.get("earlier_attempts"), j)


if __name__ == "__main__":
    unittest.main()
