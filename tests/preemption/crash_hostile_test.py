#!/usr/bin/env python3
"""Preemption as a crash-happy operator and a hostile user see it (docs/preemption.md,
"Crashes during a preemption"): a `gpupool server` and one `gpupool agent` per fake 4-GPU
node, on one SQLite store, each agent in a state directory it makes itself, so that every
daemon can be killed with SIGKILL on its own. The victims (tests/preemption/gang_victim.py)
ignore SIGTERM and leave two helpers that ignore it too, one of them outside the task's
process group (setsid).

- The controller is killed during the victim's grace, started, killed again and started
  again half-way through the grace: the victim is SIGKILLed at its first deadline,
  requeued exactly once (attempt 2, the preemption named in its reason), the preemptor
  starts on its GPUs after its end, and `preempted_gpu_hours` and `gpupool usage` count
  the stopped attempt once.
- The same with the victim's agent killed and started again (twice); and with the agent
  killed, the controller restarted meanwhile, and the owner's `checkpoint-done` reaching
  the adopted job at once.
- `gpupool checkpoint-done` from another Unix user on the job in its grace is refused
  and changes nothing; the owner's after the job has ended is a clear error.
- A gang packed on one node (one task checkpoints at once, the other ignores SIGTERM) and
  a gang spread over two nodes (the agent of one killed during the grace) are preempted
  whole and requeued whole.

Throughout, a watcher reads every job's state (no job is ever LOST); at the end no
attempt ran while another of the same job still had a process, and no job process or
supervisor is left. Usage: crash_hostile_test.py PATH_TO_GPUPOOL [-k NAME]. Exit 77
without root.
"""
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
VICTIM = os.path.join(HERE, "gang_victim.py")
GRACE = 8  # the victims' --grace, seconds
REASON = "requeued: preempted by job %d, of higher priority (10 > 0) (attempt 1)"
HOSTILE = "nobody"  # a second, unprivileged Unix user


call = pooltest.call


def call_text(sock, path):
    conn = pooltest.UnixConnection(sock, 10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


alive = pooltest.alive


class Pool:
    """A server and `nodes` agents under one test directory; each daemon can be killed and
    started again. Agent i's state directory (DIR/agentI) is made by the agent itself."""

    def __init__(self, nodes):
        self.dir = pooltest.make_test_dir("gp-crashhostile-")
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.sock)
        # A copy of the binary another user may run wherever the build tree is.
        self.bin = os.path.join(self.dir, "gpupool")
        shutil.copy2(GPUPOOL, self.bin)
        os.chmod(self.bin, 0o755)
        self.server = None
        self.agents = [None] * nodes

    def start(self):
        self.start_server()
        for i in range(len(self.agents)):
            self.start_agent(i)
        self.wait_nodes_up()

    def _spawn(self, cmd, logname):
        with open(os.path.join(self.dir, logname), "ab") as log:
            return subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)

    def start_server(self):
        self.server = self._spawn([GPUPOOL, "server", "--config", "", "--state-dir", self.dir,
                                   "--port", "0"], "server.log")

        def up():
            try:
                return call(self.sock, "GET", "/v1/whoami")[0] == 200
            except OSError:
                if self.server.poll() is not None:
                    raise AssertionError("the server exited\n" + self.log())
                return False
        pooltest.wait_for("the server", up, 30)

    def agent_dir(self, i):
        return os.path.join(self.dir, "agent%d" % i)

    def start_agent(self, i):
        self.agents[i] = self._spawn(
            [GPUPOOL, "agent", "--config", "", "--controller", "unix:" + self.sock,
             "--state-dir", self.agent_dir(i), "--fake", NODE, "--node-name", "node%d" % i,
             "--address", "127.0.0.%d" % (i + 2)], "agent%d.log" % i)

    def wait_nodes_up(self):
        def up():
            st, body = call(self.sock, "GET", "/v1/nodes")
            return st == 200 and sum(n["state"] == "up" for n in body["nodes"]) == len(
                self.agents)
        pooltest.wait_for("the nodes up", up, 30)

    def kill9(self, proc):
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def log(self):
        return pooltest.log_tails(self.dir, None, 4000)

    def stop(self):
        pooltest.stop_processes(self.agents + [self.server])
        for i in range(len(self.agents)):
            pooltest.kill_leftovers(self.agent_dir(i))
        pooltest.remove_dir(self.dir)

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        assert st == 200, (st, body)
        return body.get("job", body)

    def cli(self, *args, user=None):
        cmd = [self.bin] + list(args)
        if user is not None:
            pw = pwd.getpwnam(user)
            cmd = ["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid,
                   "--clear-groups"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=60,
                              cwd="/")

    def submit(self, *args):
        r = self.cli("submit", "-D", self.dir, *args)
        assert r.returncode == 0, r.stderr
        return int(r.stdout.split()[-1])


class Watcher(threading.Thread):
    """Reads every watched job's state every 50 ms (through the controller's restarts):
    `seen` maps a job to the states it was seen in."""

    def __init__(self, pool):
        super().__init__(daemon=True)
        self.pool = pool
        self.jobs = []
        self.seen = {}
        self.halt = threading.Event()

    def run(self):
        while not self.halt.wait(0.05):
            for jid in list(self.jobs):
                try:
                    st, body = call(self.pool.sock, "GET", "/v1/jobs/%d" % jid, timeout=2)
                except OSError:
                    continue  # the controller is down
                if st == 200:
                    self.seen.setdefault(jid, set()).add(body.get("job", body)["state"])


class CrashHostileTest(unittest.TestCase):
    NODES = {"test_a_gang_spread_over_two_nodes_is_preempted_and_requeued_whole": 2}

    def setUp(self):
        self.pool = Pool(self.NODES.get(self._testMethodName, 1))
        self.addCleanup(self.pool.stop)  # also when setUp fails
        self.pool.start()
        self.marks = os.path.join(self.pool.dir, "marks")
        os.mkdir(self.marks)
        os.chmod(self.marks, 0o777)
        self.ended = {}  # task -> when its first attempt's process ended (pooltest.Ended)
        self.watcher = Watcher(self.pool)
        self.watcher.start()

    def tearDown(self):
        self.watcher.halt.set()
        self.watcher.join()
        # A failed case may leave them behind its killed supervisors.
        for pid in self.attempt_one_pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

    # --- what the victim's processes wrote ---
    def lines(self, kind):
        p = os.path.join(self.marks, "runs")
        if not os.path.exists(p):
            return []
        with open(p) as f:
            return [line.split()[1:] for line in f if line.startswith(kind + " ")]

    def attempt_one_pids(self):
        return [int(x) for r in self.lines("start") if r[0] == "1" for x in (r[2], r[4], r[5])
                if int(x) > 0]

    def wait_job(self, jid, states, timeout=60):
        return pooltest.wait_job(self.pool.job, jid, states, timeout, log=self.pool.log)

    def watch(self, *jids):
        self.watcher.jobs.extend(jids)

    # --- the steps of a case ---
    def start_preemption(self, tasks, gpus, mode="ignore"):
        """The victim (`tasks` x `gpus`) running all its tasks past its minimum run time,
        then a 4-GPU preemptor of higher priority, and every task's SIGTERM received:
        (victim, preemptor, the deadline every task read)."""
        victim = self.pool.submit("--tasks", str(tasks), "--gpus", str(gpus), "--preemptible",
                                  "--min-runtime", "1s", "--grace", "%ds" % GRACE, "--",
                                  "python3", VICTIM, self.marks, mode)
        self.watch(victim)
        pooltest.wait_for("every task's start", lambda: len(self.lines("start")) == tasks, 30)
        j = self.wait_job(victim, ("RUNNING",), 30)
        pooltest.wait_for("the victim past its minimum run time",
                          lambda: time.time() - j["start_time_us"] / 1e6 >= 1.2, 30)
        preemptor = self.pool.submit("--gpus", "4", "--priority", "10", "--", "python3", "-c",
                                     "import time; open(%r, 'w').write('%%.3f' %% time.time())"
                                     % os.path.join(self.marks, "preemptor.start"))
        self.watch(preemptor)
        terms = pooltest.wait_for("every task's SIGTERM",
                                  lambda: len(self.lines("term")) == tasks and self.lines("term"),
                                  30)
        deadlines = {int(t[3]) for t in terms}
        self.assertEqual(len(deadlines), 1, terms)  # one deadline for the whole gang
        deadline = deadlines.pop()
        for t in terms:
            self.assertAlmostEqual(deadline, float(t[2]) + GRACE, delta=1.5)
        return victim, preemptor, deadline

    def wait_attempt_one_gone(self, timeout=GRACE + 15):
        """Waits for every process of the victim's first attempt (tasks and helpers) to
        end; returns when the last task's main process ended, a pooltest.Ended
        (`self.ended`: when each task's did)."""
        mains = {int(r[2]): r[1] for r in self.lines("start") if r[0] == "1"}
        ends = pooltest.wait_ended("the first attempt's tasks to end", list(mains), timeout)
        self.ended = {mains[pid]: e for pid, e in ends.items()}
        gone = pooltest.Ended(max(e.alive_at for e in ends.values()),
                              max(e.gone_at for e in ends.values()))
        # The helpers die with their tasks' cgroups; a loaded machine can take seconds to
        # reap them (5 s was too short once with five builds running).
        pooltest.wait_for("the first attempt's helpers to end",
                          lambda: not any(alive(p) for p in self.attempt_one_pids()), 20, 0.02)
        return gone

    def check_outcome(self, victim, preemptor, gone, tasks, gpus):
        """The victim requeued once, whole (attempt 2 ran every task once, after attempt
        1 had ended), the preemptor started after it, the preempted GPU-hours counted
        once, no job ever LOST, nothing left running."""
        final = self.wait_job(victim, ("SUCCEEDED",))
        self.assertEqual((final["attempt"], final["preemptions"]), (2, 1), final)
        pre = self.wait_job(preemptor, ("SUCCEEDED",))
        with open(os.path.join(self.marks, "preemptor.start")) as f:
            self.assertGreaterEqual(float(f.read()), gone.alive_at)
        self.assertGreaterEqual(pre["start_time_us"] / 1e6, gone.alive_at)
        starts = self.lines("start")
        self.assertEqual(sorted((r[0], r[1]) for r in starts),
                         sorted((a, str(t)) for a in ("1", "2") for t in range(tasks)))
        for r in starts:
            if r[0] == "2":
                self.assertGreaterEqual(float(r[3]), gone.alive_at, "attempt 2 ran early")
        self.assertEqual(sorted(r[1] for r in self.lines("end")), [str(t) for t in range(tasks)])
        # The stopped attempt's GPU-hours, once: each task's GPUs from its start to its end.
        ran = sum(gpus * (self.ended[r[1]].gone_at - float(r[3])) for r in starts if r[0] == "1")
        self.assertAlmostEqual(final["preempted_gpu_hours"] * 3600, ran, delta=gpus * tasks * 1.5)
        self.assertIn("Preemptions: 1, costing", self.pool.cli("show", str(victim)).stdout)
        self.check_usage(final, pre)
        for jid, states in self.watcher.seen.items():
            self.assertNotIn("LOST", states, "job %d" % jid)
        self.check_nothing_left()
        return final

    def check_usage(self, victim, preemptor):
        """`gpupool usage` counts every attempt's GPUs once: the victim's stopped attempt
        (its preempted GPU-hours), its second, and the preemptor's."""
        r = self.pool.cli("usage", "--since", "1h", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json.loads(r.stdout)["rows"]
        got = sum(row["gpu_hours"] for row in rows) * 3600
        want = victim["preempted_gpu_hours"] * 3600
        for j in (victim, preemptor):
            gpus = sum(len(p["gpu_uuids"]) * p.get("gpu_milli", 1000) / 1000.0
                       for p in j["placement"])
            want += gpus * (j["end_time_us"] - j["start_time_us"]) / 1e6
        self.assertAlmostEqual(got, want, delta=1.0)
        st, text = call_text(self.pool.sock, "/metrics")
        self.assertEqual(st, 200, text)
        allocated = sum(float(line.split()[-1]) for line in text.splitlines()
                        if line.startswith("gpupool_allocated_gpu_seconds_total{"))
        self.assertAlmostEqual(allocated, want, delta=1.0)

    def check_nothing_left(self):
        for pid in self.attempt_one_pids():
            self.assertFalse(alive(pid), "job process %d outlived its attempt" % pid)
        for i in range(len(self.pool.agents)):
            pooltest.wait_for("no supervisor left on node %d" % i,
                              lambda: not pooltest._shims_under(self.pool.agent_dir(i)), 10)

    def assert_killed_at(self, gone, deadline):
        gone.assert_between(self, deadline - 1.5, deadline + 2.5)

    def requeued(self, victim, preemptor):
        """The victim requeued once, as preempted by `preemptor`. Under load its wait can
        be over before a poll sees it (the preemptor ended and attempt 2 ran), so a victim
        already past its wait counts too, by its attempt."""
        again = pooltest.wait_requeued(self.pool.job, victim)
        if again["state"] == "PENDING":
            self.assertEqual(again["reason"], REASON % preemptor)
        self.assertEqual(again["preemptions"], 1, again)
        return again

    # --- the cases ---
    def test_controller_killed_twice_during_the_grace(self):
        victim, preemptor, deadline = self.start_preemption(1, 4)
        self.pool.kill9(self.pool.server)
        self.pool.start_server()
        self.pool.kill9(self.pool.server)
        term = min(float(t[2]) for t in self.lines("term"))
        pooltest.wait_for("half the grace", lambda: time.time() >= term + GRACE / 2, GRACE)
        self.pool.start_server()
        j = self.pool.job(victim)
        self.assertEqual((j["state"], j.get("preempted_by")), ("RUNNING", preemptor), j)
        gone = self.wait_attempt_one_gone()
        self.assert_killed_at(gone, deadline)
        self.requeued(victim, preemptor)
        self.check_outcome(victim, preemptor, gone, 1, 4)

    def test_agent_killed_twice_during_the_grace(self):
        victim, preemptor, deadline = self.start_preemption(1, 4)
        self.pool.kill9(self.pool.agents[0])
        self.pool.start_agent(0)
        self.pool.wait_nodes_up()
        self.pool.kill9(self.pool.agents[0])
        self.pool.start_agent(0)
        gone = self.wait_attempt_one_gone()
        self.assert_killed_at(gone, deadline)
        self.requeued(victim, preemptor)
        self.check_outcome(victim, preemptor, gone, 1, 4)

    def test_checkpoint_done_reaches_a_job_adopted_across_both_daemons_restarts(self):
        victim, preemptor, deadline = self.start_preemption(1, 4)
        self.pool.kill9(self.pool.agents[0])
        self.pool.kill9(self.pool.server)
        self.pool.start_server()
        self.pool.start_agent(0)
        self.pool.wait_nodes_up()
        r = self.pool.cli("checkpoint-done", str(victim))
        self.assertEqual(r.returncode, 0, r.stderr)
        said = time.time()
        gone = self.wait_attempt_one_gone()
        self.assertLess(gone.gone_at, said + 3)  # at once, not at the deadline
        self.assertLess(gone.gone_at, deadline - 2)
        self.requeued(victim, preemptor)
        self.check_outcome(victim, preemptor, gone, 1, 4)

    def test_checkpoint_done_from_another_user_and_after_the_end(self):
        victim, preemptor, deadline = self.start_preemption(1, 4)
        for args in (["checkpoint-done", str(victim)], ["checkpoint-done"]):
            r = self.pool.cli(*args, user=HOSTILE) if len(args) == 2 else subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", self.pool.bin]
                + args, capture_output=True, text=True, cwd="/",
                env=dict(self.pool.env, GPUPOOL_JOB_ID=str(victim)))
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn("job %d" % victim, r.stderr)
            self.assertNotIn("has checkpointed", r.stdout)
        j = self.pool.job(victim)
        self.assertEqual((j["state"], j.get("checkpoint_done", False)), ("RUNNING", False), j)
        self.assertTrue(all(alive(p) for p in self.attempt_one_pids()))
        gone = self.wait_attempt_one_gone()
        self.assert_killed_at(gone, deadline)  # its grace, not shortened by the stranger
        self.requeued(victim, preemptor)
        final = self.check_outcome(victim, preemptor, gone, 1, 4)
        # Its owner, after its end: refused, saying why; the stranger learns nothing more.
        r = self.pool.cli("checkpoint-done", str(victim))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("job %d is SUCCEEDED and not being preempted" % victim, r.stderr)
        r = self.pool.cli("checkpoint-done", str(victim), user=HOSTILE)
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn("SUCCEEDED", r.stderr)
        self.assertEqual(self.pool.job(victim), final)

    def test_a_gang_packed_on_one_node_is_preempted_and_requeued_whole(self):
        # Task 0 checkpoints and exits at its SIGTERM; task 1 ignores it: the gang keeps
        # its GPUs, and stays one attempt, until task 1 is killed at the deadline.
        victim, preemptor, deadline = self.start_preemption(2, 2, mode="mixed")
        gone = self.wait_attempt_one_gone()
        self.assert_killed_at(gone, deadline)
        self.requeued(victim, preemptor)
        self.check_outcome(victim, preemptor, gone, 2, 2)

    def test_a_gang_spread_over_two_nodes_is_preempted_and_requeued_whole(self):
        victim, preemptor, deadline = self.start_preemption(2, 4)
        hosts = sorted(p["node"] for p in self.pool.job(victim)["placement"])
        self.assertEqual(hosts, ["node0", "node1"])
        self.pool.kill9(self.pool.agents[1])
        self.pool.start_agent(1)
        gone = self.wait_attempt_one_gone()
        self.assert_killed_at(gone, deadline)
        self.requeued(victim, preemptor)
        self.check_outcome(victim, preemptor, gone, 2, 4)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("crash_hostile_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main(verbosity=2)
