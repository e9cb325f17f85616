#!/usr/bin/env python3
"""SIGHUP does not stop the daemons (docs/deploy.md, "Signals"). Operators send it out of
habit to reload; gpupool has no reload, and left to its default the signal ended
`gpupool up` (and `server`, `agent`) without a log line. Now it is logged, with how to
apply a change (a restart), and the pool keeps answering.

Usage: sighup_test.py PATH_TO_GPUPOOL NODE_JSON
"""
import os
import signal
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1))
NODE = os.path.abspath(sys.argv.pop(1))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

WARNING = "SIGHUP: gpupool does not reload its configuration; restart it to apply changes"


class SighupTest(unittest.TestCase):
    def setUp(self):
        self.pool = pooltest.FakeNodePool(GPUPOOL, NODE, "gp-sighup-")
        self.addCleanup(self.pool.stop)

    def log(self):
        with open(self.pool.log, errors="replace") as f:
            return f.read()

    def test_sighup_is_logged_and_the_pool_keeps_answering(self):
        os.kill(self.pool.proc.pid, signal.SIGHUP)
        # Either event ends the wait: the warning logged, or the daemon gone.
        pooltest.wait_for("the SIGHUP warning or the pool's exit",
                          lambda: WARNING in self.log() or self.pool.proc.poll() is not None)
        self.assertIsNone(self.pool.proc.poll(),
                          "gpupool up ended on SIGHUP: " + self.log()[-2000:])
        self.assertIn(WARNING + " (stop it and run `gpupool up` again)", self.log())
        r = self.pool.cli("nodes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(" up ", r.stdout)


if __name__ == "__main__":
    unittest.main()
