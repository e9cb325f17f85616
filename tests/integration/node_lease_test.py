#!/usr/bin/env python3
"""A node cut off from the controller (docs/health.md, "A node cut off from the
controller"): a --requeue job never runs twice at once.

A server (`--node-timeout 2 --node-lease 6`), an agent on the fake 4-GPU node "cut"
running a --requeue job of 4 GPUs and a plain job without GPUs, and a second agent
("spare") that joins once they run.
  1. The agent of the node running them is frozen (SIGSTOP): its job supervisors run on,
     the node is declared lost after 2 s. The requeue job's next attempt does not start
     on the other node until the lease is over; before then, the supervisor of attempt 1
     has killed it (its status says kill cause node_lease). Attempt 2 checks, as it
     starts, that attempt 1's process is gone, and the test checks the order of the
     times. The plain job (LOST, never started again) is not killed: its process runs on.
     The agent is thawed: it registers again, the job's attempt 2 ends SUCCEEDED.
  2. `--node-lease` shorter than twice `--node-timeout` is refused, naming both.

Needs root (jobs run as the submitting user). Usage: node_lease_test.py PATH_TO_GPUPOOL
"""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "node-4gpu.json")
call = pooltest.call
TIMEOUT_S = 2
LEASE_S = 12


class NodeLeaseTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (jobs run as the submitting user)")
        self.dir = pooltest.make_test_dir("gp-lease-")
        self.procs = []
        self.agents = {}
        self.addCleanup(self.clean_up)

    def clean_up(self):
        for p in self.agents.values():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
        if pooltest.test_failed(self):
            sys.stderr.write(pooltest.log_tails(self.dir, ("server.log", "cut.log",
                                                           "spare.log"), 6000))
        pooltest.stop_processes(self.procs)
        for name in self.agents:
            pooltest.kill_leftovers(os.path.join(self.dir, name))
        pooltest.remove_dir(self.dir)

    def spawn(self, cmd, logname):
        return pooltest.spawn_logged(cmd, os.path.join(self.dir, logname), self.procs)

    def start_server(self, *flags):
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.server = self.spawn([GPUPOOL, "server", "--state-dir", self.dir, "--port", "0",
                                  "--node-timeout", str(TIMEOUT_S)] + list(flags), "server.log")

        def up():
            try:
                return call(self.sock, "GET", "/v1/whoami")[0] == 200
            except OSError:
                return False
        pooltest.wait_for("the server", up, timeout=20)

    def start_agent(self, name):
        st, body = call(self.sock, "POST", "/v1/tokens", {"user": name, "kind": "node"})
        self.assertEqual(st, 201, body)
        self.agents[name] = self.spawn(
            [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--token", body["token"],
             "--state-dir", os.path.join(self.dir, name), "--fake", NODE, "--node-name", name,
             "--telemetry-interval", "0"], name + ".log")
        pooltest.wait_for("node %s up" % name, lambda: self.node_state(name) == "up")

    def node_state(self, name):
        st, body = call(self.sock, "GET", "/v1/nodes")
        self.assertEqual(st, 200, body)
        return next((n["state"] for n in body["nodes"] if n["name"] == name), "")

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        self.assertEqual(st, 200, body)
        return body["job"]

    def submit(self, command, **fields):
        body = {"command": command, "workdir": self.dir}
        body.update(fields)
        st, resp = call(self.sock, "POST", "/v1/jobs", body)
        self.assertEqual(st, 201, resp)
        return resp["job"]["id"]

    def test_a_cut_off_node_stops_a_requeue_job_before_its_next_attempt_starts(self):
        self.start_server("--node-lease", str(LEASE_S))
        self.start_agent("cut")
        record = os.path.join(self.dir, "record")
        open(record, "w").close()
        os.chmod(record, 0o666)
        # Attempt N sleeps as `sleep 60N` (a name the next attempt looks for) and records
        # the SIGTERM it is told to stop by (a checkpoint would go there). Attempt 2
        # records whether attempt 1's process still exists as it starts, then ends.
        script = (
            'echo "s $GPUPOOL_ATTEMPT $(date +%s.%N)" >> {rec}; '
            'if [ "$GPUPOOL_ATTEMPT" -gt 1 ]; then '
            '  pgrep -x -f "sleep 60$((GPUPOOL_ATTEMPT - 1))" >/dev/null; '
            '  echo "p $?" >> {rec}; exit 0; fi; '
            'trap \'echo "t $GPUPOOL_ATTEMPT $(date +%s.%N)" >> {rec}; exit 0\' TERM; '
            'sleep 60$GPUPOOL_ATTEMPT & wait').format(rec=record)
        again = self.submit(["sh", "-c", script], request={"gpus": 4}, requeue=True)
        plain = self.submit(["sh", "-c", "exec sleep 777"], request={"gpus": 0})
        for jid in (again, plain):
            pooltest.wait_job(self.job, jid, ("RUNNING",), 30)
        self.start_agent("spare")  # joins only now, so that both jobs ran on "cut"
        shim_status = os.path.join(self.dir, "cut", "agent", "jobs", str(again), "0.1",
                                   "status.json")
        os.kill(self.agents["cut"].pid, signal.SIGSTOP)
        frozen = time.time()
        j = pooltest.wait_requeued(self.job, again, timeout=20)
        lost_after = time.time() - frozen
        self.assertIn("stopped responding", j["reason"])
        self.assertEqual(j.get("fence_node"), "cut", j)
        pooltest.wait_for("the lease in its pending reason", lambda: "its lease stops it by" in
                          self.job(again).get("pending_reason", ""), timeout=10)
        self.assertEqual(self.job(plain)["state"], "LOST")
        # Attempt 1 is killed by its supervisor before the lease ends; attempt 2 starts on
        # "spare" once it has.
        pooltest.wait_for("attempt 1's status", lambda: os.path.exists(shim_status), timeout=20)
        fenced_after = time.time() - frozen
        j = pooltest.wait_job(self.job, again, ("SUCCEEDED", "FAILED", "LOST"), 30)
        started_again_after = time.time() - frozen
        self.assertEqual(j["state"], "SUCCEEDED", j)
        self.assertEqual(j["attempt"], 2, j)
        self.assertEqual(j["placement"][0]["node"], "spare", j)
        with open(shim_status) as f:
            status = json.load(f)
        self.assertEqual(status.get("kill_cause"), "node_lease", status)
        with open(record) as f:
            lines = f.read().split("\n")
        # pgrep's status as attempt 2 started: 1, no process of attempt 1 (0 would be one
        # still running; anything else, pgrep could not look).
        self.assertIn("p 1", lines, lines)
        starts = [ln.split() for ln in lines if ln.startswith("s ")]
        self.assertEqual([s[1] for s in starts], ["1", "2"], lines)
        # Attempt 1 was told to stop (SIGTERM, the node's cancel grace before the lease
        # ran out) before attempt 2 started; it ended by itself, as the lease's stop.
        told = [ln.split() for ln in lines if ln.startswith("t ")]
        self.assertEqual([t[1] for t in told], ["1"], lines)
        self.assertLess(float(told[0][2]), float(starts[1][2]), lines)
        self.assertEqual(status.get("exit_code"), 0, status)
        self.assertIn("node lease running out", status.get("reason", ""), status)
        # The plain job was not stopped: the node may still run it, and nothing else will.
        self.assertEqual(subprocess.run(["pgrep", "-x", "-f", "sleep 777"],
                                        capture_output=True).returncode, 0)
        sys.stderr.write("node lost after %.1f s, attempt 1 fenced by %.1f s, the job ended "
                         "(attempt 2) after %.1f s (lease %d s, node timeout %d s)\n" % (
                             lost_after, fenced_after, started_again_after, LEASE_S, TIMEOUT_S))
        # The agent thaws: it registers again and reports what happened there.
        os.kill(self.agents["cut"].pid, signal.SIGCONT)
        pooltest.wait_for("node cut up again", lambda: self.node_state("cut") == "up")
        self.assertEqual(self.job(again)["state"], "SUCCEEDED")

    def test_a_lease_shorter_than_twice_the_node_timeout_is_refused(self):
        out = subprocess.run([GPUPOOL, "server", "--state-dir", self.dir, "--port", "0",
                              "--node-timeout", "30", "--node-lease", "45"],
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("--node-lease", out.stderr)
        self.assertIn("--node-timeout", out.stderr)
        # Nor one longer than an agent takes (7 days), which would keep every agent out.
        out = subprocess.run([GPUPOOL, "server", "--state-dir", self.dir, "--port", "0",
                              "--node-lease", "8d"], capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("longer than 7d", out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
