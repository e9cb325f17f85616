#!/usr/bin/env python3
"""The test library's own checks: kill_leftovers kills the job supervisors under a pool's
state directory and the process groups of the jobs they started (jobs that ignore
SIGTERM too), and nothing under another directory; log_tails gives the logs' tails.
Needs no root and no pool: a fake supervisor is a process whose arguments read
`gpupool-agent-shim --job-dir DIR` and whose child leads a session of its own, as
gpupool's shim and job do.

Usage: pooltest_test.py
"""
import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pooltest  # noqa: E402

# The fake shim: starts a job in a new session that ignores SIGTERM, writes the job's pid
# to PIDFILE, then waits for it (as a shim does).
SHIM = r"""
import os, subprocess, sys
job = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.pause()"],
    start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(job.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
job.wait()
"""


def alive(pid):
    return pooltest._proc_stat(pid) is not None


class KillLeftoversTest(unittest.TestCase):
    def setUp(self):
        self.dir = pooltest.make_test_dir("gpupool-testlib-")
        self.procs = []

    def tearDown(self):
        for pid in getattr(self, "jobs", []):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        pooltest.stop_processes(self.procs, sig=signal.SIGKILL)
        pooltest.remove_dir(self.dir)

    def fake_shim(self, state_dir, name):
        job_dir = os.path.join(state_dir, "jobs", name)
        os.makedirs(job_dir)
        pidfile = os.path.join(self.dir, name + ".pid")
        shim = subprocess.Popen([sys.executable, "-c", SHIM, pidfile, "gpupool-agent-shim",
                                 "--job-dir", job_dir])
        self.procs.append(shim)
        pooltest.wait_for("fake shim %s's job" % name, lambda: os.path.exists(pidfile))
        with open(pidfile) as f:
            return shim, int(f.read())

    def test_kills_the_shims_and_their_jobs_under_the_state_dir_only(self):
        pool = os.path.join(self.dir, "pool")
        other = os.path.join(self.dir, "pool-other")  # a prefix of neither is matched
        shim, job = self.fake_shim(pool, "1")
        other_shim, other_job = self.fake_shim(other, "2")
        self.jobs = [job, other_job]
        pooltest.kill_leftovers(pool)
        self.assertIsNotNone(shim.wait(10))
        self.assertFalse(alive(job), "the job under the killed shim still runs")
        self.assertIsNone(other_shim.poll())
        self.assertTrue(alive(other_job))


class LogTailsTest(unittest.TestCase):
    def setUp(self):
        self.dir = pooltest.make_test_dir("gpupool-testlib-")
        for name, text in (("b.log", "x" * 10 + "END-B"), ("a.log", "A"), ("notes.txt", "N")):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)

    def tearDown(self):
        pooltest.remove_dir(self.dir)

    def test_every_log_sorted_each_cut_to_its_tail(self):
        self.assertEqual(pooltest.log_tails(self.dir, limit=5),
                         "--- a.log\nA\n--- b.log\nEND-B\n")

    def test_the_named_files_that_exist_in_their_order(self):
        self.assertEqual(pooltest.log_tails(self.dir, ("notes.txt", "gone.log", "a.log")),
                         "--- notes.txt\nN\n--- a.log\nA\n")


if __name__ == "__main__":
    unittest.main()
