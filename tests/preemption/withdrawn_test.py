#!/usr/bin/env python3
"""A preemptor withdrawn in its victim's grace (docs/preemption.md, "A preemptor
withdrawn"), end to end on a real `gpupool up` with the fake 4-GPU node: root's
preemptible 4-GPU job runs; nobody, below their share, submits a 1-GPU job, which
preempts it, and cancels it during the victim's grace (the victim ignores SIGTERM, so its
grace lasts). The victim is still stopped and requeued, and starts again. Nobody's next job, which could preempt it again once it has
run its minimum, does not while nobody is barred (`--preempt-withdraw-cooldown`, 30 s
here): its pending reason says why, /metrics and the server's log name the withdrawal.
Once the bar has ended, nobody's job preempts the victim. Before the fix, nobody's second
job preempted the victim at once (and a third could, and so on).

Usage: withdrawn_test.py PATH_TO_GPUPOOL. Exit 77 without root.
"""
import os
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
NOBODY = 65534
COOLDOWN = 30  # seconds
GRACE = 10  # the victim ignores SIGTERM: it ends at its SIGKILL, GRACE s after
BAR = "user nobody preempts no other user's job until "


class WithdrawnPreemptorTest(unittest.TestCase):
    def setUp(self):
        self.pool = pooltest.FakeNodePool(
            GPUPOOL, NODE, "gp-withdrawn-",
            extra_args=["--telemetry-interval", "0", "--preempt-withdraw-cooldown",
                        "%ds" % COOLDOWN])
        self.work = os.path.join(self.pool.dir, "work")  # nobody's jobs run here
        os.mkdir(self.work)
        os.chmod(self.work, 0o777)

    def tearDown(self):
        self.pool.stop()

    def job(self, jid):
        return self.pool.job(jid)

    def wait(self, what, pred, timeout=60):
        return pooltest.wait_for(what, pred, timeout)

    def as_nobody(self, *args):
        r = subprocess.run(
            ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
             GPUPOOL] + list(args), capture_output=True, text=True, env=self.pool.env,
            timeout=60, cwd=self.work)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def nobody_submits(self):
        out = self.as_nobody("submit", "-D", self.work, "--gpus", "1", "--cpus", "0.1", "--",
                             "sleep", "300")
        return int(out.split()[-1])

    def running_again(self, victim, attempt):
        """Waits for the victim's attempt to run past its minimum run time (1 s)."""
        j = self.wait("the victim's attempt %d running" % attempt,
                      lambda: (lambda j: j["state"] == "RUNNING" and j["attempt"] == attempt and
                               j)(self.job(victim)), GRACE + 60)
        self.wait("the victim past its minimum run time",
                  lambda: time.time() - j["start_time_us"] / 1e6 >= 1.5, 30)

    def test_a_user_who_cancels_a_preemptor_in_the_grace_is_barred_for_the_cooldown(self):
        r = self.pool.cli("submit", "-D", self.pool.out, "--gpus", "4", "--cpus", "0.1",
                          "--preemptible", "--min-runtime", "1s", "--grace", "%ds" % GRACE,
                          "--", "bash", "-c", "trap '' TERM; sleep 300")
        self.assertEqual(r.returncode, 0, r.stderr)
        victim = int(r.stdout.split()[-1])
        self.running_again(victim, 1)
        first = self.nobody_submits()
        self.wait("the victim preempted by nobody's job",
                  lambda: self.job(victim).get("preempted_by") == first)
        self.as_nobody("cancel", str(first))  # in the victim's grace
        # The SIGTERM cannot be taken back: the victim is requeued, and runs again.
        self.running_again(victim, 2)
        self.assertEqual(self.job(victim)["preemptions"], 1)
        second = self.nobody_submits()
        why = self.wait("nobody's second job barred",
                        lambda: BAR in self.job(second).get("pending_reason", "") and
                        self.job(second)["pending_reason"])
        self.assertIn("nobody withdrew job %d before it started" % first, why)
        j = self.job(victim)
        self.assertEqual((j["state"], j.get("preempted_by", 0), j["preemptions"]),
                         ("RUNNING", 0, 1))
        st, metrics = pooltest.call(os.path.join(self.pool.dir, "gpupool.sock"), "GET",
                                    "/metrics")
        self.assertEqual(st, 200)
        self.assertIn(b"gpupool_preemptors_withdrawn_total 1\n", metrics)
        self.assertIn("user nobody withdrew job %d before it started" % first,
                      self.pool.server_log())
        # The bar ends COOLDOWN s after the withdrawal: then nobody's job preempts.
        self.wait("the victim preempted once the bar has ended",
                  lambda: self.job(victim).get("preempted_by") == second, COOLDOWN + 30)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("withdrawn_test: needs root (setpriv to another user)")
        sys.exit(77)
    unittest.main(verbosity=2)
