#!/usr/bin/env python3
"""The examples of README.md and docs/cli.md, run as written on the README's pool of two
fake nodes (`gpupool server` and two `gpupool agent --fake ... --address 127.0.0.1`):
the gang over both nodes, the `#GPUPOOL` script whose command line wins, the variables
docs/cli.md ("Multi-node jobs") says every task gets, `alloc`'s GPUPOOL_NODES (the tasks'
hosts, as a task's), `queue -a` (docs/slurm.md's squeue -a), an admin's hold as its owner
sees it, and checkpoint-done's exit code for a job not being preempted.

Usage: docs_examples_test.py PATH_TO_GPUPOOL NODE_JSON
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

NOBODY = 65534
FINAL = pooltest.FINAL_STATES


class ReadmePoolTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("a pool's jobs run as their users: needs root, as tests/integration")
        cls.dir = pooltest.make_test_dir("gp-docs-")
        cls.sock = os.path.join(cls.dir, "gpupool.sock")
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + cls.sock)
        cls.procs = []
        log = open(os.path.join(cls.dir, "pool.log"), "ab")
        cls.procs.append(subprocess.Popen(
            [GPUPOOL, "server", "--state-dir", cls.dir, "--port", "0", "--config", ""],
            stdout=log, stderr=log, start_new_session=True))
        pooltest.wait_for("the server's socket", lambda: os.path.exists(cls.sock))
        for n in ("a", "b"):  # README, "A pool of two fake nodes"
            cls.procs.append(subprocess.Popen(
                [GPUPOOL, "agent", "--config", "", "--controller", "unix:" + cls.sock,
                 "--state-dir", os.path.join(cls.dir, "agent-" + n), "--node-name",
                 "node-" + n, "--fake", NODE, "--fake-cpus", "16", "--fake-mem", "64G",
                 "--address", "127.0.0.1", "--telemetry-interval", "0"],
                stdout=log, stderr=log, start_new_session=True))
        try:
            pooltest.wait_for("both nodes up", lambda: len(cls.up_nodes()) == 2)
        except AssertionError:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes(cls.procs)
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def gp(cls, *args, user=None):
        cmd = [GPUPOOL] + list(args)
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=cls.env,
                              cwd=cls.dir)

    @classmethod
    def up_nodes(cls):
        r = cls.gp("nodes", "--json")
        return [n for n in json.loads(r.stdout)["nodes"] if n["state"] == "up"] if r.returncode == 0 else []

    @classmethod
    def log(cls):
        with open(os.path.join(cls.dir, "pool.log"), errors="replace") as f:
            return f.read()[-3000:]

    def ok(self, *args, user=None):
        r = self.gp(*args, user=user)
        self.assertEqual(r.returncode, 0, "gpupool %s: %s%s\n%s" % (
            " ".join(args), r.stdout, r.stderr, self.log()))
        return r

    def submit(self, *args, user=None):
        r = self.ok("submit", *args, user=user)
        m = re.match(r"Submitted job (\d+)", r.stdout)
        self.assertTrue(m, r.stdout)
        return int(m.group(1))

    def job(self, jid):
        return json.loads(self.ok("show", "--json", str(jid)).stdout)["job"]

    def ended(self, jid):
        return pooltest.wait_job(self.job, jid, FINAL, 30, log=self.log)

    def test_readme_two_nodes_and_a_gang_over_both(self):
        nodes = {n["name"]: n for n in self.up_nodes()}
        self.assertEqual(sorted(nodes), ["node-a", "node-b"])
        for n in nodes.values():
            self.assertEqual((len(n["gpus"]), n["cpu_milli"], n["address"]), (8, 16000, "127.0.0.1"))
        jid = self.submit("-n", "2", "--gpus", "8", "--", "sh", "-c", "echo $GPUPOOL_NODES")
        self.assertEqual(self.ended(jid)["state"], "SUCCEEDED")
        self.assertEqual(self.ok("logs", str(jid)).stdout, "127.0.0.1,127.0.0.1\n")

    def test_a_scripts_gpupool_lines_and_the_command_line_that_wins(self):
        script = os.path.join(self.dir, "train.sh")  # docs/cli.md, "submit"
        with open(script, "w") as f:
            f.write('#!/bin/bash\n#GPUPOOL --gpus 2 --time 4h --name resnet\n'
                    '#GPUPOOL --env "WANDB_MODE=offline"\necho "$WANDB_MODE $*"\n')
        os.chmod(script, 0o755)
        jid = self.submit("--gpus", "4", "train.sh", "--epochs", "10")
        job = self.ended(jid)
        self.assertEqual((job["state"], job["name"], job["request"]["gpus"], job["time_limit_s"]),
                         ("SUCCEEDED", "resnet", 4, 4 * 3600))
        self.assertEqual(self.ok("logs", str(jid)).stdout, "offline --epochs 10\n")

    def test_every_task_gets_the_variables_the_docs_name(self):
        out = os.path.join(self.dir, "env")
        os.makedirs(out, exist_ok=True)
        jid = self.submit("-n", "2", "--gpus", "1", "--", "sh", "-c",
                          "env > %s/$GPUPOOL_JOB_ID.$GPUPOOL_TASK_INDEX" % out)
        self.assertEqual(self.ended(jid)["state"], "SUCCEEDED")
        for task in (0, 1):
            with open(os.path.join(out, "%d.%d" % (jid, task))) as f:
                env = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
            documented = ["GPUPOOL_JOB_ID", "GPUPOOL_TASK_INDEX", "GPUPOOL_NUM_TASKS",
                          "GPUPOOL_NODES", "GPUPOOL_HOSTFILE", "GPUPOOL_ATTEMPT",
                          "GPUPOOL_SERVER", "GPUPOOL_GPU_ENFORCEMENT", "PET_NNODES",
                          "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR",
                          "PET_MASTER_PORT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
                          "OMPI_MCA_plm_rsh_agent", "CUDA_VISIBLE_DEVICES"]
            self.assertEqual([v for v in documented if v not in env], [], env)
            self.assertEqual((env["GPUPOOL_JOB_ID"], env["GPUPOOL_TASK_INDEX"], env["RANK"],
                              env["GPUPOOL_NUM_TASKS"], env["WORLD_SIZE"],
                              env["GPUPOOL_GPU_ENFORCEMENT"]),
                             (str(jid), str(task), str(task), "2", "2", "exclusive"))
            with open(env["GPUPOOL_HOSTFILE"]) as f:
                self.assertRegex(f.read(), r"^127\.0\.0\.1 slots=\d+\n")

    def test_alloc_gives_the_tasks_hosts_as_its_tasks_get_them(self):
        r = self.ok("alloc", "-n", "2", "--gpus", "1", "-q", "--", "sh", "-c",
                    "echo $GPUPOOL_NODES")
        self.assertEqual(r.stdout, "127.0.0.1,127.0.0.1\n")

    def test_queue_dash_a_and_an_admins_hold_as_its_owner_sees_it(self):
        first = self.submit("-H", "--", "true", user=NOBODY)
        second = self.submit("--after-ok", str(first), "--", "true", user=NOBODY)
        self.ok("hold", str(second))  # root's: an admin's hold on another user's job
        every = self.ok("queue", "-a", "--format", "id,user").stdout
        self.assertRegex(every, r"(?m)^ *%d +nobody$" % second)
        mine = self.ok("queue", "-n", "true", "--format", "id,reason", user=NOBODY).stdout
        self.assertIn("%d  held by root (admin): `gpupool release %d` by an admin lets it start"
                      % (second, second), mine)
        r = self.gp("release", str(second), user=NOBODY)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.ok("cancel", str(first))  # and, its dependency never met, the second

    def test_an_admins_hold_on_an_array_element_names_it_array_index(self):
        first = self.submit("-H", "--", "true", user=NOBODY)
        r = self.ok("submit", "--after-ok", str(first), "--array", "0-2", "--", "true",
                    user=NOBODY)
        m = re.match(r"Submitted array job (\d+)", r.stdout)
        self.assertTrue(m, r.stdout)
        arr = int(m.group(1))
        self.ok("hold", "%d_2" % arr)  # root's: an admin's hold on another user's element
        mine = self.ok("queue", "--format", "id,reason", user=NOBODY).stdout
        self.assertIn("held by root (admin): `gpupool release %d_2` by an admin lets it start"
                      % arr, mine)
        r = self.gp("release", "%d_2" % arr, user=NOBODY)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("job %d_2 was held by admin root; ask an admin to release it" % arr,
                      r.stderr)
        self.ok("cancel", str(first))  # and, its dependency never met, the array

    def test_checkpoint_done_for_a_job_not_being_preempted_is_exit_1(self):
        jid = self.submit("--", "true")
        self.ended(jid)
        r = self.gp("checkpoint-done", str(jid))
        self.assertEqual(r.returncode, 1, r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
