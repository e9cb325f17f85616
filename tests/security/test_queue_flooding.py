#!/usr/bin/env python3
"""Queue flooding (issue 25 item 7): with no bound by default, one unprivileged user
posting 1000-element arrays over the Unix socket queued 107,000 jobs in 25 s (880 MB of
store). The server now ships bounds on a user's queued jobs, on all users' together and
on an array's size, set in its config file; each refusal names the bound and its key.

Runs `gpupool server` (no agents: every accepted job stays queued) as alice and bob.

Usage: test_queue_flooding.py PATH_TO_GPUPOOL
"""
import os
import unittest

import seclib


def array(n):
    return {"command": ["true"], "array": "0-%d" % (n - 1)}


class DefaultBoundsTest(unittest.TestCase):
    """Without a config file the server has bounds: Slurm's 1001 for an array."""

    @classmethod
    def setUpClass(cls):
        cls.env = seclib.Env(split=True, extra_args=["--config", ""])
        cls.env.start()

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()

    def test_an_array_past_the_default_size_is_refused_naming_the_key(self):
        e = self.env
        st, body = e.submit(e.alice, array(1002))
        self.assertEqual(st, 400, body)
        self.assertIn("more than 1001 elements", body["error"])
        self.assertIn("max-array-size", body["error"])
        self.assertEqual(e.jobs(), [], "a job was created")
        st, body = e.submit(e.alice, array(1001))
        self.assertEqual(st, 201, body)
        self.assertEqual(len(e.jobs()), 1001)


class ConfiguredBoundsTest(unittest.TestCase):
    """The bounds as the config file sets them: a user's queue, the pool's, an array."""

    @classmethod
    def setUpClass(cls):
        cls.env = seclib.Env(split=True)
        conf = os.path.join(cls.env.dir, "gpupool.conf")
        with open(conf, "w") as f:
            f.write("[server]\nmax-queued-per-user = 30\nmax-queued-total = 50\n"
                    "max-array-size = 20\n")
        cls.env.extra_args = ["--config", conf]
        cls.env.start()

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()

    def test_a_flood_stops_at_each_bound_with_a_refusal_naming_it(self):
        e = self.env
        st, body = e.submit(e.alice, array(21))
        self.assertEqual(st, 400, body)
        self.assertIn("more than 20 elements (the server's max-array-size", body["error"])
        st, body = e.submit(e.alice, array(20))
        self.assertEqual(st, 201, body)
        st, body = e.submit(e.alice, array(11))  # 20 + 11 > 30
        self.assertEqual(st, 429, body)
        self.assertIn("user gpsec-alice has 20 jobs queued; 11 more would pass the limit "
                      "(max-queued-per-user 30)", body["error"])
        self.assertIn("[server] max-queued-per-user", body["error"])
        st, body = e.submit(e.alice, array(10))
        self.assertEqual(st, 201, body)
        st, body = e.submit(e.alice, {"command": ["true"]})
        self.assertEqual(st, 429, body)
        # bob has a queue of his own, but the pool's holds 50.
        st, body = e.submit(e.bob, array(20))
        self.assertEqual(st, 201, body)
        st, body = e.submit(e.bob, {"command": ["true"]})
        self.assertEqual(st, 429, body)
        self.assertIn("the pool has 50 jobs queued; 1 more would pass the limit "
                      "(max-queued-total 50)", body["error"])
        self.assertEqual(len(e.jobs()), 50)
        # The CLI says the same and exits non-zero.
        r = e.cli(e.bob, "submit", "--workdir", "/tmp", "--", "true")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("max-queued-total 50", r.stderr)
        # A cancelled job leaves room for one more.
        first = min(j["id"] for j in e.jobs() if j["user"] == "gpsec-bob")
        st, body, _ = e.api(e.bob, "POST", "/v1/jobs/%d/cancel?element=0" % first)
        self.assertEqual(st, 200, body)
        st, body = e.submit(e.bob, {"command": ["true"]})
        self.assertEqual(st, 201, body)

    def test_a_bad_bound_in_the_config_file_stops_the_server_naming_the_line(self):
        e = seclib.Env(split=True)
        try:
            conf = os.path.join(e.dir, "gpupool.conf")
            with open(conf, "w") as f:
                f.write("[server]\nmax-queued-per-user = 0\n")
            e.extra_args = ["--config", conf]
            with self.assertRaises(RuntimeError) as cm:
                e.start(timeout=10)
            self.assertIn("line 2: [server] max-queued-per-user = '0'", str(cm.exception))
        finally:
            e.stop()


if __name__ == "__main__":
    seclib.main()
