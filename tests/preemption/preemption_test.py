#!/usr/bin/env python3
"""Preemption in the live pool end to end (issue 28 item 5, docs/preemption.md): a real
`gpupool up` on the fake 4-GPU node (tests/integration/node-4gpu.json).

- A preemptible 4-GPU job, past its --min-runtime, is preempted by a job of higher
  priority: it gets SIGTERM with its deadline already in $GPUPOOL_PREEMPT_DEADLINE_FILE
  (now + its --grace), the preemptor does not start before it has exited, it is requeued
  (the reason names the preemptor, `preemptions` 1) and later finishes as attempt 2;
  `gpupool show` and /metrics count the preemption. A third 4-GPU job, submitted before
  the preemptor (so ahead of it in the fair order, and not allowed to preempt: same user
  and priority as the victim), does not take the victim's GPUs: they are held for the
  preemptor, which starts first.
- A preemptible job inside its --min-runtime is not chosen.
- A victim that ignores SIGTERM and says `gpupool checkpoint-done` is killed at once, not
  after its 120 s grace.
- In a preempted gang of two tasks, task 1 says `gpupool checkpoint-done` at once and is
  killed at once; task 0 keeps its grace and still saves its shard, 3 s later.
- The pool is killed and started again during a victim's grace: the hold was stored with
  the preemption, so the older third job still does not take the victim's GPUs when the
  victim ends; the preemptor does.

Usage: preemption_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
VICTIM = os.path.join(HERE, "victim.py")
GANG_VICTIM = os.path.join(HERE, "gang_ckpt_victim.py")


class PreemptionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pooltest.make_test_dir("gp-preempt-")
        cls.sock = os.path.join(cls.dir, "gpupool.sock")
        cls.server = "unix:" + cls.sock
        cls.env = dict(os.environ, GPUPOOL_SERVER=cls.server)
        cls.log = os.path.join(cls.dir, "server.log")
        cls.start_pool()

    @classmethod
    def start_pool(cls):
        log = open(cls.log, "ab")
        cls.pool = subprocess.Popen([GPUPOOL, "up", "--state-dir", cls.dir, "--port", "0",
                                     "--fake", NODE, "--telemetry-interval", "0"],
                                    stdout=log, stderr=log, start_new_session=True)
        log.close()  # the pool has its own
        deadline = time.time() + 30
        while " up " not in cls.cli("nodes").stdout:
            if time.time() > deadline:
                raise AssertionError("the pool did not come up: " + cls.server_log())
            time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes([cls.pool])
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def cli(cls, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True,
                              env=cls.env, timeout=60)

    @classmethod
    def server_log(cls):
        with open(cls.log, errors="replace") as f:
            return f.read()[-6000:]

    @classmethod
    def job(cls, jid):
        r = cls.cli("show", str(jid), "--json")
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        return j.get("job", j)

    def submit(self, *args):
        r = self.cli("submit", "-D", self.dir, *args)  # output files there
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def markers(self, name):
        d = os.path.join(self.dir, name)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o777)
        return d

    def read(self, d, name):
        p = os.path.join(d, name)

        def text():
            if not os.path.exists(p):
                return None
            with open(p) as f:
                return f.read()
        return pooltest.wait_for(name, text, 60)

    def victim(self, marks, mode, *flags):
        return self.submit("--gpus", "4", "--preemptible", *flags, "--", "python3", VICTIM,
                           marks, mode, GPUPOOL, self.server)

    def wait_running_for(self, jid, seconds):
        j = pooltest.wait_job(self.job, jid, ("RUNNING",), 30, log=self.server_log)
        pooltest.wait_for("job %d running %d s" % (jid, seconds),
                          lambda: time.time() - j["start_time_us"] / 1e6 >= seconds, 30)

    def metric(self, name):
        conn = pooltest.UnixConnection(self.sock)
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read().decode()
        conn.close()
        self.assertEqual(r.status, 200, body)
        m = re.search(r"^%s (\S+)$" % name, body, re.M)
        self.assertIsNotNone(m, body[-2000:])
        return float(m.group(1))

    def test_a_higher_priority_job_preempts_a_preemptible_one_which_is_requeued(self):
        marks = self.markers("a")
        victim = self.victim(marks, "exit", "--min-runtime", "2s", "--grace", "30s")
        self.assertTrue(self.read(marks, "started").strip().endswith("/preempt_deadline"))
        third = self.submit("--gpus", "4", "--", "true")  # older than the preemptor
        self.wait_running_for(victim, 2)
        before = self.metric("gpupool_preemptions_total")
        started = os.path.join(marks, "preemptor")
        urgent = self.submit("--gpus", "4", "--priority", "10", "--", "python3", "-c",
                             "import time; open(%r, 'w').write('%%.3f' %% time.time()); "
                             "time.sleep(2)" % started)
        path, deadline, term_at = self.read(marks, "term").split()
        self.assertTrue(path.endswith("/preempt_deadline"), path)
        # The deadline was in the file before the SIGTERM: its grace from now.
        self.assertTrue(int(term_at.split(".")[0]) + 25 <= int(deadline) <= time.time() + 31,
                        (deadline, term_at))
        # Requeued as soon as it exited: waiting (for its preemptor), the reason naming it.
        requeued = pooltest.wait_job(self.job, victim, ("PENDING",), 30, log=self.server_log)
        self.assertEqual(requeued["preemptions"], 1)
        self.assertEqual(requeued["reason"],
                         "requeued: preempted by job %d, of higher priority (10 > 0) (attempt 1)"
                         % urgent)
        self.assertIn("[preempted 1x]", self.cli("queue").stdout)
        # Its preemptor started: the victim no longer says it waits for it (the pass that
        # started it left that reason for a whole scheduler period).
        pooltest.wait_job(self.job, urgent, ("RUNNING", "SUCCEEDED"), 30, log=self.server_log)
        self.assertNotIn("which preempted it", self.job(victim).get("pending_reason", ""))
        done = pooltest.wait_job(self.job, urgent, ("SUCCEEDED",), 60, log=self.server_log)
        # It never ran on GPUs the victim still held.
        exited = float(self.read(marks, "exited"))
        self.assertGreaterEqual(float(self.read(marks, "preemptor")), exited)
        self.assertGreaterEqual(done["start_time_us"] / 1e6, exited - 0.01)
        # The third job, older, waited for the preemptor to end (its GPUs were held).
        after = pooltest.wait_job(self.job, third, ("SUCCEEDED",), 60, log=self.server_log)
        self.assertGreaterEqual(after["start_time_us"], done["end_time_us"])
        again = pooltest.wait_job(self.job, victim, ("SUCCEEDED",), 60, log=self.server_log)
        self.assertEqual(again["attempt"], 2)
        self.assertEqual(again["preemptions"], 1)
        self.assertGreater(again["preempted_gpu_hours"], 0)
        self.assertEqual(self.read(marks, "attempt2"), "ran\n")
        show = self.cli("show", str(victim)).stdout
        self.assertIn("Preemptions: 1, costing", show)
        self.assertEqual(self.metric("gpupool_preemptions_total"), before + 1)
        self.assertGreater(self.metric("gpupool_preempted_gpu_seconds_total"), 0)

    def test_the_hold_outlives_a_restart_of_the_pool_during_the_grace(self):
        marks = self.markers("d")
        victim = self.victim(marks, "wait", "--min-runtime", "1s", "--grace", "60s")
        self.read(marks, "started")
        third = self.submit("--gpus", "4", "--", "true")  # older than the preemptor
        self.wait_running_for(victim, 1)
        urgent = self.submit("--gpus", "4", "--priority", "10", "--", "true")
        self.read(marks, "term")
        # Killed during the grace (its jobs' supervisors run on), then started again.
        pooltest.stop_processes([type(self).pool], sig=signal.SIGKILL)
        type(self).start_pool()
        self.assertEqual(self.job(victim)["state"], "RUNNING")
        with open(os.path.join(marks, "go"), "w"):
            pass
        done = pooltest.wait_job(self.job, urgent, ("SUCCEEDED",), 60, log=self.server_log)
        after = pooltest.wait_job(self.job, third, ("SUCCEEDED",), 60, log=self.server_log)
        self.assertGreaterEqual(after["start_time_us"], done["end_time_us"])
        again = pooltest.wait_job(self.job, victim, ("SUCCEEDED",), 60, log=self.server_log)
        self.assertEqual(again["preemptions"], 1)

    def test_a_job_inside_its_minimum_run_time_is_not_preempted(self):
        marks = self.markers("b")
        victim = self.victim(marks, "exit", "--min-runtime", "1h")
        self.read(marks, "started")
        urgent = self.submit("--gpus", "4", "--priority", "10", "--", "true")
        # Passes run every second and on each change: several have seen the urgent job.
        pooltest.wait_for("a pending reason", lambda: self.job(urgent).get("pending_reason"))
        deadline = time.time() + 4
        while time.time() < deadline:
            j = self.job(victim)
            self.assertEqual(j["state"], "RUNNING")
            self.assertNotIn("preempted_by", j)
            self.assertNotIn("preempting", self.job(urgent).get("pending_reason", ""))
            time.sleep(0.5)
        self.assertFalse(os.path.exists(os.path.join(marks, "term")))
        self.assertEqual(self.cli("cancel", str(victim), str(urgent)).returncode, 0)
        pooltest.wait_job(self.job, victim, pooltest.FINAL_STATES, 30, log=self.server_log)

    def test_checkpoint_done_ends_the_grace_at_once(self):
        marks = self.markers("c")
        victim = self.victim(marks, "checkpoint", "--min-runtime", "1s", "--grace", "120s")
        self.read(marks, "started")
        self.wait_running_for(victim, 1)
        urgent = self.submit("--gpus", "4", "--priority", "10", "--", "true")
        # It ignores SIGTERM and says checkpoint-done, which has it killed at once (before
        # it could note that the command returned): not after its 120 s grace.
        term_at = float(self.read(marks, "term").split()[2])
        urgent_job = pooltest.wait_job(self.job, urgent, ("SUCCEEDED",), 30, log=self.server_log)
        self.assertLess(urgent_job["start_time_us"] / 1e6 - term_at, 15)
        again = pooltest.wait_job(self.job, victim, ("SUCCEEDED",), 60, log=self.server_log)
        self.assertEqual(again["preemptions"], 1)
        # Not being preempted any more: refused, naming why.
        r = self.cli("checkpoint-done", str(victim))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not being preempted", r.stderr)

    def test_a_gangs_task_says_checkpoint_done_for_itself_alone(self):
        marks = self.markers("g")
        victim = self.submit("--tasks", "2", "--gpus", "2", "--preemptible", "--min-runtime",
                             "1s", "--grace", "60s", "--", "python3", GANG_VICTIM, marks,
                             GPUPOOL, self.server)
        self.read(marks, "started0")
        self.read(marks, "started1")
        self.wait_running_for(victim, 1)
        urgent = self.submit("--gpus", "4", "--priority", "10", "--", "true")
        said_at = float(self.read(marks, "saying1"))
        # Task 0 kept its grace after task 1's word and saved its shard (red team 7,
        # finding 2: the whole job's grace ended and task 0 was killed mid-save).
        self.assertEqual(self.read(marks, "shard0"), "saved\n")
        # Task 1, ignoring SIGTERM, was killed at once, not at the 60 s deadline.
        urgent_job = pooltest.wait_job(self.job, urgent, ("SUCCEEDED",), 30, log=self.server_log)
        self.assertLess(urgent_job["start_time_us"] / 1e6 - said_at, 15)
        again = pooltest.wait_job(self.job, victim, ("SUCCEEDED",), 60, log=self.server_log)
        self.assertEqual(again["preemptions"], 1)
        self.assertEqual(self.read(marks, "attempt2.0"), "ran\n")
        self.assertEqual(self.read(marks, "attempt2.1"), "ran\n")

    def test_the_admins_defaults_make_a_users_jobs_preemptible(self):
        r = self.cli("limits", "set", "--user", "root", "--preemptible", "yes", "--min-runtime",
                     "30m", "--grace", "45s")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"user root .*yes, min 30m.*, grace 45s")
        try:
            j = self.job(self.submit("--gpus", "1", "--", "true"))
            self.assertTrue(j.get("preemptible"), j)
            self.assertEqual(j["min_runtime_s"], 1800)
            self.assertEqual(j["preempt_grace_s"], 45)
            own = self.job(self.submit("--gpus", "1", "--preemptible", "--grace", "10s", "--",
                                       "true"))
            self.assertEqual(own["preempt_grace_s"], 10)  # its own wins
            bad = self.cli("limits", "set", "--user", "root", "--preemptible", "maybe")
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("--preemptible maybe: yes, no, or none", bad.stderr)
        finally:
            r = self.cli("limits", "set", "--user", "root", "--preemptible", "none",
                         "--min-runtime", "none", "--grace", "none")
            self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("PREEMPTIBLE", r.stdout)
        self.assertFalse(self.job(self.submit("--gpus", "1", "--", "true")).get("preemptible"))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("preemption_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
