#!/usr/bin/env python3
"""Fair share by project end to end (docs/deploy.md, "Fair share"): a real `gpupool up`
on the fake 4-GPU node (tests/integration/node-4gpu.json) with `fair-by = project` in its
config file's [server] section.

- One user submits four 1-GPU jobs of project A, then four of project B, while a 4-GPU
  job holds the node. When it is cancelled one pass starts four of the eight: by project
  two of A and two of B (by user, the default, all of one user's are one group, in
  submission order: the four of A).
- `gpupool usage` groups by project by default there, and says that these are the pool's
  fair-share groups.
- `gpupool server --fair-by account` is refused (exit 2) naming the option and its values.

Usage: fair_by_project_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import pwd
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")


class FairByProjectTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pool = pooltest.FakeNodePool(GPUPOOL, NODE, "gp-fairby-",
                                         extra_args=["--telemetry-interval", "0"],
                                         config="[server]\nfair-by = project\n")
        cls.dir = cls.pool.dir
        cls.cli = cls.pool.cli
        cls.job = cls.pool.job
        cls.server_log = cls.pool.server_log

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def submit(self, *args):
        r = self.cli("submit", "-D", self.dir, *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def test_projects_take_turns_and_usage_groups_by_project(self):
        blocker = self.submit("--gpus", "4", "--cpus", "0.1", "--", "sleep", "300")
        pooltest.wait_job(self.job, blocker, ("RUNNING",), 30, log=self.server_log)
        jobs = {p: [self.submit("--gpus", "1", "--cpus", "0.1", "--project", p,
                                "--", "sleep", "300")
                    for _ in range(4)] for p in ("A", "B")}
        self.assertEqual(self.cli("cancel", str(blocker)).returncode, 0)
        pooltest.wait_job(self.job, blocker, ("CANCELLED",), 30, log=self.server_log)

        def started():
            return {p: sum(self.job(j)["state"] in ("ASSIGNED", "RUNNING") for j in ids)
                    for p, ids in jobs.items()}
        try:
            pooltest.wait_for("four jobs to start", lambda: sum(started().values()) == 4)
        except AssertionError:
            self.fail("%s: %s\n%s" % (started(), [(self.job(j)["state"],
                                                    self.job(j).get("pending_reason"))
                                                   for ids in jobs.values() for j in ids],
                                       self.server_log()))
        self.assertEqual(started(), {"A": 2, "B": 2}, self.server_log())

        r = self.cli("usage", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        answer = json.loads(r.stdout)
        self.assertEqual(answer["by"], "project")
        self.assertEqual(answer["fair_share_by"], "project")
        # The blocker, without a project, is in its user's own group, named after the user,
        # with its weight and share like A and B: no "(none)" row.
        me = pwd.getpwuid(os.getuid()).pw_name
        rows = {row["key"]: row for row in answer["rows"]}
        self.assertNotIn("(none)", rows, answer)
        self.assertTrue(rows[me].get("own_group"), answer)
        self.assertEqual(rows[me]["fair_share"], 1, answer)
        self.assertGreater(rows[me]["norm_share"], 0, answer)
        for p in ("A", "B"):
            self.assertNotIn("own_group", rows.get(p, {}), answer)
        r = self.cli("usage")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(", by project (this pool's fair-share groups)", r.stdout)
        self.assertIn("%s (user's own)" % me, r.stdout)
        self.assertNotIn("(none)", r.stdout)
        for ids in jobs.values():
            for j in ids:
                self.cli("cancel", str(j))

    def test_the_server_warns_that_any_user_may_pick_a_group(self):
        """A careless admin's pair: fair share by project under the default
        enforce-projects none, where each user picks their group by naming a project."""
        with open(self.pool.log, errors="replace") as f:
            log = f.read()
        self.assertIn("fair-by project with enforce-projects none: a user may name any "
                      "project and so pick their fair-share group", log)

    def test_a_bad_value_is_refused_naming_the_option(self):
        r = subprocess.run([GPUPOOL, "server", "--fair-by", "account", "--state-dir",
                            os.path.join(self.dir, "unused")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--fair-by", r.stderr)
        self.assertIn("project", r.stderr)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
