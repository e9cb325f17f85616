#!/usr/bin/env python3
"""A Slurm user's words through the real `gpupool` binary (issue 30, docs/slurm.md):
--version, "did you mean", help with value names, and on a real `gpupool up` with a fake
4-GPU node: `submit -H` (stored held, starts only once released), `-d afterok:N`, `-d singleton`,
`-d afternotok:N` and dependencies on an array element (`--after-ok N_I`).

Usage: slurm_flags_test.py PATH_TO_GPUPOOL NODE_JSON VERSION
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1))
NODE = os.path.abspath(sys.argv.pop(1))
VERSION = sys.argv.pop(1)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)


def gp(*args, env=None, cwd=None):
    # A job's default output file (gpupool-%j.out) goes to the submitter's directory: the
    # test's, not the build tree.
    return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True, timeout=60,
                          env=env, cwd=cwd)


class WordsTest(unittest.TestCase):
    """What needs no pool."""

    def test_version_flag_and_command(self):
        for args in (["--version"], ["version"]):
            r = gp(*args)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, "gpupool %s\n" % VERSION)

    def test_did_you_mean_names_what_was_typed(self):
        r = gp("sumbit", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "gpupool: unknown command 'sumbit'; did you mean submit? "
                                   "(`gpupool --help` lists the commands)\n")
        r = gp("submit", "--gpu", "1", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "gpupool: unknown option '--gpu' of `gpupool submit`; did you "
                                   "mean --gpus? (`gpupool submit --help` lists its options)\n")
        r = gp("--verison")
        self.assertEqual(r.returncode, 2)
        self.assertIn("did you mean --version?", r.stderr)

    def test_help_names_values(self):
        r = gp("submit", "--help")
        self.assertEqual(r.returncode, 0)
        for shown in ("-t,--time DURATION", "-J,--name,--job-name NAME", "-H,--hold",
                      "--init,--no-init ", "-d,--dependency TYPE:ID"):
            self.assertIn(shown, r.stdout)
        self.assertNotIn("TEXT", r.stdout)
        self.assertNotIn("{false}", r.stdout)


class PoolFlagsTest(unittest.TestCase):
    """The flags' effect on a real pool."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("a pool's jobs run as their users: needs root, as tests/integration")
        cls.dir = pooltest.make_test_dir("gp-slurm-")
        cls.sock = os.path.join(cls.dir, "gpupool.sock")
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + cls.sock)
        with open(os.path.join(cls.dir, "server.log"), "ab") as log:
            cls.server = subprocess.Popen(
                [GPUPOOL, "up", "--state-dir", cls.dir, "--port", "0", "--fake", NODE],
                stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            r = gp("nodes", "--json", env=cls.env)
            if r.returncode == 0 and any(n["state"] == "up" for n in json.loads(r.stdout)["nodes"]):
                return
            time.sleep(0.05)
        cls.tearDownClass()
        raise RuntimeError("no node came up: " + cls.log())

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes([cls.server])
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def log(cls):
        with open(os.path.join(cls.dir, "server.log"), errors="replace") as f:
            return f.read()[-3000:]

    def submit(self, *args):
        r = gp("submit", *args, env=self.env, cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.match(r"Submitted (?:array )?job (\d+)", r.stdout)
        self.assertTrue(m, r.stdout)
        return int(m.group(1))

    def job(self, jid):
        r = gp("show", "--json", str(jid), env=self.env, cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["job"]

    def wait(self, jid, states):
        return pooltest.wait_job(self.job, jid, states, 30, log=self.log)

    def test_held_job_waits_for_release_and_dependencies_follow(self):
        held = self.submit("-H", "-J", "prep", "-t", "5", "-c", "1", "--", "true")
        self.assertEqual(self.job(held)["held_by"], "root")
        after_ok = self.submit("--dependency=afterok:%d" % held, "--", "true")
        after_not_ok = self.submit("-d", "afternotok:%d" % held, "--", "true")
        # A job submitted later, free to run, starts and ends: the held one was passed over
        # by those scheduling passes, not merely not reached yet.
        free = self.submit("-J", "free", "--", "true")
        self.assertEqual(self.wait(free, pooltest.FINAL_STATES)["state"], "SUCCEEDED")
        j = self.job(held)
        self.assertEqual(j["state"], "PENDING")
        self.assertIn("held by root", j["pending_reason"])
        self.assertEqual(j["name"], "prep")
        self.assertEqual(j["time_limit_s"], 300)
        self.assertEqual(self.job(after_ok)["state"], "PENDING")
        queue = gp("queue", env=self.env, cwd=self.dir)
        self.assertIn("held by root: `gpupool release %d` lets it start" % held, queue.stdout)

        r = gp("release", str(held), env=self.env, cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.wait(held, pooltest.FINAL_STATES)["state"], "SUCCEEDED")
        self.assertEqual(self.wait(after_ok, pooltest.FINAL_STATES)["state"], "SUCCEEDED")
        j = self.wait(after_not_ok, pooltest.FINAL_STATES)
        self.assertEqual(j["state"], "CANCELLED")
        self.assertIn("dependency can never be met", j["reason"])

    def test_singleton_waits_for_the_jobs_of_its_name(self):
        # Two queued jobs named "nightly" (one held), another name: a singleton of that
        # name waits for both, then runs.
        first = self.submit("-H", "-J", "nightly", "--", "true")
        second = self.submit("-H", "-J", "nightly", "--", "true")
        other = self.submit("-H", "-J", "weekly", "--", "true")
        single = self.submit("-d", "singleton", "-J", "nightly", "--", "true")
        deps = self.job(single)["dependencies"]
        self.assertEqual(sorted((d["job_id"], d["kind"]) for d in deps),
                         [(first, "after-any"), (second, "after-any")])
        self.assertEqual(self.job(single)["state"], "PENDING")
        self.assertEqual(gp("cancel", str(first), env=self.env).returncode, 0)
        self.assertEqual(gp("release", str(second), env=self.env).returncode, 0)
        self.assertEqual(self.wait(second, pooltest.FINAL_STATES)["state"], "SUCCEEDED")
        self.assertEqual(self.wait(single, pooltest.FINAL_STATES)["state"], "SUCCEEDED")
        # Named after its command when it gives no name: `env`, of which none is queued.
        alone = self.submit("-d", "singleton", "--", "env")
        self.assertEqual(self.job(alone).get("dependencies", []), [])
        r = gp("submit", "-d", "singleton:3", "--", "true", env=self.env, cwd=self.dir)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--dependency singleton:3: singleton takes no job ids", r.stderr)
        gp("cancel", str(other), env=self.env, cwd=self.dir)

    def test_a_dependency_on_an_array_element_is_that_element(self):
        array = self.submit("-H", "-a", "0-1", "--", "true")
        after = self.submit("--after-ok", "%d_1" % array, "-d", "afterany:%d" % array, "--", "true")
        deps = self.job(after)["dependencies"]
        self.assertEqual([(d["job_id"], d["kind"]) for d in deps],
                         [(array + 1, "after-ok"), (array, "after-any")])
        # Named as the user named them: the element ARRAY_INDEX, the array its id.
        self.assertEqual([d.get("job_name") for d in deps], ["%d_1" % array, str(array)])
        shown = gp("show", str(after), env=self.env, cwd=self.dir).stdout
        self.assertIn("Depends:    after-ok %d_1, after-any %d\n" % (array, array), shown)
        r = gp("submit", "-d", "afterok:%d_0" % array, "--", "true", env=self.env,
               cwd=self.dir)
        self.assertEqual(r.returncode, 2)
        self.assertIn("the first element of an array has the array's own id", r.stderr)
        r = gp("submit", "--after-ok", "%d_7" % array, "--", "true", env=self.env,
               cwd=self.dir)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("--after-ok %d_7: " % array, r.stderr)
        gp("cancel", str(array), str(after), env=self.env, cwd=self.dir)


if __name__ == "__main__":
    unittest.main(verbosity=2)
