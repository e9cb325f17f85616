#!/usr/bin/env python3
"""gpupool cancel --signal to a job whose node does not answer (docs/cli.md, "Signalling a
running job"): a signal is delivered at once or never, and the command says which.

A server (`--node-timeout 30`: the node stays up while its agent is frozen or dead) and
one agent on the fake 4-GPU node, running a job that traps USR1, USR2, ALRM and HUP and
writes each one's name to a file.
  1. USR1 reaches it: "Signal USR1 sent".
  2. The agent is frozen (SIGSTOP) while its poll waits at the controller: USR2 goes into
     that poll's answer, which the agent does not read. The command waits for the agent to
     confirm it, and says it did not (exit 1, "not confirmed"; "not sent" should no poll
     have taken it), instead of "sent". Thawed, the agent reads the answer too late and
     drops the order: ALRM sent after it reaches the job, USR2 never does.
  3. The agent is killed (kill -9): HUP is not taken by any poll, and is withdrawn ("node
     n1 is not answering", exit 1). A new agent adopts the job: USR1 sent after reaches
     it, HUP never does.
A second server (`--node-timeout 2 --node-lease 12`) whose node is declared lost while its
agent is frozen: the lost job is refused naming its state (LOST), not "sent".
An array of four elements of 4 GPUs each (one runs at a time): its id signals the running
element; a pending element, a held one, an ended one and an array none of whose elements
runs (two cancelled, two held) are refused, each naming the state.

Needs root (jobs run as the submitting user). Usage: signal_unanswered_test.py PATH_TO_GPUPOOL
"""
import os
import signal
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "node-4gpu.json")
call = pooltest.call


class SignalUnansweredTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (jobs run as the submitting user)")
        self.dir = pooltest.make_test_dir("gp-sigdown-")
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

    def start_server(self, *flags):
        self.sock = os.path.join(self.dir, "gpupool.sock")
        pooltest.spawn_logged([GPUPOOL, "server", "--state-dir", self.dir, "--port", "0"] +
                              list(flags), os.path.join(self.dir, "server.log"), self.procs)

        def up():
            try:
                return call(self.sock, "GET", "/v1/whoami")[0] == 200
            except OSError:
                return False
        pooltest.wait_for("the server", up, timeout=20)
        st, body = call(self.sock, "POST", "/v1/tokens", {"user": "n1", "kind": "node"})
        self.assertEqual(st, 201, body)
        self.token = body["token"]

    def start_agent(self):
        self.agent = pooltest.spawn_logged(
            [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--token", self.token,
             "--state-dir", os.path.join(self.dir, "n1"), "--fake", NODE, "--node-name", "n1",
             "--telemetry-interval", "0"], os.path.join(self.dir, "agent.log"), self.procs)
        pooltest.wait_for("node n1 up", lambda: self.node().get("state") == "up")

    def node(self):
        st, body = call(self.sock, "GET", "/v1/nodes")
        self.assertEqual(st, 200, body)
        return next((n for n in body["nodes"] if n["name"] == "n1"), {})

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        self.assertEqual(st, 200, body)
        return body["job"]

    def cli(self, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, GPUPOOL_SERVER="unix:" + self.sock))

    def cancel_signal(self, sig, jid):
        return self.cli("cancel", "--signal", sig, str(jid))

    def agent_log(self):
        with open(os.path.join(self.dir, "agent.log"), errors="replace") as f:
            return f.read()

    def trapping_job(self, **fields):
        """A running job that writes the name of each signal it traps to `self.rec`."""
        self.rec = os.path.join(self.dir, "rec")
        ready = os.path.join(self.dir, "ready")
        traps = " ".join("trap 'echo %s >> %s' %s;" % (s.lower(), self.rec, s)
                         for s in ("USR1", "USR2", "ALRM", "HUP"))
        body = {"command": ["sh", "-c", "%s touch %s; while :; do sleep 0.05; done" % (
            traps, ready)], "workdir": self.dir, "request": {"gpus": 1}}
        body.update(fields)
        st, resp = call(self.sock, "POST", "/v1/jobs", body)
        self.assertEqual(st, 201, resp)
        jid = resp["job"]["id"]
        pooltest.wait_job(self.job, jid, ("RUNNING",), 30)
        pooltest.wait_for("the job's traps", lambda: os.path.exists(ready))
        return jid

    def received(self):
        try:
            with open(self.rec) as f:
                return f.read().split()
        except FileNotFoundError:
            return []

    def test_a_signal_the_agent_does_not_answer_for_is_said_so_and_never_delivered_later(self):
        self.start_server("--node-timeout", "30")
        self.start_agent()
        jid = self.trapping_job()
        r = self.cancel_signal("USR1", jid)
        self.assertEqual((r.returncode, r.stdout), (0, "Signal USR1 sent to job %d (1 task)\n"
                                                    % jid), r.stderr)
        pooltest.wait_for("USR1 in the job", lambda: self.received() == ["usr1"])

        # Frozen while its poll waits at the controller (it polled again to confirm USR1).
        os.kill(self.agent.pid, signal.SIGSTOP)
        r = self.cancel_signal("USR2", jid)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertNotIn("sent to", r.stdout)
        # Handed to the poll that waited (the agent drops it when it thaws); had a busy
        # machine kept the agent between polls as it froze, no poll took it (withdrawn).
        confirmable = "gpupool: signal 12 not confirmed: job %d task 0: node n1 stopped " \
                      "answering as its agent was handed it" % jid
        withdrawn = "gpupool: signal 12 not sent: job %d task 0: node n1 is not answering" % jid
        self.assertTrue(r.stderr.startswith(confirmable) or r.stderr.startswith(withdrawn),
                        r.stderr)
        self.assertTrue(r.stderr.rstrip().endswith(("else drops it", "never gets it")), r.stderr)
        self.assertEqual(self.job(jid)["state"], "RUNNING")
        taken = r.stderr.startswith(confirmable)
        os.kill(self.agent.pid, signal.SIGCONT)
        # The thawed agent reads the late answer before it polls for ALRM's.
        r = self.cancel_signal("ALRM", jid)
        self.assertEqual(r.returncode, 0, r.stderr)
        pooltest.wait_for("ALRM in the job", lambda: "alrm" in self.received())
        self.assertEqual(self.received(), ["usr1", "alrm"])  # USR2 never came
        if taken:
            self.assertIn("signal 12 to job %d task 0 attempt 1 dropped" % jid, self.agent_log())

        # Killed: no poll takes HUP, which is withdrawn; a new agent never gets it.
        self.agent.kill()
        self.agent.wait()
        r = self.cancel_signal("HUP", jid)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("gpupool: signal 1 not sent: job %d task 0: node n1 is not answering "
                      "(its agent has not polled for " % jid, r.stderr)
        self.assertIn("withdrawn, its agent never gets it", r.stderr)
        self.start_agent()  # adopts the job
        self.assertEqual(self.job(jid)["state"], "RUNNING")
        r = self.cancel_signal("USR1", jid)
        self.assertEqual(r.returncode, 0, r.stderr)
        pooltest.wait_for("USR1 again in the job", lambda: self.received().count("usr1") == 2)
        self.assertEqual(self.received(), ["usr1", "alrm", "usr1"])  # HUP never came

    def test_a_job_whose_node_was_declared_lost_is_refused_naming_its_state(self):
        self.start_server("--node-timeout", "2", "--node-lease", "12")
        self.start_agent()
        jid = self.trapping_job(requeue=False)
        os.kill(self.agent.pid, signal.SIGSTOP)
        pooltest.wait_job(self.job, jid, ("LOST",), 20)
        r = self.cancel_signal("USR1", jid)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("job %d has ended (LOST): only a running job can be signalled" % jid,
                      r.stderr)
        self.assertEqual(self.received(), [])

    def test_jobs_that_do_not_run_and_arrays_are_refused_naming_their_state(self):
        self.start_server("--node-timeout", "30")
        self.start_agent()
        st, resp = call(self.sock, "POST", "/v1/jobs", {
            "command": ["sh", "-c", "trap '' USR1; exec sleep 300"], "workdir": self.dir,
            "request": {"gpus": 4}, "array": "0-3"})
        self.assertEqual(st, 201, resp)
        a = resp["job"]["id"]
        pooltest.wait_job(self.job, a, ("RUNNING",), 30)
        r = self.cancel_signal("USR1", a)
        self.assertEqual((r.returncode, r.stdout, r.stderr),
                         (0, "Signal USR1 sent to array %d: 1 running element (1 task)\n" % a,
                          ""))
        r = self.cancel_signal("USR1", "%d_3" % a)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("gpupool: job %d_3 is pending and has no process to signal" % a, r.stderr)
        for held in (a + 2, a + 3):  # so that none runs once the first two are cancelled
            st, body = call(self.sock, "POST", "/v1/jobs/%d/hold" % held, {})
            self.assertEqual(st, 200, body)
        r = self.cancel_signal("USR1", "%d_2" % a)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("gpupool: job %d_2 is held (by root) and has no process to signal" % a,
                      r.stderr)
        r = self.cli("cancel", "%d_0" % a)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        pooltest.wait_job(self.job, a, pooltest.FINAL_STATES, 30)
        r = self.cancel_signal("USR1", "%d_0" % a)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("gpupool: job %d_0 has ended (CANCELLED): only a running job can be "
                      "signalled" % a, r.stderr)
        pooltest.wait_job(self.job, a + 1, ("RUNNING",), 30)  # the next element
        r = self.cancel_signal("USR1", "%d_1" % a)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli("cancel", "%d_1" % a)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        pooltest.wait_job(self.job, a + 1, pooltest.FINAL_STATES, 30)
        r = self.cancel_signal("USR1", a)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("gpupool: array %d has no running element to signal (2 held): "
                      "only running jobs can be signalled" % a, r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
