#!/usr/bin/env python3
"""The node's health program end to end (issue 29 item 4, docs/health.md): a `gpupool up`
on a fake 4-GPU node with `--health-check SCRIPT --health-check-interval 1`. The script
prints and exits what the test wrote to two files, so each verdict is the test's:

- "gpu=1 bad fan at 0 rpm": GPU 1 is cordoned by the health check (shown by `gpupool
  nodes`), a 4-GPU job waits, a 3-GPU job runs on the other GPUs;
- a pass: GPU 1 is back in service and the 4-GPU job runs;
- "node bad PSU degraded": the node is drained with that reason; a pass undrains it;
- a run past --health-check-timeout drains the node saying so.

Usage: health_check_test.py PATH_TO_GPUPOOL
Exit 77 (skipped) without root (the pool's jobs run as root here).
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
from pooltest import wait_for  # noqa: E402
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")



class HealthCheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pooltest.make_test_dir("gp-healthcheck-")
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(cls.dir, "gpupool.sock"))
        cls.say("gpu=1 bad fan at 0 rpm")
        script = os.path.join(cls.dir, "check.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n[ -e %s/hang ] && exec sleep 30\ncat %s/verdict\nexit $(cat %s/exit)\n"
                    % (cls.dir, cls.dir, cls.dir))
        os.chmod(script, 0o755)
        cls.log = os.path.join(cls.dir, "server.log")
        with open(cls.log, "ab") as log:
            cls.pool = subprocess.Popen(
                [GPUPOOL, "up", "--state-dir", cls.dir, "--port", "0", "--config", "", "--fake", NODE,
                 "--health-check", script, "--health-check-interval", "1",
                 "--health-check-timeout", "2"],
                stdout=log, stderr=log, start_new_session=True)

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes([cls.pool])
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def say(cls, verdict, code=0):
        for name, text in (("verdict", verdict + "\n"), ("exit", "%d\n" % code)):
            tmp = os.path.join(cls.dir, name + ".tmp")
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, os.path.join(cls.dir, name))

    @classmethod
    def cli(cls, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True,
                              env=cls.env, timeout=60)

    def job(self, jid):
        r = self.cli("show", str(jid), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        return j.get("job", j)

    def submit(self, *args):
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, *args)  # output files there
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def server_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]

    def nodes(self):
        r = self.cli("nodes")
        return r.stdout if r.returncode == 0 else ""

    def test_verdicts_cordon_drain_and_return(self):
        # Before any work: the first run's verdict came with the registration.
        out = wait_for("GPU 1 cordoned by the health check",
                       lambda: "GPU 1: cordoned: health check: fan at 0 rpm" in self.nodes() and self.nodes())
        self.assertIn(" up ", out)
        four = self.submit("--gpus", "4", "--", "sleep", "300")
        three = self.submit("--gpus", "3", "--", "sleep", "300")
        running = pooltest.wait_job(self.job, three, ("RUNNING",), 30, log=self.server_log)
        self.assertNotIn(1, running["placement"][0]["gpu_indices"])
        self.assertEqual(self.job(four)["state"], "PENDING")
        # A pass returns GPU 1; the four-GPU job runs once the three-GPU one is gone.
        self.say("all good")
        wait_for("GPU 1 back", lambda: "GPU 1: cordoned" not in self.nodes())
        self.assertEqual(self.cli("cancel", str(three)).returncode, 0)
        pooltest.wait_job(self.job, four, ("RUNNING",), 30, log=self.server_log)
        self.assertEqual(self.cli("cancel", str(four)).returncode, 0)
        # The whole node: drained with the program's words, undrained by a pass.
        self.say("node bad PSU degraded")
        wait_for("the node drained", lambda: "health check: PSU degraded" in self.nodes())
        self.say("", 0)
        wait_for("the node undrained", lambda: "health check:" not in self.nodes())
        # A program that hangs past its limit drains the node, saying so.
        open(os.path.join(self.dir, "hang"), "w").close()
        wait_for("the node drained for a hang",
                 lambda: "did not finish within 2 s" in self.nodes(), timeout=30)
        os.unlink(os.path.join(self.dir, "hang"))
        wait_for("the node undrained after the hang", lambda: "health check:" not in self.nodes(),
                 timeout=30)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("health_check_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
