#!/usr/bin/env python3
"""Fair-share weights end to end (docs/deploy.md, "Fair share"; Slurm's Fairshare=N): a
real `gpupool up` on the fake 4-GPU node (tests/integration/node-4gpu.json), fair share by
user (the default).

- An admin gives root weight 3 (`gpupool limits set --user root --fair-share 3`); nobody
  keeps 1. While a 4-GPU job holds the node, nobody submits four 1-GPU jobs, then root
  four. When the big job is cancelled one pass starts four of the eight: root's three and
  nobody's one (3:1), where equal weights give two each.
- `gpupool limits` shows the weight; `gpupool usage` shows each user's weight and
  normalised share (root 3 of 4, nobody 1 of 4), and nobody, who sees only their own
  row, the same share.
- A bad weight is refused (exit 2) naming the flag.

Usage: fair_weights_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
Exit 77 (skipped) without root (the pool's jobs run as their users).
"""
import json
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
NOBODY = 65534


class FairWeightsTest(unittest.TestCase):
    def setUp(self):
        self.pool = pooltest.FakeNodePool(GPUPOOL, NODE, "gp-fairweights-",
                                          extra_args=["--telemetry-interval", "0"])
        self.cli = self.pool.cli
        self.job = self.pool.job
        self.work = os.path.join(self.pool.dir, "work")  # nobody's jobs write here
        os.mkdir(self.work)
        os.chmod(self.work, 0o777)

    def tearDown(self):
        self.pool.stop()

    def as_nobody(self, *args):
        return subprocess.run(
            ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
             GPUPOOL] + list(args), capture_output=True, text=True, env=self.pool.env,
            timeout=60, cwd=self.work)

    def submit(self, *args, nobody=False):
        argv = ("submit", "-D", self.work, "--gpus", "1", "--cpus", "0.1") + args + (
            "--", "sleep", "300")
        r = self.as_nobody(*argv) if nobody else self.cli(*argv)
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def running(self, jobs):
        return {who: sum(self.job(j)["state"] in ("ASSIGNED", "RUNNING") for j in ids)
                for who, ids in jobs.items()}

    def start_backlogs(self):
        """Both users' four jobs queued behind a job holding the node, which is then
        cancelled: returns {user: [job ids]} once four of them have started."""
        blocker = self.submit("--gpus", "4")
        pooltest.wait_job(self.job, blocker, ("RUNNING",), 30, log=self.pool.server_log)
        jobs = {"nobody": [self.submit(nobody=True) for _ in range(4)],
                "root": [self.submit() for _ in range(4)]}
        self.assertEqual(self.cli("cancel", str(blocker)).returncode, 0)
        pooltest.wait_job(self.job, blocker, ("CANCELLED",), 30, log=self.pool.server_log)
        try:
            pooltest.wait_for("four jobs to start",
                              lambda: sum(self.running(jobs).values()) == 4)
        except AssertionError:
            self.fail("%s\n%s" % (self.running(jobs), self.pool.server_log()))
        return jobs

    def test_weights_three_to_one_give_three_gpus_to_one(self):
        r = self.cli("limits", "set", "--user", "root", "--fair-share", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("FAIR_SHARE", r.stdout)
        r = self.cli("limits", "--json")
        self.assertEqual(json.loads(r.stdout)["users"]["root"]["fair_share"], 3)
        jobs = self.start_backlogs()
        self.assertEqual(self.running(jobs), {"root": 3, "nobody": 1}, self.pool.server_log())

        r = self.cli("usage", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {row["key"]: (row["fair_share"], row["norm_share"])
                for row in json.loads(r.stdout)["rows"]}
        self.assertEqual(rows, {"root": (3, 0.75), "nobody": (1, 0.25)})
        r = self.cli("usage")
        self.assertIn("FAIR_SHARE  NORM_SHARE", r.stdout)
        r = self.as_nobody("usage", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json.loads(r.stdout)["rows"]
        self.assertEqual([(x["key"], x["fair_share"], x["norm_share"]) for x in rows],
                         [("nobody", 1, 0.25)])

    def test_equal_weights_give_two_each_and_a_bad_weight_is_refused(self):
        jobs = self.start_backlogs()
        self.assertEqual(self.running(jobs), {"root": 2, "nobody": 2}, self.pool.server_log())
        r = self.cli("limits", "set", "--user", "root", "--fair-share", "-2")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--fair-share -2: a number above 0", r.stderr)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (the pool's jobs run as their users)")
        sys.exit(77)
    unittest.main()
