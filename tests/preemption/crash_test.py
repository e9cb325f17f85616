#!/usr/bin/env python3
"""Preemption under crashes (docs/preemption.md, "Crashes during a preemption"): a
`gpupool server` and a `gpupool agent` on the fake 4-GPU node, on one SQLite store, so
that each can be killed with SIGKILL on its own. Each case preempts a 4-GPU preemptible
job (tests/preemption/crash_victim.py, which appends every run to a file and records its
SIGTERM) for a job of higher priority, with a third job, older than the preemptor, that
must not take the victim's GPUs (they are held for the preemptor):

- the controller is killed during the victim's grace and started again half-way through
  it (or once the victim has ended): the victim and its child, which ignore SIGTERM, are
  killed at its deadline (not after a fresh grace), requeued once as
  attempt 2 with the preemption's reason, the hold is still stored, and the preemptor
  starts on the freed GPUs before the third job;
- the same with the agent of the victim's node killed and restarted instead; and with
  the agent away past the node timeout (the victim requeued as preempted when its node is
  lost): the node returns still running the victim, and no job starts on its GPUs before
  the victim's process has ended;
- a victim that finishes its work during its grace and exits 0 is requeued (the pool
  cannot tell it from a checkpoint), once; one whose work ended before the stop reached
  it (the agent stopped meanwhile) ends SUCCEEDED and is not run again;
- the preemptor is cancelled during the grace: the hold is freed (its row deleted), the
  victim is still killed at its deadline and requeued, and the third job takes the GPUs.

Every job's recorded end is checked against what its process did (the files it writes,
its pid's end). Usage: crash_test.py PATH_TO_GPUPOOL [-k NAME]. Exit 77 without root.
"""
import os
import signal
import sqlite3
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
VICTIM = os.path.join(HERE, "crash_victim.py")
GRACE = 10  # the victims' --grace, seconds
REASON = "requeued: preempted by job %d, of higher priority (10 > 0) (attempt 1)"


call = pooltest.call


alive = pooltest.alive


class SplitPool:
    """A server and one agent under one state directory; each can be killed and started
    again on it."""

    def __init__(self, node_timeout=30):
        self.node_timeout = node_timeout
        self.dir = pooltest.make_test_dir("gp-crashpre-")
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.sock)
        self.server = self.agent = self.token = None
        self.start_server()
        self.start_agent()
        self.wait_node_up()

    def _spawn(self, cmd, logname):
        with open(os.path.join(self.dir, logname), "ab") as log:
            return subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)

    def start_server(self):
        self.server = self._spawn([GPUPOOL, "server", "--config", "", "--state-dir", self.dir,
                                   "--port", "0", "--node-timeout", str(self.node_timeout)],
                                  "server.log")

        def up():
            try:
                return call(self.sock, "GET", "/v1/whoami")[0] == 200
            except OSError:
                self.assertRunning(self.server)
                return False
        pooltest.wait_for("the server", up, 30)
        if self.token is None:
            st, body = call(self.sock, "POST", "/v1/tokens", {"user": "crash", "kind": "node"})
            assert st == 201, (st, body)
            self.token = body["token"]

    def assertRunning(self, proc):
        if proc.poll() is not None:
            raise AssertionError("a daemon exited\n" + self.log())

    def start_agent(self):
        self.agent = self._spawn(
            [GPUPOOL, "agent", "--config", "", "--controller", "unix:" + self.sock, "--token",
             self.token, "--state-dir", self.dir, "--fake", NODE, "--node-name", "crash"],
            "agent.log")

    def wait_node_up(self):
        def up():
            st, body = call(self.sock, "GET", "/v1/nodes")
            return st == 200 and any(n["state"] == "up" for n in body["nodes"])
        pooltest.wait_for("the node up", up, 30)

    def kill9(self, proc):
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def log(self):
        return pooltest.log_tails(self.dir, ("server.log", "agent.log"), 5000)

    def stop(self):
        pooltest.stop_processes([self.agent, self.server])
        pooltest.kill_leftovers(self.dir)
        pooltest.remove_dir(self.dir)

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        assert st == 200, (st, body)
        return body.get("job", body)

    def holds(self):
        """The stored holds' (victim, preemptor) rows."""
        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(self.dir, "gpupool.db"), uri=True,
                             timeout=10)
        try:
            return sorted(db.execute("SELECT victim, preemptor FROM preempt_holds").fetchall())
        finally:
            db.close()

    def submit(self, *args):
        r = subprocess.run([GPUPOOL, "submit", "-D", self.dir] + list(args), capture_output=True,
                           text=True, env=self.env, timeout=60)
        assert r.returncode == 0, r.stderr
        return int(r.stdout.split()[-1])


class PreemptionCrashTest(unittest.TestCase):
    def setUp(self):
        # A short node timeout for the case whose agent stays away past it.
        short = self._testMethodName.endswith("_past_the_node_timeout")
        self.pool = SplitPool(node_timeout=2 if short else 30)
        self.marks = os.path.join(self.pool.dir, "marks")
        os.mkdir(self.marks)
        os.chmod(self.marks, 0o777)
        self.child = 0

    def tearDown(self):
        runs = self.runs()
        self.pool.stop()
        # A failed case may leave the victim (which ignores SIGTERM) behind its killed
        # supervisor.
        for line in runs:
            for pid in [int(x) for x in line[2:3] + line[4:5]] if line[0] == "start" else []:
                if pid > 0 and alive(pid):
                    os.kill(pid, signal.SIGKILL)

    def wait_job(self, jid, states, timeout=60):
        return pooltest.wait_job(self.pool.job, jid, states, timeout, log=self.pool.log)

    def wait_file(self, name, timeout=60):
        p = os.path.join(self.marks, name)

        def text():
            if not os.path.exists(p):
                return None
            with open(p) as f:
                return f.read()
        return pooltest.wait_for(name, text, timeout)

    def runs(self):
        p = os.path.join(self.marks, "runs")
        if not os.path.exists(p):
            return []
        with open(p) as f:
            return [line.split() for line in f if line.strip()]

    def stamp_job(self, name, *flags):
        """A 4-GPU job that writes MARKS/NAME.start and, two seconds later, NAME.end."""
        script = ("import time; t=lambda n: open(%r + n, 'w').write('%%.3f' %% time.time()); "
                  "t('.start'); time.sleep(2); t('.end')") % os.path.join(self.marks, name)
        return self.pool.submit("--gpus", "4", *flags, "--", "python3", "-c", script)

    def start_preemption(self, mode):
        """The victim running, the third job waiting, the preemptor submitted and the
        victim's SIGTERM received: (victim, third, preemptor, victim pid, deadline, term)."""
        victim = self.pool.submit("--gpus", "4", "--preemptible", "--min-runtime", "1s",
                                  "--grace", "%ds" % GRACE, "--", "python3", VICTIM, self.marks,
                                  mode)
        pooltest.wait_for("the victim's start", lambda: self.runs(), 30)
        pid = int(self.runs()[0][2])
        self.child = int(self.runs()[0][4])  # "ignore": its child, also to be killed
        self.assertEqual(self.child > 0, mode == "ignore")
        third = self.stamp_job("third")  # older than the preemptor
        j = self.wait_job(victim, ("RUNNING",), 30)
        pooltest.wait_for("the victim past its minimum run time",
                          lambda: time.time() - j["start_time_us"] / 1e6 >= 1.2, 30)
        preemptor = self.stamp_job("preemptor", "--priority", "10")
        deadline, term_at = self.wait_file("term").split()
        self.assertAlmostEqual(int(deadline), float(term_at) + GRACE, delta=1.5)
        return victim, third, preemptor, pid, int(deadline), float(term_at)

    def wait_gone(self, pid, timeout):
        """Waits for the victim's process and its child to end; when the last of them
        ended (a pooltest.Ended)."""
        pids = [pid] + ([self.child] if self.child else [])
        ends = pooltest.wait_ended("the victim and its child to end", pids, timeout).values()
        return pooltest.Ended(max(e.alive_at for e in ends), max(e.gone_at for e in ends))

    def check_requeued_and_rerun(self, victim, third, preemptor, gone):
        """The victim requeued once (attempt 1's reason), the preemptor run on its GPUs
        after the victim's process ended (`gone`) and before the older third job, then
        the victim's attempt 2."""
        again = pooltest.wait_requeued(self.pool.job, victim)
        if again["state"] == "PENDING":
            self.assertEqual(again["reason"], REASON % preemptor)
        self.assertEqual(again["preemptions"], 1, again)
        done = self.wait_job(preemptor, ("SUCCEEDED",))
        self.assertGreaterEqual(done["start_time_us"] / 1e6, gone.alive_at)
        self.assertGreaterEqual(float(self.wait_file("preemptor.start", 1)), gone.alive_at)
        after = self.wait_job(third, ("SUCCEEDED",))
        self.assertGreaterEqual(after["start_time_us"], done["end_time_us"])
        final = self.wait_job(victim, ("SUCCEEDED",))
        self.assertEqual((final["attempt"], final["preemptions"]), (2, 1))
        self.assertEqual([r[:2] for r in self.runs()], [["start", "1"], ["start", "2"],
                                                         ["end", "2"]])
        for name in ("preemptor", "third"):  # they really ran to their end
            self.wait_file(name + ".end", 1)
        self.assertEqual(self.pool.holds(), [])
        return done

    def crash_during_grace(self, which, back_after_the_end):
        """Kills the server or the agent at the victim's SIGTERM; starts it again half-way
        through the grace, or once the victim has been killed (its end reported late)."""
        victim, third, preemptor, pid, deadline, term_at = self.start_preemption("ignore")
        self.assertEqual(self.pool.holds(), [(victim, preemptor)])
        proc = self.pool.server if which == "server" else self.pool.agent
        self.pool.kill9(proc)
        if back_after_the_end:
            gone = self.wait_gone(pid, GRACE + 10)
        else:
            # Back half-way through the grace: a fresh grace from here would end well
            # after the deadline.
            pooltest.wait_for("half the grace", lambda: time.time() >= term_at + GRACE / 2,
                              GRACE)
        (self.pool.start_server if which == "server" else self.pool.start_agent)()
        held = self.pool.holds()
        if back_after_the_end and (victim, preemptor) not in held:
            # The victim's late end may already have reached the restarted controller, and
            # the preemptor started in its place, which ends the hold: the preemptor, not
            # another job, has the GPUs (the third's start is checked below).
            self.assertIn(self.pool.job(preemptor)["state"], ("ASSIGNED", "RUNNING", "SUCCEEDED"),
                          held)
        else:
            self.assertIn((victim, preemptor), held)
        if not back_after_the_end:
            j = self.pool.job(victim)
            self.assertEqual((j["state"], j.get("preempted_by")), ("RUNNING", preemptor), j)
            gone = self.wait_gone(pid, GRACE + 10)
        gone.assert_between(self, deadline - 1.5, deadline + 2.5)
        self.check_requeued_and_rerun(victim, third, preemptor, gone)

    def test_controller_killed_during_the_grace(self):
        self.crash_during_grace("server", False)

    def test_controller_killed_during_the_grace_and_back_after_the_victims_end(self):
        self.crash_during_grace("server", True)

    def test_agent_killed_during_the_grace(self):
        self.crash_during_grace("agent", False)

    def test_agent_killed_during_the_grace_and_back_after_the_victims_end(self):
        self.crash_during_grace("agent", True)

    def test_agent_killed_during_the_grace_past_the_node_timeout(self):
        # The node is lost during the grace (the victim requeued as any lost node's job);
        # the agent comes back before the deadline with the victim's supervisor still
        # running it: no job starts on its GPUs before its process has ended.
        victim, third, preemptor, pid, deadline, term_at = self.start_preemption("ignore")
        self.pool.kill9(self.pool.agent)
        lost = self.wait_job(victim, ("PENDING",), GRACE)
        self.assertTrue(alive(pid))
        self.pool.start_agent()
        gone = self.wait_gone(pid, GRACE + 10)
        self.assertLessEqual(gone.gone_at, deadline + 2.5)
        final = self.wait_job(victim, ("SUCCEEDED",))
        self.wait_job(preemptor, ("SUCCEEDED",))
        self.wait_job(third, ("SUCCEEDED",))
        for name in ("preemptor", "third"):
            self.assertGreaterEqual(float(self.wait_file(name + ".start", 1)), gone.alive_at, name)
        starts = [r for r in self.runs() if r[0] == "start"]
        self.assertEqual([r[1] for r in starts], ["1", "2"])
        self.assertGreaterEqual(float(starts[1][3]), gone.alive_at)
        self.assertEqual(final["attempt"], 2)
        # Requeued as preempted, once, the node's loss named.
        self.assertEqual(lost["preemptions"], 1, lost)
        self.assertTrue(lost["reason"].startswith(REASON.split(" (attempt")[0] % preemptor + "; "),
                        lost["reason"])
        self.assertTrue(lost["reason"].endswith("(attempt 1)"), lost["reason"])

    def test_a_victim_that_finishes_its_work_during_the_grace_is_requeued_once(self):
        victim, third, preemptor, pid, deadline, term_at = self.start_preemption("finish")
        finished = float(self.wait_file("finished"))
        self.assertLess(finished, deadline)
        self.check_requeued_and_rerun(victim, third, preemptor,
                                      self.wait_gone(pid, GRACE + 10))

    def test_a_victim_whose_work_ended_before_its_stop_arrived_succeeded(self):
        victim = self.pool.submit("--gpus", "4", "--preemptible", "--min-runtime", "1s",
                                  "--grace", "%ds" % GRACE, "--", "sh", "-c",
                                  'echo "start $GPUPOOL_ATTEMPT" >> %s/runs; '
                                  'while [ ! -e %s/go ]; do sleep 0.05; done; '
                                  'echo "end $GPUPOOL_ATTEMPT" >> %s/runs'
                                  % (self.marks, self.marks, self.marks))
        j = self.wait_job(victim, ("RUNNING",), 30)
        pooltest.wait_for("the victim past its minimum run time",
                          lambda: time.time() - j["start_time_us"] / 1e6 >= 1.2, 30)
        # The agent stops (its stop orders wait), the victim is preempted, and its work ends
        # before the stop order can reach it.
        os.kill(self.pool.agent.pid, signal.SIGSTOP)
        try:
            preemptor = self.stamp_job("preemptor", "--priority", "10")
            pooltest.wait_for("the preemption",
                              lambda: self.pool.job(victim).get("preempted_by") == preemptor, 30)
            open(os.path.join(self.marks, "go"), "w").close()
            pooltest.wait_for("the victim's end",
                              lambda: ["end", "1"] in [r[:2] for r in self.runs()], 30)
        finally:
            os.kill(self.pool.agent.pid, signal.SIGCONT)
        final = self.wait_job(victim, pooltest.FINAL_STATES + ("PENDING",), 30)
        self.assertEqual(final["state"], "SUCCEEDED", final)
        self.assertEqual((final["attempt"], final.get("preemptions", 0), final.get("exit_code")),
                         (1, 0, 0))
        self.wait_job(preemptor, ("SUCCEEDED",))
        self.wait_file("preemptor.end", 1)
        self.assertEqual([r[:2] for r in self.runs()], [["start", "1"], ["end", "1"]])
        self.assertEqual(self.pool.job(victim)["state"], "SUCCEEDED")

    def test_the_preemptor_cancelled_during_the_grace(self):
        victim, third, preemptor, pid, deadline, term_at = self.start_preemption("ignore")
        self.assertEqual(self.pool.holds(), [(victim, preemptor)])
        r = subprocess.run([GPUPOOL, "cancel", str(preemptor)], capture_output=True, text=True,
                           env=self.pool.env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_job(preemptor, ("CANCELLED",), 30)
        pooltest.wait_for("the hold's row deleted", lambda: self.pool.holds() == [], 30)
        # The SIGTERM cannot be taken back: the victim is still stopped at its deadline.
        self.assertEqual(self.pool.job(victim).get("preempted_by"), preemptor)
        self.wait_gone(pid, GRACE + 10).assert_between(self, deadline - 1.5, deadline + 2.5)
        final = self.wait_job(victim, ("SUCCEEDED",))
        self.assertEqual((final["attempt"], final["preemptions"]), (2, 1))
        # No hold keeps the GPUs: the third job runs, without the hold's 60 s margin.
        after = self.wait_job(third, ("SUCCEEDED",), 30)
        self.assertLess(after["start_time_us"] / 1e6, deadline + 30)
        self.assertFalse(os.path.exists(os.path.join(self.marks, "preemptor.start")))
        self.assertEqual([r[:2] for r in self.runs()], [["start", "1"], ["start", "2"],
                                                         ["end", "2"]])


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("crash_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main(verbosity=2)
