#!/usr/bin/env python3
"""What a Slurm user's job takes along and leaves behind (issue 30, docs/slurm.md), through
the real `gpupool` binary on a real `gpupool up` with a fake 4-GPU node: the submitting
shell's environment (--export=ALL: a venv's python found through PATH; --export=NONE and a
list), the script copied at submit (an edit after submit does not change the queued job;
`show --script`), and output files (-o/-e with %j/%u, the default gpupool-%j.out) created
as the job's user, a symbolic link planted in a shared directory refused; scancel
--signal's USR1 to a running job that traps it and carries on.

Usage: slurm_io_test.py PATH_TO_GPUPOOL NODE_JSON
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


class SlurmIoTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("jobs run as their users: needs root, as tests/integration")
        cls.dir = pooltest.make_test_dir("gp-slurmio-")
        cls.sock = os.path.join(cls.dir, "gpupool.sock")
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + cls.sock)
        with open(os.path.join(cls.dir, "server.log"), "ab") as log:
            cls.server = subprocess.Popen(
                [GPUPOOL, "up", "--state-dir", cls.dir, "--port", "0", "--fake", NODE], stdout=log, stderr=log, start_new_session=True)
        try:
            pooltest.wait_for("a node up", lambda: any(
                n["state"] == "up" for n in json.loads(cls.gp("nodes", "--json").stdout or
                                                       '{"nodes": []}')["nodes"]))
        except AssertionError:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes([cls.server])
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def gp(cls, *args, env=None, cwd=None, user=None):
        cmd = [GPUPOOL] + list(args)
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              env=env or cls.env, cwd=cwd or cls.dir)

    @classmethod
    def log(cls):
        with open(os.path.join(cls.dir, "server.log"), errors="replace") as f:
            return f.read()[-3000:]

    def submit(self, *args, **kw):
        r = self.gp("submit", *args, **kw)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.match(r"Submitted job (\d+)", r.stdout)
        self.assertTrue(m, r.stdout)
        return int(m.group(1))

    def job(self, jid):
        r = self.gp("show", "--json", str(jid))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["job"]

    def wait(self, jid):
        return pooltest.wait_job(self.job, jid, pooltest.FINAL_STATES, 30, log=self.log)

    def workdir(self, name, owner=0, mode=0o755):
        d = os.path.join(self.dir, name)
        os.mkdir(d)
        os.chown(d, owner, owner)
        os.chmod(d, mode)
        return d

    def read(self, path):
        with open(path) as f:
            return f.read()

    def test_a_venvs_python_is_found_through_the_exported_path(self):
        work = self.workdir("venv-work")
        venv = os.path.join(work, "venv")
        os.makedirs(os.path.join(venv, "bin"))
        tool = os.path.join(venv, "bin", "gp-venv-python")
        with open(tool, "w") as f:
            f.write('#!/bin/sh\necho "venv python, VIRTUAL_ENV=$VIRTUAL_ENV EDITOR=$EDITOR '
                    'CUDA=[$CUDA_VISIBLE_DEVICES] MINE=[$GPUPOOL_MINE]"\n')
        os.chmod(tool, 0o755)
        env = dict(self.env, PATH=os.path.join(venv, "bin") + ":" + os.environ["PATH"],
                   VIRTUAL_ENV=venv, EDITOR="vi", CUDA_VISIBLE_DEVICES="3", GPUPOOL_MINE="x")
        jid = self.submit("--", "gp-venv-python", env=env, cwd=work)
        job = self.wait(jid)
        self.assertEqual(job["state"], "SUCCEEDED", job.get("reason"))
        out = os.path.join(work, "gpupool-%d.out" % jid)
        self.assertEqual(job["stdout_path"], out)
        # gpupool's own variables and the GPU visibility are the pool's, not the shell's.
        self.assertEqual(self.read(out), "venv python, VIRTUAL_ENV=%s EDITOR=vi CUDA=[] MINE=[]\n"
                         % venv)
        self.assertEqual(self.gp("logs", str(jid)).stdout, self.read(out))
        # The list view leaves the environment out; the job's own view has it.
        listed = json.loads(self.gp("queue", "--all", "--state", "SUCCEEDED", "--json").stdout)
        self.assertNotIn("env", [j for j in listed["jobs"] if j["id"] == jid][0])
        self.assertEqual(self.job(jid)["env"]["VIRTUAL_ENV"], venv)

        # --export=NONE: the login PATH does not have it; a list exports only what it names.
        jid = self.submit("--export=NONE", "--", "gp-venv-python", env=env, cwd=work)
        job = self.wait(jid)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("gp-venv-python", job["reason"])
        jid = self.submit("--export=PATH,EDITOR=nano", "--", "gp-venv-python", env=env, cwd=work)
        self.assertEqual(self.wait(jid)["state"], "SUCCEEDED")
        self.assertEqual(self.read(os.path.join(work, "gpupool-%d.out" % jid)),
                         "venv python, VIRTUAL_ENV= EDITOR=nano CUDA=[] MINE=[]\n")
        r = self.gp("submit", "--export=NONE,PATH", "--", "true", env=env, cwd=work)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--export NONE,PATH: NONE comes alone", r.stderr)

    def test_a_signal_from_an_sbatch_line_comes_before_the_time_limit(self):
        # Slurm's --signal=B:USR1@SECONDS: the script's shell is told that long before its
        # time limit, in time to save its work and end on its own (not TIMEOUT).
        work = self.workdir("signal-work")
        script = os.path.join(work, "warned.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n#SBATCH --time=00:00:08\n#SBATCH --signal=B:USR1@6\n"
                    "trap 'echo warned; exit 0' USR1\nsleep 30 & wait $!\necho not warned\n")
        os.chmod(script, 0o755)
        jid = self.submit("warned.sh", cwd=work)
        r = self.gp("show", str(jid))
        self.assertIn("B:USR1@6", r.stdout)
        job = self.wait(jid)
        self.assertEqual(job["state"], "SUCCEEDED", job.get("reason"))
        self.assertLess(job["end_time_us"] - job["start_time_us"], 7_000_000, job)
        self.assertEqual(self.read(os.path.join(work, "gpupool-%d.out" % jid)), "warned\n")
        # One with no time limit would never be told: refused, saying so.
        r = self.gp("submit", "--signal", "USR1", "--", "true", cwd=work)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("give --time", r.stderr)

    def test_scancel_signal_tells_a_running_job_which_carries_on(self):
        # scancel --signal=USR1 JOB: the job's handler runs (it checkpoints) and the job goes
        # on to end by itself, SUCCEEDED; a held job (named so) and another user's are refused.
        work = self.workdir("cancel-signal-work")
        go = os.path.join(work, "go")
        with open(os.path.join(work, "ckpt.sh"), "w") as f:
            f.write("#!/bin/sh\ntrap 'echo checkpoint' USR1\necho ready\n"
                    "while [ ! -e %s ]; do sleep 0.1; done\necho done\n" % go)
        os.chmod(os.path.join(work, "ckpt.sh"), 0o755)
        jid = self.submit("ckpt.sh", cwd=work)
        out = os.path.join(work, "gpupool-%d.out" % jid)
        pooltest.wait_for("the job's trap", lambda: os.path.exists(out) and "ready" in self.read(out))
        r = self.gp("cancel", "--signal", "USR1", str(jid))
        self.assertEqual((r.returncode, r.stdout), (0, "Signal USR1 sent to job %d (1 task)\n" % jid),
                         r.stderr)
        pooltest.wait_for("the job's checkpoint", lambda: "checkpoint" in self.read(out))
        self.assertEqual(self.job(jid)["state"], "RUNNING")
        r = self.gp("cancel", "-s", "USR1", str(jid), user=NOBODY)
        self.assertEqual(r.returncode, 4, r.stderr)
        held = self.submit("--hold", "--", "true", cwd=work)
        r = self.gp("cancel", "--signal", "USR1", str(held))
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("job %d is held (by root) and has no process to signal" % held, r.stderr)
        self.assertEqual(self.gp("cancel", str(held)).returncode, 0)
        with open(go, "w"):
            pass
        job = self.wait(jid)
        self.assertEqual(job["state"], "SUCCEEDED", job.get("reason"))
        # The shell's `sleep` had the signal too (every process of the job), which the shell
        # reports ("User defined signal 1"); -b would have spared it.
        lines = [line for line in self.read(out).splitlines() if "signal" not in line]
        self.assertEqual(lines, ["ready", "checkpoint", "done"], self.read(out))

    def test_sbatch_wait_exits_with_the_jobs_exit_code(self):
        # sbatch --wait in a pipeline: the next step runs once the job has ended, and knows
        # how it went (its exit code; an array's highest; 1 for a cancelled one).
        work = self.workdir("wait-work")
        script = os.path.join(work, "w.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n#SBATCH --wait\necho ran > ran.txt\nexit 3\n")
        os.chmod(script, 0o755)
        r = self.gp("submit", "w.sh", cwd=work)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertRegex(r.stdout, r"^Submitted job \d+\n$")
        self.assertRegex(r.stderr, r"^gpupool: job \d+ FAILED: exited with code 3")
        self.assertEqual(self.read(os.path.join(work, "ran.txt")), "ran\n")
        r = self.gp("submit", "-W", "--array", "0-2", "--", "sh", "-c",
                    "exit $GPUPOOL_ARRAY_TASK_ID", cwd=work)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("1 SUCCEEDED; exit code 2", r.stderr)
        r = self.gp("submit", "--wait", "--", "true", cwd=work)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        # Held, then cancelled from elsewhere while submit waits.
        waiting = subprocess.Popen([GPUPOOL, "submit", "-H", "-W", "--", "true"], cwd=work,
                                   env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        first = waiting.stdout.readline()
        self.assertRegex(first, r"^Submitted job \d+\n$")
        self.assertEqual(self.gp("cancel", first.split()[2]).returncode, 0)
        out, err = waiting.communicate(timeout=30)
        self.assertEqual(waiting.returncode, 1, err)
        self.assertIn("CANCELLED", err)

    def test_an_edited_script_does_not_change_the_queued_job(self):
        work = self.workdir("script-work")
        script = os.path.join(work, "job.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n#GPUPOOL -J copied\necho first version\n")
        os.chmod(script, 0o755)
        jid = self.submit("-H", "job.sh", cwd=work)
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho second version\n")
        r = self.gp("show", str(jid), "--script")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "#!/bin/sh\n#GPUPOOL -J copied\necho first version\n")
        self.assertEqual(self.gp("release", str(jid)).returncode, 0)
        job = self.wait(jid)
        self.assertEqual(job["state"], "SUCCEEDED", job.get("reason"))
        self.assertEqual(self.read(os.path.join(work, "gpupool-%d.out" % jid)), "first version\n")
        r = self.gp("show", str(self.submit("--", "true", cwd=work)), "--script")
        self.assertEqual(r.returncode, 3)
        self.assertIn("has no script", r.stderr)

    def test_output_files_are_the_users_and_a_planted_link_is_refused(self):
        work = self.workdir("nobody-work", owner=NOBODY)
        jid = self.submit("-o", "out-%j-%u.txt", "-e", "%x.err", "-J", "io", "--", "sh", "-c",
                          "echo to-out; echo to-err >&2", cwd=work, user=NOBODY)
        job = self.wait(jid)
        self.assertEqual(job["state"], "SUCCEEDED", job.get("reason"))
        out = os.path.join(work, "out-%d-nobody.txt" % jid)
        err = os.path.join(work, "io.err")
        for path, text in ((out, "to-out\n"), (err, "to-err\n")):
            self.assertEqual(self.read(path), text)
            self.assertEqual(os.stat(path).st_uid, NOBODY)
        self.assertEqual(self.gp("logs", str(jid), user=NOBODY).stdout, "to-out\n")
        self.assertEqual(self.gp("logs", "--stderr", str(jid), user=NOBODY).stdout, "to-err\n")
        # Relayed by the node's agent (the path it started the task with), not read from
        # this machine's disk as a fallback.
        conn = pooltest.UnixConnection(self.sock)
        conn.request("GET", "/v1/jobs/%d/logs?stream=stdout" % jid)
        answer = conn.getresponse()
        self.assertEqual(answer.read(), b"to-out\n")
        self.assertTrue(answer.getheader("X-Gpupool-Log-Source", "").startswith("node "),
                        answer.getheaders())
        conn.close()
        # Nothing else was written for it: no second copy in the run directory.
        run_dir = os.path.join(self.dir, "agent", "jobs", str(jid), "0.1")
        self.assertTrue(os.path.exists(os.path.join(run_dir, "spec.json")), run_dir)
        self.assertFalse(os.path.exists(os.path.join(run_dir, "stdout.log")))
        self.assertFalse(os.path.exists(os.path.join(run_dir, "stderr.log")))

        # The default, stderr in the same file.
        jid = self.submit("--", "sh", "-c", "echo o; echo e >&2", cwd=work, user=NOBODY)
        self.assertEqual(self.wait(jid)["state"], "SUCCEEDED")
        default = os.path.join(work, "gpupool-%d.out" % jid)
        self.assertEqual(self.read(default), "o\ne\n")
        self.assertEqual(os.stat(default).st_uid, NOBODY)

        # A shared sticky directory: root plants a link where nobody's output will go.
        shared = self.workdir("shared", mode=0o1777)
        victim = os.path.join(self.dir, "victim")
        with open(victim, "w") as f:
            f.write("keep me\n")
        os.chmod(victim, 0o666)
        os.symlink(victim, os.path.join(shared, "planted.out"))
        jid = self.submit("-o", os.path.join(shared, "planted.out"), "--", "echo", "clobber",
                          cwd=work, user=NOBODY)
        job = self.wait(jid)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("symbolic link", job["reason"])
        self.assertEqual(self.read(victim), "keep me\n")

        # A directory the user cannot write: an explicit -o fails the job naming it.
        jid = self.submit("-o", os.path.join(self.dir, "o.out"), "--", "true", cwd=work,
                          user=NOBODY)
        job = self.wait(jid)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("Permission denied", job["reason"])
        self.assertIn("user 'nobody'", job["reason"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
