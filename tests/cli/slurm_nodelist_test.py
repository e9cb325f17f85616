#!/usr/bin/env python3
"""Slurm's -w/--nodelist and -x/--exclude on a real pool of two fake nodes (a server and
two `gpupool agent --fake` named node0 and node1), through the real `gpupool` binary:
-x node0 lands on node1 and -w node0 on node0, GPU and CPU-only jobs alike, from the
command line (submit, run, alloc) and from an #SBATCH line; a --nodelist naming no node
is refused at submit, an --exclude name no node has is accepted with a warning; a job
waiting for its only node says so in `gpupool queue` and `show`.

Usage: slurm_nodelist_test.py PATH_TO_GPUPOOL NODE_JSON
"""
import json
import os
import re
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1))
NODE = os.path.abspath(sys.argv.pop(1))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)


class NodeListTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("a pool's jobs run as their users: needs root, as tests/integration")
        cls.dir = pooltest.make_test_dir("gp-nodelist-")
        cls.sock = os.path.join(cls.dir, "gpupool.sock")
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + cls.sock)
        cls.procs = []
        try:
            pooltest.spawn_logged([GPUPOOL, "server", "--state-dir", cls.dir, "--port", "0"],
                                  os.path.join(cls.dir, "server.log"), cls.procs)
            pooltest.wait_for("the server", lambda: cls.gp("whoami").returncode == 0)
            for name in ("node0", "node1"):
                pooltest.spawn_logged(
                    [GPUPOOL, "agent", "--controller", "unix:" + cls.sock, "--state-dir",
                     os.path.join(cls.dir, "agent-" + name), "--fake", NODE, "--node-name", name,
                     "--telemetry-interval", "0"],
                    os.path.join(cls.dir, name + ".log"), cls.procs)
            pooltest.wait_for("both nodes up", lambda: sorted(
                n["name"] for n in json.loads(cls.gp("nodes", "--json").stdout)["nodes"]
                if n["state"] == "up") == ["node0", "node1"])
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes(cls.procs)
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def log(cls):
        return pooltest.log_tails(cls.dir, ["server.log", "node0.log", "node1.log"])

    @classmethod
    def gp(cls, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True, timeout=60,
                              env=cls.env, cwd=cls.dir)

    def submit(self, *args):
        r = self.gp("submit", "-c", "0.1", *args)
        self.assertEqual(r.returncode, 0, r.stderr + self.log())
        m = re.match(r"Submitted job (\d+)", r.stdout)
        self.assertTrue(m, r.stdout)
        return int(m.group(1)), r.stderr

    def job(self, jid):
        r = self.gp("show", "--json", str(jid))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["job"]

    def node_of(self, jid):
        j = pooltest.wait_job(self.job, jid, pooltest.FINAL_STATES, 30, log=self.log)
        self.assertEqual(j["state"], "SUCCEEDED", j)
        return [p["node"] for p in j["placement"]]

    def test_exclude_and_nodelist_choose_the_node(self):
        # Both directions and both kinds of job: whichever node placement would take by
        # itself, one of each pair goes against it.
        for gpus in ([], ["--gpus", "1"]):
            for node, other in (("node0", "node1"), ("node1", "node0")):
                with self.subTest(gpus=gpus, node=node):
                    jid, err = self.submit("-x", node, *gpus, "--", "true")
                    self.assertEqual(err, "")
                    self.assertEqual(self.node_of(jid), [other])
                    jid, _ = self.submit("-w", node, *gpus, "--", "true")
                    self.assertEqual(self.node_of(jid), [node])
        jid, _ = self.submit("-n", "2", "--nodelist=node[1-1]", "--", "true")  # a hostlist
        self.assertEqual(self.node_of(jid), ["node1", "node1"])

    def test_run_and_alloc_take_them_too(self):
        for cmd, node in (("run", "node0"), ("run", "node1"), ("alloc", "node0"),
                          ("alloc", "node1")):
            with self.subTest(cmd=cmd, node=node):
                other = "node1" if node == "node0" else "node0"
                r = self.gp(cmd, "-c", "0.1", "-x", other, "--", "true")
                self.assertEqual(r.returncode, 0, r.stderr + self.log())
                jid = int(re.search(r"gpupool: job (\d+) submitted", r.stderr).group(1))
                self.assertEqual(self.node_of(jid), [node])

    def test_an_sbatch_line_chooses_the_node(self):
        script = os.path.join(self.dir, "w.sh")
        with open(script, "w") as f:
            f.write("#!/bin/bash\n#SBATCH --exclude=node1\ntrue\n")
        os.chmod(script, 0o755)
        jid, err = self.submit("w.sh")
        self.assertEqual(err, "")  # read, not ignored
        self.assertEqual(self.node_of(jid), ["node0"])
        jid, _ = self.submit("-x", "node0", "w.sh")  # the command line wins
        self.assertEqual(self.node_of(jid), ["node1"])

    def test_unknown_names(self):
        r = self.gp("submit", "-w", "nodeX,nodeY", "--", "true")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("--nodelist nodeX, nodeY: no such node in this pool; its nodes are node0, "
                      "node1", r.stderr)
        r = self.gp("submit", "-x", "node[0-1]", "--", "true")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("--exclude leaves no node", r.stderr)
        jid, err = self.submit("-x", "nodeX,node0", "--", "true")
        self.assertEqual(err, "gpupool: warning: --exclude nodeX: no such node in this pool "
                              "(`gpupool nodes`); it excludes nothing\n")
        self.assertEqual(self.node_of(jid), ["node1"])
        jid, err = self.submit("-w", "nodeX,node0", "--", "true")
        self.assertEqual(err, "gpupool: warning: --nodelist nodeX: no such node in this pool "
                              "(`gpupool nodes`); the job runs on the others listed\n")
        self.assertEqual(self.node_of(jid), ["node0"])

    def test_a_job_waiting_for_its_node_says_why(self):
        with open(NODE) as f:
            gpus = len(json.load(f)["gpus"])
        busy, _ = self.submit("-w", "node0", "--gpus", str(gpus), "--", "sleep", "300")
        try:
            pooltest.wait_job(self.job, busy, ("RUNNING",), 30, log=self.log)
            waits, _ = self.submit("-w", "node0", "--gpus", "1", "--", "true")
            j = pooltest.wait_for("a pending reason", lambda: (
                lambda j: j if j["state"] == "PENDING" and j.get("pending_reason") else None)(
                    self.job(waits)))
            self.assertIn("on the nodes its --nodelist / --exclude leave", j["pending_reason"])
            self.assertIn("1 not in its --nodelist", j["pending_reason"])
            queue = self.gp("queue")
            self.assertIn("not in its --nodelist", queue.stdout)
            show = self.gp("show", str(waits))
            self.assertIn("Nodes:      only on node0 (--nodelist)", show.stdout)
        finally:
            self.gp("cancel", str(busy))
        self.assertEqual(self.node_of(waits), ["node0"])


if __name__ == "__main__":
    unittest.main()
