#!/usr/bin/env python3
"""Attacks through named environments and directory inspection (issue 12, items 5, 6 and
the environment half of 7), each run as an unprivileged local user against a real
`gpupool up`. Every test asserts the refusal, its message, and that nothing ran or
leaked. (Item 8, image environments pinned to their image id, is covered by
src/controller/environments_test.cc with a fake inspector: it needs no podman.)

Usage: test_environments.py PATH_TO_GPUPOOL
"""
import json
import os
import subprocess
import time
import unittest

import seclib

MAX_FILES = 200000  # DirInspectLimits::max_files, the server's default


def as_user(user, *argv):
    """Runs argv as `user`; fails the test when it fails."""
    subprocess.run(seclib.as_user_argv(user, list(argv)), check=True, capture_output=True,
                   timeout=60)


def make_env_dir(user, path, marker):
    """A tiny "conda env" owned by `user`: bin/python writes `marker` when run, and a CUDA
    runtime by name, so inspection has something to find."""
    os.makedirs(os.path.join(path, "bin"))
    os.makedirs(os.path.join(path, "lib"))
    with open(os.path.join(path, "bin", "python"), "w") as f:
        f.write("#!/bin/sh\necho ran >> %s\n" % marker)
    os.chmod(os.path.join(path, "bin", "python"), 0o755)
    open(os.path.join(path, "lib", "libcudart.so.12.4.127"), "w").close()
    subprocess.run(["chown", "-R", "%d:%d" % (user.uid, user.gid), path], check=True)


class EnvironmentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.env = seclib.Env()
        cls.env.start()
        # Where a job that ran anyone's bin/python leaves its mark.
        cls.marks = os.path.join(cls.env.dir, "marks")
        os.makedirs(cls.marks)
        os.chmod(cls.marks, 0o1777)

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()

    def environments(self):
        st, body, _ = self.env.api(None, "GET", "/v1/environments")
        self.assertEqual(st, 200, body)
        return {x["name"]: x for x in body["environments"]}

    def test_name_belongs_to_its_first_registrant(self):
        """Item 5: alice could add torch:2.5 beside bob's torch:2.4 (or bob could squat
        on a name alice's scripts use); a name now belongs to whoever added it first."""
        e = self.env
        bobdir = os.path.join(e.bob.home, "envs", "owned")
        make_env_dir(e.bob, bobdir, os.path.join(self.marks, "owned"))
        r = e.cli(e.bob, "env", "add", "owned:2.4", "--dir", bobdir)
        self.assertEqual(r.returncode, 0, r.stderr)
        alicedir = os.path.join(e.alice.home, "envs", "owned")
        make_env_dir(e.alice, alicedir, os.path.join(self.marks, "owned-alice"))
        r = e.cli(e.alice, "env", "add", "owned:2.5", "--dir", alicedir)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("belongs to %s" % e.bob.name, r.stderr)
        envs = self.environments()
        self.assertNotIn("owned:2.5", envs)
        self.assertEqual(envs["owned:2.4"]["owner"], e.bob.name)
        r = e.cli(e.alice, "env", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(e.bob.name, r.stdout)  # the list shows owners
        # The owner adds versions as before.
        r = e.cli(e.bob, "env", "add", "owned:2.5", "--dir", bobdir)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_site_names_are_for_admins(self):
        """Item 5: protected names (PREFIX/NAME) are registered by admins only."""
        e = self.env
        alicedir = os.path.join(e.alice.home, "envs", "site")
        make_env_dir(e.alice, alicedir, os.path.join(self.marks, "site-alice"))
        r = e.cli(e.alice, "env", "add", "site/x:1", "--dir", alicedir)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("protected site name", r.stderr)
        self.assertNotIn("site/x:1", self.environments())
        rootdir = os.path.join(e.dir, "site-env")
        os.makedirs(os.path.join(rootdir, "bin"))
        r = e.cli(None, "env", "add", "site/x:1", "--dir", rootdir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.environments()["site/x:1"]["owner"], "root")

    def test_changed_directory_is_refused_and_nothing_runs(self):
        """Item 5: bob registered torch:2.4 --dir ~bob/envs/torch, then swapped its
        bin/python; alice's `submit --env torch:2.4 -- python` ran bob's code as alice."""
        e = self.env
        bobdir = os.path.join(e.bob.home, "envs", "torch")
        marker = os.path.join(self.marks, "torch")
        make_env_dir(e.bob, bobdir, marker)
        r = e.cli(e.bob, "env", "add", "torch:2.4", "--dir", bobdir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(self.environments()["torch:2.4"]["dir_digest"].startswith("sha256:"))
        # bob edits his environment after registering it (same size, even).
        as_user(e.bob, "/bin/sh", "-c",
                "printf '#!/bin/sh\\necho RAN >> %s\\n' > %s/bin/python" % (marker, bobdir))
        before = len(e.jobs())
        r = e.cli(e.alice, "submit", "--env", "torch:2.4", "--", "python")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("environment torch:2.4 changed since it was registered", r.stderr)
        self.assertIn("ask its owner (%s) to register a new version" % e.bob.name, r.stderr)
        self.assertEqual(len(e.jobs()), before, "a job was created")
        time.sleep(0.5)
        self.assertFalse(os.path.exists(marker), "bob's python ran")
        # Refused for bob too: the version is spoiled; a new one is registered.
        st, body = e.submit(e.bob, {"command": ["python"], "environment": "torch:2.4"})
        self.assertEqual(st, 409, body)
        self.assertIn("changed since it was registered", body["error"])

    def test_private_directory_is_inspected_as_the_caller(self):
        """Item 6: `env check --dir` and `env add --dir` read any directory as root and
        reported what was inside alice's 0700 home, and whether paths existed there."""
        e = self.env
        private = os.path.join(e.alice.home, "private")
        make_env_dir(e.alice, private, os.path.join(self.marks, "private"))
        answers = []
        for path in (private, os.path.join(e.alice.home, "no-such-dir")):
            st, body, _ = e.api(e.bob, "POST", "/v1/environments/check", {"dir": path})
            self.assertEqual(st, 403, body)
            self.assertIn("'%s' is not readable by user %s" % (path, e.bob.name),
                          body["error"])
            answers.append(body["error"].replace(path, "PATH"))
            text = json.dumps(body)
            self.assertNotIn("12.4", text)
            self.assertNotIn("libcudart", text)
        self.assertEqual(answers[0], answers[1], "the answer tells whether the path exists")
        r = e.cli(e.bob, "env", "add", "stolen:1", "--dir", private)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("not readable by user %s" % e.bob.name, r.stderr)
        self.assertNotIn("stolen:1", self.environments())
        # alice herself, and root, read it.
        st, body, _ = e.api(e.alice, "POST", "/v1/environments/check", {"dir": private})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["needs"]["cuda"], "12.4")

    def test_directory_over_the_file_limit_is_refused_quickly(self):
        """Item 6: one inspection walked all of /usr/lib as root (6.2 s of CPU); a walk of
        /root held shutdown for 45 s. Walks are now bounded in files, bytes and time."""
        e = self.env
        big = os.path.join(e.bob.home, "big")
        os.makedirs(big)
        for i in range(MAX_FILES + 1):
            os.close(os.open(os.path.join(big, "f%d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
        subprocess.run(["chown", "-R", "%d:%d" % (e.bob.uid, e.bob.gid), big], check=True)
        start = time.time()
        r = e.cli(e.bob, "env", "add", "big:1", "--dir", big)
        elapsed = time.time() - start
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("more than %d files" % MAX_FILES, r.stderr)
        self.assertLess(elapsed, 20, "the refusal took %.1f s" % elapsed)
        self.assertNotIn("big:1", self.environments())


if __name__ == "__main__":
    seclib.main()
