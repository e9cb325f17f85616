#!/usr/bin/env python3
"""Operator mistakes a pool must refuse rather than run twice (docs/deploy.md, "One daemon
per state directory, one agent per node name"):
  1. A second `gpupool up` or `gpupool server` on a state directory whose socket was
     removed (a tmp cleaner, an operator removing a "stale" socket) while its server
     runs: refused, naming the running server's pid; it binds no new socket.
  2. A second `gpupool agent` on a running agent's state directory: refused, naming the
     first agent's pid.
  3. A second agent under the same --node-name with another state directory (a cloned VM,
     a copied command line): refused by the controller, it says so and tries again later
     (every 30 s); the first agent's job keeps running and ends SUCCEEDED, run once.

Needs root (jobs run as the submitting user). Usage: operator_mistakes_test.py PATH_TO_GPUPOOL
"""
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "node-4gpu.json")
call = pooltest.call


class OperatorMistakesTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (jobs run as the submitting user)")
        self.dir = pooltest.make_test_dir("gp-mistakes-")
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.procs = []
        self.addCleanup(self.clean_up)

    def clean_up(self):
        if pooltest.test_failed(self):
            sys.stderr.write(pooltest.log_tails(self.dir, None, 6000))
        pooltest.stop_processes(self.procs)
        pooltest.kill_leftovers(self.dir)
        for name in ("n1", "n1b"):
            pooltest.kill_leftovers(os.path.join(self.dir, name))
        pooltest.remove_dir(self.dir)

    def spawn(self, cmd, logname):
        return pooltest.spawn_logged(cmd, os.path.join(self.dir, logname), self.procs)

    def run_refused(self, cmd):
        """Runs `cmd`, which must exit at once with status 2; returns its stderr."""
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        # 2: not restarted by the packaged units (RestartPreventExitStatus=2).
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        return r.stderr

    def wait_served(self):
        def up():
            try:
                return call(self.sock, "GET", "/v1/whoami")[0] == 200
            except OSError:
                return False
        pooltest.wait_for("the server", up, timeout=30)

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        self.assertEqual(st, 200, body)
        return body["job"]

    def node(self, name):
        st, body = call(self.sock, "GET", "/v1/nodes")
        self.assertEqual(st, 200, body)
        return next((n for n in body["nodes"] if n["name"] == name), None)

    def test_a_second_server_on_the_state_directory_is_refused(self):
        first = self.spawn([GPUPOOL, "up", "--config", "", "--state-dir", self.dir,
                            "--port", "0", "--fake", NODE], "up1.log")
        self.wait_served()
        os.remove(self.sock)
        for cmd in (["up", "--fake", NODE], ["server"]):
            err = self.run_refused([GPUPOOL] + cmd + ["--config", "", "--state-dir", self.dir,
                                                      "--port", "0"])
            self.assertIn("another gpupool server (pid %d) uses the state directory '%s'"
                          % (first.pid, self.dir), err)
            self.assertIn("stop it first", err)
            self.assertFalse(os.path.exists(self.sock), "the refused server bound a socket")
        self.assertIsNone(first.poll(), "the first server stopped")

    def agent_cmd(self, state_dir, token):
        return [GPUPOOL, "agent", "--config", "", "--controller", "unix:" + self.sock,
                "--token", token, "--state-dir", state_dir, "--fake", NODE,
                "--node-name", "n1", "--telemetry-interval", "0"]

    def test_second_agents_are_refused_and_the_first_ones_job_runs_on(self):
        self.spawn([GPUPOOL, "server", "--config", "", "--state-dir", self.dir, "--port", "0"],
                   "server.log")
        self.wait_served()
        st, body = call(self.sock, "POST", "/v1/tokens", {"user": "n1", "kind": "node"})
        self.assertEqual(st, 201, body)
        token = body["token"]
        n1 = os.path.join(self.dir, "n1")
        first = self.spawn(self.agent_cmd(n1, token), "n1.log")
        pooltest.wait_for("node n1 up", lambda: (self.node("n1") or {}).get("state") == "up")
        go = os.path.join(self.dir, "go")
        st, body = call(self.sock, "POST", "/v1/jobs", {
            "command": ["sh", "-c", "while [ ! -e %s ]; do sleep 0.1; done" % go],
            "workdir": self.dir, "request": {"gpus": 4}})
        self.assertEqual(st, 201, body)
        jid = body["job"]["id"]
        pooltest.wait_job(self.job, jid, ("RUNNING",), 30)
        address = self.node("n1")["address"]

        # The same state directory: refused by the agent's lock.
        err = self.run_refused(self.agent_cmd(n1, token))
        self.assertIn("another gpupool agent (pid %d) uses the state directory '%s'"
                      % (first.pid, n1), err)

        # Another state directory, the same node name: refused by the controller; it
        # says so and waits to try again.
        second = self.spawn(self.agent_cmd(os.path.join(self.dir, "n1b"), token), "n1b.log")
        log = os.path.join(self.dir, "n1b.log")

        def refused():
            with open(log, errors="replace") as f:
                text = f.read()
            return "node n1 is run by another agent (at %s" % address in text and \
                "give this agent another --node-name" in text and "trying again in 30 s" in text
        pooltest.wait_for("the second agent's refusal", refused, timeout=30)
        self.assertIsNone(second.poll(), "the refused agent gave up instead of trying later")

        # Nothing changed for the first agent and its job.
        self.assertIsNone(first.poll(), "the first agent stopped")
        j = self.job(jid)
        self.assertEqual((j["state"], j["attempt"]), ("RUNNING", 1), j)
        self.assertEqual(self.node("n1")["state"], "up")
        open(go, "w").close()
        j = pooltest.wait_job(self.job, jid, pooltest.FINAL_STATES, 30)
        self.assertEqual((j["state"], j["attempt"]), ("SUCCEEDED", 1), j)


if __name__ == "__main__":
    unittest.main()
