#!/usr/bin/env python3
"""Configuration mistakes stop the daemons with exit status 2 (docs/deploy.md, "Config
file"; docs/cli.md, "Exit codes"), whether the value is caught while the command line and
the file are parsed or checked after: against another option (--mps-one-size with
--mps-multi-user), or by the module that takes it (--queue, --start-rule, --health-xid,
--node-lease, --preempt-grace, an --admin-group that does not exist; the agent's --gpu-mem-slack, --mps-control, --fake). The
packaged units do not restart on 2 (RestartPreventExitStatus=2). A value from the file
names the file, its line and key; a value from the command line names the flag. A failure
at run time (an address the server cannot bind) stays 1: the units try again.

Usage: config_mistakes_test.py PATH_TO_GPUPOOL
"""
import grp
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"

# (lines under [server], the key named) for `gpupool server --config FILE`.
SERVER_MISTAKES = [
    (["queue = FAIR"], "queue"),
    (["start-rule = backfill"], "start-rule"),
    (["preempt-grace = -5s"], "preempt-grace"),
    (["node-lease = 1s"], "node-lease"),
    (["health-xid = 13:reboot"], "health-xid"),
    (["mps-multi-user = true", "mps-one-size = true"], "mps-one-size"),
    (["health-threshold = nonsense:1:2"], "health-threshold"),
    (["policy = tightest"], "policy"),
    (["max-connections = 10"], "max-connections"),
    (["admin-group = gpupool-admni-no-such-group"], "admin-group"),
    (["kill-wait = 2h"], "kill-wait"),
    (["kill-wait = 90s"], "kill-wait"),  # not less than time-limit-grace (60 s)
]
# (lines under [agent], the key named) for `gpupool agent --config FILE`.
AGENT_MISTAKES = [
    (["gpu-enforcement = mps", "mps-control = /nonexistent/nvidia-cuda-mps-control"],
     "mps-control"),
    (["fake = /nonexistent.json"], "fake"),
    (["gpu-mem-slack = 1"], "gpu-mem-slack"),
]


class ConfigMistakesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gp-cfg-mistakes-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.conf = os.path.join(self.dir, "gpupool.conf")

    def run_daemon(self, cmd, section, lines):
        with open(self.conf, "w") as f:
            f.write("# a comment\n[%s]\n" % section + "".join(l + "\n" for l in lines))
        os.chmod(self.conf, 0o600)
        state = os.path.join(self.dir, "state")
        shutil.rmtree(state, True)
        r = subprocess.run([GPUPOOL] + cmd + ["--config", self.conf, "--state-dir", state],
                           capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, PATH="/usr/bin:/bin"))
        return r

    def check_refused(self, cmd, section, lines, key):
        r = self.run_daemon(cmd, section, lines)
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 2, "%s: %s" % (lines, out))
        line = 3 + next(i for i, l in enumerate(lines) if l.startswith(key + " "))
        value = next(l for l in lines if l.startswith(key + " ")).split("= ", 1)[1]
        self.assertIn("%s line %d: [%s] %s = '%s': " % (self.conf, line, section, key, value),
                      r.stderr)
        self.assertIn("--" + key, r.stderr)
        self.assertIn("fix the value", r.stderr)

    def test_server_values_checked_after_parsing_exit_2_naming_the_line(self):
        for lines, key in SERVER_MISTAKES:
            with self.subTest(lines=lines):
                self.check_refused(["server", "--port", "0"], "server", lines, key)

    def test_agent_values_checked_after_parsing_exit_2_naming_the_line(self):
        for lines, key in AGENT_MISTAKES:
            with self.subTest(lines=lines):
                self.check_refused(["agent", "--controller", "unix:/nonexistent.sock"], "agent",
                                   lines, key)

    def test_up_takes_both_sections_and_names_them(self):
        self.check_refused(["up", "--port", "0"], "server", ["start-rule = backfill"],
                           "start-rule")
        self.check_refused(["up", "--port", "0"], "agent", ["gpu-mem-slack = 1"],
                           "gpu-mem-slack")

    def test_the_same_values_as_flags_exit_2_naming_the_flag(self):
        state = os.path.join(self.dir, "state")
        for args in (["--queue", "FAIR"], ["--node-lease", "1s"], ["--preempt-grace", "-5s"],
                     ["--admin-group", "gpupool-admni-no-such-group"], ["--kill-wait", "0"],
                     ["--kill-wait", "90s"]):
            with self.subTest(args=args):
                r = subprocess.run([GPUPOOL, "server", "--config", "", "--port", "0",
                                    "--state-dir", state] + args,
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(args[0], r.stderr)
                self.assertNotIn("line", r.stderr)

    def test_an_admin_group_that_does_not_exist_says_to_create_it(self):
        # A typo, or "create it first" skipped: its members would get 403 later, with no hint.
        for cmd in (["server", "--port", "0"], ["up", "--port", "0"]):
            with self.subTest(cmd=cmd[0]):
                r = self.run_daemon(cmd, "server", ["admin-group = gpupool-admni-no-such-group"])
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("--admin-group: no group 'gpupool-admni-no-such-group'", r.stderr)
                self.assertIn("sudo groupadd gpupool-admni-no-such-group", r.stderr)

    def test_an_admin_group_without_members_is_fine(self):
        # Its members may come later (or only as the primary group of some users).
        empty = [g.gr_name for g in grp.getgrall() if not g.gr_mem]
        if not empty:
            self.skipTest("no group without members here")
        state = os.path.join(self.dir, "state")
        p = subprocess.Popen([GPUPOOL, "server", "--config", "", "--port", "0", "--state-dir",
                              state, "--admin-group", empty[0]],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            self.assertIn("API on unix:", line, p.stderr.read() if not line else line)
        finally:
            p.terminate()
            p.communicate(timeout=30)

    def test_a_failure_at_run_time_stays_1(self):
        # An address no interface has: the bind fails, which a restart may mend.
        r = self.run_daemon(["server", "--port", "1"], "server", ["listen = 192.0.2.1"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
