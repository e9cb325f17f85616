#!/usr/bin/env python3
"""GPU shares under MPS end to end (issue 28 item 2, docs/sharing.md): a real `gpupool up`
on a fake 4-GPU node with `--gpu-enforcement mps` and the stand-in nvidia-cuda-mps-control
the tests build (tests/fakelib/mps), which logs every start, command and stop to its
daemon's log folder.

Checked: share jobs are clients of their GPU's daemon (one daemon per GPU, started with
CUDA_VISIBLE_DEVICES=<that GPU>, its folders 0700), with the thread percentage and pinned
memory limit of their share, and cannot override them from their own environment; the
daemon's ceiling (the largest share among its clients) is set before a share starts and
lowered when the largest ends; a
whole-GPU job is told "exclusive" and gets no MPS variables; the daemon quits after its
GPU's last share; a pool killed with -9 and started again adopts the running share and
its daemon (no second start) and still quits it after the share; a daemon that cannot
start fails the share with the reason; `--gpu-enforcement none` says so to the job; an
`--enforce memory` share waits on a node without enforcement and starts once it has MPS.

Usage: mps_pool_test.py PATH_TO_GPUPOOL PATH_TO_STAND_IN_CONTROL
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
CONTROL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
from pooltest import wait_for  # noqa: E402
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")

# A job that records its environment and waits for the test's go file.
JOB = ('env | grep -E "^(CUDA_|GPUPOOL_GPU)" | sort > "$OUT/$GPUPOOL_JOB_ID.env"; '
       'while [ ! -e "$OUT/go-$GPUPOOL_JOB_ID" ] && [ ! -e "$OUT/go-all" ]; do sleep 0.05; done')



class Pool:
    def __init__(self, state, extra_args, extra_env=None):
        self.state = state
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(state, "gpupool.sock"))
        self.extra_args = extra_args
        self.extra_env = extra_env or {}
        self.log = os.path.join(state, "server.log")
        self.proc = None

    def start(self):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [GPUPOOL, "up", "--state-dir", self.state, "--port", "0", "--config", "",
                 "--fake", NODE] + self.extra_args,
                stdout=log, stderr=log, start_new_session=True,
                env=dict(os.environ, **self.extra_env))
        wait_for("the pool", lambda: " up " in self.cli("nodes").stdout)

    def cli(self, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True,
                              env=self.env, timeout=60)

    def job(self, jid):
        r = self.cli("show", str(jid), "--json")
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        return j.get("job", j)

    def submit(self, *args, env=None):
        # A tenth of a CPU each: the node's CPUs (this machine's) must not be what waits.
        r = subprocess.run([GPUPOOL, "submit", "--cpus", "0.1", "-D", self.state] + list(args),
                           capture_output=True, text=True,
                           env=dict(self.env, **(env or {})), timeout=60)
        assert r.returncode == 0, r.stderr
        return int(r.stdout.split()[-1])

    def server_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]

    def wait(self, jid, states, timeout=30):
        return pooltest.wait_job(self.job, jid, states, timeout, log=self.server_log)

    def stop(self, sig=signal.SIGTERM):
        pooltest.stop_processes([self.proc], sig=sig)


def read_env(out, jid):
    path = os.path.join(out, "%d.env" % jid)
    wait_for("job %d's environment" % jid, lambda: os.path.exists(path) and os.path.getsize(path) > 0)
    with open(path) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def mps_dir(state, uuid):
    return os.path.join(state, "agent", "mps", uuid)


def control_log(state, uuid):
    try:
        with open(os.path.join(mps_dir(state, uuid), "log", "control.log")) as f:
            return f.read()
    except OSError:
        return ""


class MpsPoolTest(unittest.TestCase):
    def setUp(self):
        self.dir = pooltest.make_test_dir("gp-mps-")
        self.out = os.path.join(self.dir, "out")
        os.mkdir(self.out)
        self.pools = []

    def tearDown(self):
        # Jobs a failed test left waiting end by themselves (they outlive a killed pool).
        open(os.path.join(self.out, "go-all"), "w").close()
        for p in self.pools:
            p.stop()
        pooltest.kill_leftovers(self.dir)
        subprocess.run(["pkill", "-f", "^" + CONTROL], check=False)
        pooltest.remove_dir(self.dir)

    def pool(self, args, env=None):
        p = Pool(self.dir, args, env)
        p.start()
        self.pools.append(p)
        return p

    def go(self, jid):
        open(os.path.join(self.out, "go-%d" % jid), "w").close()

    def test_shares_are_clients_of_their_gpus_daemon_until_the_last_ends(self):
        p = self.pool(["--gpu-enforcement", "mps", "--mps-control", CONTROL])
        # A hostile share names its own daemon and a larger cap: both are overridden.
        a = p.submit("--gpu-share", "0.5", "--env", "OUT=" + self.out,
                     "--env", "CUDA_MPS_PIPE_DIRECTORY=/tmp/elsewhere",
                     "--env", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G", "--", "sh", "-c", JOB)
        ja = p.wait(a, ("RUNNING",))
        uuid = ja["placement"][0]["gpu_uuids"][0]
        # The second share lands on the same GPU (best fit): one daemon, two clients.
        b = p.submit("--gpu-mem", "10G", "--env", "OUT=" + self.out, "--", "sh", "-c", JOB)
        jb = p.wait(b, ("RUNNING",))
        self.assertEqual(jb["placement"][0]["gpu_uuids"][0], uuid)
        whole = p.submit("--gpus", "1", "--env", "OUT=" + self.out, "--", "sh", "-c", JOB)
        p.wait(whole, ("RUNNING",))

        ea, eb, ew = read_env(self.out, a), read_env(self.out, b), read_env(self.out, whole)
        pipe = os.path.join(mps_dir(self.dir, uuid), "pipe")
        self.assertEqual(ea["GPUPOOL_GPU_ENFORCEMENT"], "mps")
        self.assertEqual(ea["CUDA_MPS_PIPE_DIRECTORY"], pipe)
        self.assertEqual(ea["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50")
        # Half of the fake GPU's memory, in MiB for MPS and in bytes for frameworks.
        with open(NODE) as f:
            total = {g["uuid"]: g["memory_total_bytes"] for g in json.load(f)["gpus"]}[uuid]
        self.assertEqual(int(ea["GPUPOOL_GPU_MEM_LIMIT_BYTES"]), total // 1000 * 500)
        self.assertEqual(ea["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
                         "0=%dM" % ((total // 1000 * 500) >> 20))
        self.assertEqual(eb["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M")
        self.assertEqual(eb["GPUPOOL_GPU_MEM_LIMIT_BYTES"], str(10 << 30))
        self.assertEqual(eb["CUDA_MPS_PIPE_DIRECTORY"], pipe)
        self.assertEqual(ew["GPUPOOL_GPU_ENFORCEMENT"], "exclusive")
        self.assertFalse([k for k in ew if k.startswith("CUDA_MPS")], ew)
        self.assertEqual(p.job(a)["gpu_enforcement"], "mps")
        self.assertEqual(p.job(whole)["gpu_enforcement"], "exclusive")

        log = control_log(self.dir, uuid)
        self.assertEqual(log.count("start "), 1, log)
        self.assertIn("CUDA_VISIBLE_DEVICES=%s " % uuid, log)
        # The variables are the job's to drop: the daemon holds new clients to the larger
        # share (a's) whatever their environment says, set before a started.
        half_mib = (total // 1000 * 500) >> 20
        self.assertIn("command set_default_active_thread_percentage 50\n", log)
        self.assertIn("command set_default_device_pinned_mem_limit 0 %dM\n" % half_mib, log)
        self.assertNotIn("invalid ", log)
        self.assertEqual(stat.S_IMODE(os.stat(pipe).st_mode), 0o700)
        # Only the shares' GPU has a daemon.
        self.assertEqual(os.listdir(os.path.join(self.dir, "agent", "mps")), [uuid])

        self.go(a)
        p.wait(a, ("SUCCEEDED",))
        self.assertTrue(os.path.isdir(mps_dir(self.dir, uuid)), "quit while a client was left")
        self.assertNotIn("command quit", control_log(self.dir, uuid))
        # The larger share ended: the ceiling comes down to b's.
        lowered = ("command set_default_active_thread_percentage %s\n"
                   % eb["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
                   "command set_default_device_pinned_mem_limit 0 10240M\n")
        wait_for("the ceiling to come down to the share left",
                 lambda: all(line in control_log(self.dir, uuid) for line in lowered))
        self.go(b)
        self.go(whole)
        p.wait(b, ("SUCCEEDED",))
        wait_for("the daemon to go after its last client",
                 lambda: not os.path.exists(mps_dir(self.dir, uuid)))
        self.assertFalse(subprocess.run(["pgrep", "-f", "^" + CONTROL]).returncode == 0,
                         "a stand-in daemon still runs")

    def test_with_mps_one_size_a_gpu_takes_shares_of_one_size(self):
        """The daemon holds every client to the largest share among them, so with
        --mps-one-size an MPS GPU takes one size of a user's shares: a second quarter joins
        the first, a 10G share goes to another GPU though it would fit beside them, and the
        first GPU's ceiling is never raised past the quarters' own."""
        p = self.pool(["--gpu-enforcement", "mps", "--mps-control", CONTROL, "--mps-one-size"])
        quarters = [p.submit("--gpu-share", "0.25", "--env", "OUT=" + self.out, "--", "sh", "-c",
                           JOB) for _ in range(2)]
        uuids = [p.wait(j, ("RUNNING",))["placement"][0]["gpu_uuids"][0] for j in quarters]
        self.assertEqual(uuids[0], uuids[1])
        ten = p.submit("--gpu-mem", "10G", "--env", "OUT=" + self.out, "--", "sh", "-c", JOB)
        other = p.wait(ten, ("RUNNING",))["placement"][0]["gpu_uuids"][0]
        self.assertNotEqual(other, uuids[0], "shares of two sizes on one MPS GPU")
        for j in quarters + [ten]:
            read_env(self.out, j)
        log = control_log(self.dir, uuids[0])
        self.assertEqual(log.count("command set_default_active_thread_percentage "), 1, log)
        self.assertIn("command set_default_active_thread_percentage 25\n", log)
        self.assertIn("command set_default_device_pinned_mem_limit 0 10240M\n",
                      control_log(self.dir, other))
        open(os.path.join(self.out, "go-all"), "w").close()
        for j in quarters + [ten]:
            self.assertEqual(p.wait(j, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")

    def test_two_real_users_get_separate_daemons_each_reachable_only_by_its_user(self):
        """Two local users (the security suite's), each submitting a share as themselves:
        MPS serves one user per GPU, so the shares land on different GPUs; each job, run
        as its user, reaches its own daemon's pipe folder through the agent's state
        directory (made under the daemons' umask 077) and cannot enter the other's."""
        if shutil.which("useradd") is None or shutil.which("setpriv") is None:
            self.skipTest("needs useradd and setpriv")
        users = []
        for name in ("gpsec-alice", "gpsec-bob"):
            try:
                pwd.getpwnam(name)
            except KeyError:
                subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                                "--shell", "/usr/sbin/nologin", name], check=True)
            users.append(pwd.getpwnam(name))
        os.chmod(self.out, 0o1777)
        p = self.pool(["--gpu-enforcement", "mps", "--mps-control", CONTROL])
        job = (JOB.replace('while', 'if [ -w "$CUDA_MPS_PIPE_DIRECTORY" ] && [ -x '
                           '"$CUDA_MPS_PIPE_DIRECTORY" ]; then touch "$OUT/$GPUPOOL_JOB_ID.pipe-ok"; '
                           'fi; while', 1))

        def submit_as(user):
            r = subprocess.run(
                ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
                 "--init-groups", GPUPOOL, "submit", "--cpus", "0.1", "-D", self.out,
                 "--gpu-share", "0.5", "--env", "OUT=" + self.out, "--", "sh", "-c", job],
                capture_output=True, text=True, env=p.env, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return int(r.stdout.split()[-1])

        ids = [submit_as(u) for u in users]
        uuids = [p.wait(j, ("RUNNING",))["placement"][0]["gpu_uuids"][0] for j in ids]
        self.assertNotEqual(uuids[0], uuids[1], "two users' shares on one MPS GPU")
        for j, uuid, user in zip(ids, uuids, users):
            env = read_env(self.out, j)
            pipe = os.path.join(mps_dir(self.dir, uuid), "pipe")
            self.assertEqual(env["CUDA_MPS_PIPE_DIRECTORY"], pipe)
            self.assertEqual(os.stat(pipe).st_uid, user.pw_uid)
            wait_for("job %d to reach its pipe folder" % j,
                     lambda j=j: os.path.exists(os.path.join(self.out, "%d.pipe-ok" % j)),
                     timeout=10)
        # Neither user can enter the other's daemon folder.
        for user, uuid in ((users[0], uuids[1]), (users[1], uuids[0])):
            pipe = os.path.join(mps_dir(self.dir, uuid), "pipe")
            r = subprocess.run(["setpriv", "--reuid=%d" % user.pw_uid,
                                "--regid=%d" % user.pw_gid, "--init-groups", "ls", pipe],
                               capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0, "%s listed %s" % (user.pw_name, pipe))
        for j in ids:
            self.go(j)
        for j in ids:
            self.assertEqual(p.wait(j, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")

    def test_a_killed_pool_adopts_the_share_and_its_daemon(self):
        p = self.pool(["--gpu-enforcement", "mps", "--mps-control", CONTROL])
        a = p.submit("--gpu-share", "0.25", "--env", "OUT=" + self.out, "--", "sh", "-c", JOB)
        uuid = p.wait(a, ("RUNNING",))["placement"][0]["gpu_uuids"][0]
        read_env(self.out, a)
        # A stale daemon folder of another GPU (a crash left it): stopped at the restart.
        stale = mps_dir(self.dir, "GPU-stale")
        os.makedirs(os.path.join(stale, "pipe"))
        p.stop(signal.SIGKILL)
        self.pools.remove(p)
        p2 = self.pool(["--gpu-enforcement", "mps", "--mps-control", CONTROL])
        self.assertEqual(p2.job(a)["state"], "RUNNING")
        wait_for("the stale folder to go", lambda: not os.path.exists(stale))
        log = control_log(self.dir, uuid)
        self.assertEqual(log.count("start "), 1, "the daemon was started again: " + log)
        self.go(a)
        self.assertEqual(p2.wait(a, ("SUCCEEDED", "FAILED", "LOST"))["state"], "SUCCEEDED")
        wait_for("the adopted daemon to go after its client",
                 lambda: not os.path.exists(mps_dir(self.dir, uuid)))

    def test_a_pool_restarted_without_mps_quits_the_daemons_it_left(self):
        # s1b_mps_restart_as_none: the MPS flags forgotten at a restart. The daemon must not
        # outlive its shares: its user could reach the GPU once it is granted to another.
        p = self.pool(["--gpu-enforcement", "mps", "--mps-control", CONTROL])
        a = p.submit("--gpu-share", "0.25", "--env", "OUT=" + self.out, "--", "sh", "-c", JOB)
        uuid = p.wait(a, ("RUNNING",))["placement"][0]["gpu_uuids"][0]
        read_env(self.out, a)
        with open(os.path.join(mps_dir(self.dir, uuid), "pipe", "control.pid")) as f:
            daemon = int(f.read().split()[0])
        stale = mps_dir(self.dir, "GPU-stale")  # a folder a crash left: removed too
        os.makedirs(os.path.join(stale, "pipe"))
        p.stop(signal.SIGKILL)
        self.pools.remove(p)
        p2 = self.pool(["--gpu-enforcement", "none"])  # and no --mps-control
        wait_for("the stale folder to go", lambda: not os.path.exists(stale))
        self.assertEqual(p2.job(a)["state"], "RUNNING")
        self.assertTrue(os.path.exists("/proc/%d" % daemon), "quit under its running client")
        self.go(a)
        p2.wait(a, ("SUCCEEDED", "FAILED", "LOST"))
        wait_for("the daemon to quit after its client", lambda: not os.path.exists("/proc/%d" % daemon))
        self.assertFalse(os.path.exists(mps_dir(self.dir, uuid)))
        # The GPU granted whole afterwards: no daemon is started for it.
        w = p2.submit("--gpus", "4", "--", "true")
        p2.wait(w, ("SUCCEEDED",))
        self.assertEqual(os.listdir(os.path.join(self.dir, "agent", "mps")), [])

    def test_a_daemon_that_cannot_start_fails_the_share_with_the_reason(self):
        # The agent hands the daemon no variable of its own but PATH and LD_LIBRARY_PATH:
        # the stand-in is told to refuse by a wrapper given as the control program.
        refusing = os.path.join(self.dir, "refusing-mps-control")
        with open(refusing, "w") as f:
            f.write('#!/bin/sh\nFAKE_MPS_REFUSE_START=1 exec "%s" "$@"\n' % CONTROL)
        os.chmod(refusing, 0o755)
        p = self.pool(["--gpu-enforcement", "mps", "--mps-control", refusing])
        a = p.submit("--gpu-share", "0.5", "--", "true")
        j = p.wait(a, ("FAILED",))
        self.assertIn("MPS", j["reason"])
        self.assertIn("did not start", j["reason"])
        self.assertIn("refused start", j["reason"])
        # A whole GPU needs no daemon.
        w = p.submit("--gpus", "1", "--", "true")
        p.wait(w, ("SUCCEEDED",))

    def test_without_enforcement_the_share_is_told_so(self):
        p = self.pool(["--gpu-enforcement", "none"])
        a = p.submit("--gpu-share", "0.5", "--env", "OUT=" + self.out, "--", "sh", "-c", JOB)
        p.wait(a, ("RUNNING",))
        e = read_env(self.out, a)
        self.assertEqual(e["GPUPOOL_GPU_ENFORCEMENT"], "none")
        self.assertIn("GPUPOOL_GPU_MEM_LIMIT_BYTES", e)
        self.assertFalse([k for k in e if k.startswith("CUDA_MPS")], e)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "agent", "mps")))
        self.assertEqual(p.job(a)["gpu_enforcement"], "none")
        self.assertIn("none (a share, scheduled but not enforced)", p.cli("show", str(a)).stdout)
        self.go(a)
        p.wait(a, ("SUCCEEDED",))

    def test_enforce_memory_waits_for_a_gpu_that_holds_the_share(self):
        # On a node that does not enforce memory, an --enforce memory share waits and says
        # why, while a whole GPU (never shared) runs; once the node runs MPS it starts.
        p = self.pool(["--gpu-enforcement", "none"])
        share = p.submit("--enforce", "memory", "--gpu-share", "0.5", "--env", "OUT=" + self.out,
                         "--", "sh", "-c", JOB)
        whole = p.submit("--enforce", "memory", "--gpus", "1", "--env", "OUT=" + self.out,
                         "--", "sh", "-c", JOB)
        p.wait(whole, ("RUNNING",))
        wait_for("the share's reason", lambda: "--enforce memory" in
                 p.job(share).get("pending_reason", ""))
        self.assertEqual(p.job(share)["state"], "PENDING")
        self.assertIn("no node holds a GPU share to its memory", p.job(share)["pending_reason"])
        self.assertIn("Enforce", p.cli("show", str(share)).stdout)
        bad = p.cli("submit", "--enforce", "compute", "--gpu-share", "0.5", "--", "true")
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--enforce", bad.stderr)
        self.assertIn("'memory'", bad.stderr)
        self.go(whole)
        p.wait(whole, ("SUCCEEDED",))
        p.stop()
        self.pools.remove(p)
        p2 = self.pool(["--gpu-enforcement", "mps", "--mps-control", CONTROL])
        p2.wait(share, ("RUNNING",))
        self.assertEqual(read_env(self.out, share)["GPUPOOL_GPU_ENFORCEMENT"], "mps")
        self.go(share)
        p2.wait(share, ("SUCCEEDED",))

    def test_mps_without_its_control_program_refuses_to_start(self):
        r = subprocess.run([GPUPOOL, "up", "--state-dir", self.dir, "--port", "0", "--config", "",
                            "--fake", NODE, "--gpu-enforcement", "mps", "--mps-control",
                            "/no/such/nvidia-cuda-mps-control"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--gpu-enforcement mps", r.stderr)
        self.assertIn("--gpu-enforcement none", r.stderr)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("mps_pool_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    if not CONTROL or not os.access(CONTROL, os.X_OK):
        print("mps_pool_test: give the stand-in nvidia-cuda-mps-control (tests/fakelib/mps)")
        sys.exit(2)
    unittest.main()
