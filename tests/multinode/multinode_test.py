#!/usr/bin/env python3
"""Multi-node jobs end to end: a real `gpupool server` and three `gpupool agent`s on this
host, each with its own state directory and fake node, advertising 127.0.0.2, 127.0.0.3
and 127.0.0.4. Jobs run real PyTorch (torchrun, gloo on CPU) and Open MPI (mpirun
starting its daemons through `gpupool exec`, no ssh). All traffic stays on loopback:
GLOO_SOCKET_IFNAME=lo and Open MPI's tcp interfaces are `lo`.

Usage: multinode_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
Exit 77 (skipped) without root or without Debian's python3-torch, python3-mpi4py and
openmpi-bin; the message says which.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

PYTHON = "/usr/bin/python3"  # Debian's, with torch and mpi4py (another may be first on PATH)
NODE_FILE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
# Loopback only, for every framework.
NET_ENV = ["GLOO_SOCKET_IFNAME=lo", "OMPI_MCA_btl_tcp_if_include=lo",
           "OMPI_MCA_oob_tcp_if_include=lo", "OMPI_MCA_btl=self,tcp", "OMP_NUM_THREADS=1",
           # Debian 12's torchrun fails on its default --redirects/--tee.
           "PET_REDIRECTS=2", "PET_TEE=2",
           # Jobs here run as root, which mpirun refuses unless told.
           "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"]


def missing_requirements():
    if os.geteuid() != 0:
        return "needs root (agents run jobs as their users)"
    for module, package in (("torch", "python3-torch"), ("mpi4py", "python3-mpi4py")):
        r = subprocess.run([PYTHON, "-c", "import " + module], capture_output=True)
        if r.returncode != 0:
            return "%s cannot import %s: install %s (scripts/install-deps.sh)" % (
                PYTHON, module, package)
    if shutil.which("mpirun") is None:
        return "mpirun not found: install openmpi-bin (scripts/install-deps.sh)"
    return None


class MultiPool:
    """A server and one agent per host (the first `nodes` of HOSTS), each agent's fake
    node holding `gpus` GPUs. Each agent makes its own state directory, as a first
    `gpupool agent --state-dir DIR` on a node does, except those `premade` maps to the
    mode an admin made them with."""

    def __init__(self, gpus, node_timeout=30, nodes=len(HOSTS), premade=None):
        self.hosts = HOSTS[:nodes]
        self.premade = premade or {}
        self.dir = pooltest.make_test_dir("gp-mn-")
        # The binaries run from here (755), not the build tree: a job of another user runs
        # gpupool-exec as mpirun's rsh agent, and the tree may sit below a directory only
        # its owner passes (a clone in /root or in a 0700 mktemp -d).
        for name in ("gpupool", "gpupool-exec", "gpupool-agent-shim"):
            built = os.path.join(os.path.dirname(GPUPOOL), name)
            if os.path.exists(built):
                shutil.copy2(built, os.path.join(self.dir, name))
        copied = os.path.join(self.dir, "gpupool")
        self.bin = copied if os.path.exists(copied) else GPUPOOL
        self.out = os.path.join(self.dir, "out")  # jobs' output files, any user's
        os.mkdir(self.out)
        os.chmod(self.out, 0o1777)
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.sock)
        with open(NODE_FILE) as f:
            node = json.load(f)
        node["gpus"] = node["gpus"][:gpus]
        self.node_file = os.path.join(self.dir, "node.json")
        with open(self.node_file, "w") as f:
            json.dump(node, f)
        self.node_timeout = node_timeout
        self.server = None
        self.agents = {}

    def start(self):
        self.start_server()
        for i in range(len(self.hosts)):
            self.start_agent(i)
        deadline = time.time() + 30
        while time.time() < deadline:
            nodes = self.json("nodes")["nodes"]
            if sum(n["state"] == "up" for n in nodes) == len(self.hosts):
                return self
            time.sleep(0.05)
        raise AssertionError("agents did not register:\n" + self.log())

    def start_server(self):
        with open(os.path.join(self.dir, "server.log"), "ab") as log:
            self.server = subprocess.Popen(
                [self.bin, "server", "--state-dir", self.dir, "--port", "0",
                 "--node-timeout", str(self.node_timeout)],
                stdout=log, stderr=log, start_new_session=True)
        # Answering, not merely there: a killed server leaves its socket file behind.
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.cli("whoami", check=False).returncode == 0:
                return
            time.sleep(0.05)
        raise AssertionError("the server did not come up:\n" + self.log())

    def agent_state(self, i):
        return os.path.join(self.dir, "agent%d" % i)

    def start_agent(self, i):
        state = self.agent_state(i)  # made by the agent (under its umask 077)
        if i in self.premade and not os.path.isdir(state):
            os.mkdir(state)
            os.chmod(state, self.premade[i])
        with open(os.path.join(self.dir, "agent%d.log" % i), "ab") as log:
            self.agents[i] = subprocess.Popen(
                [self.bin, "agent", "--controller", "unix:" + self.sock, "--state-dir", state,
                 "--fake", self.node_file, "--node-name", "node%d" % i, "--address", HOSTS[i]],
                stdout=log, stderr=log, start_new_session=True)

    def cli(self, *args, check=True, timeout=60, user=None):
        cmd = [self.bin] + list(args)
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("gpupool %s: exit %d\n%s%s\n%s" % (
                " ".join(args), r.returncode, r.stdout, r.stderr, self.log()))
        return r

    def json(self, *args):
        return json.loads(self.cli(*(list(args) + ["--json"])).stdout)

    def job(self, jid):
        return self.json("show", str(jid))["job"]

    def submit(self, *args, user=None):
        env = []
        for e in NET_ENV:
            env += ["--env", e]
        # The output files (one per task) in the pool's directory, not the source tree. A
        # job of another user works in the pool's directory: the source tree may not be
        # reachable by that user.
        workdir = HERE if user is None else self.dir
        out = self.cli("submit", "--workdir", workdir, "-o", os.path.join(self.out, "%j.%t.out"),
                       *env, *args, user=user).stdout
        return int(out.split()[-1])

    def wait(self, jid, states, timeout=120):
        return pooltest.wait_job(self.job, jid, states, timeout, poll=0.1, log=self.log)

    def logs(self, jid, task, stream="stdout"):
        args = ["logs", str(jid), "--task", str(task)]
        if stream == "stderr":
            args.append("--stderr")
        return self.cli(*args).stdout

    def kill9(self, proc):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def log(self):
        out = ""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out += "--- %s\n%s" % (name, f.read()[-2000:])
        return out

    def stop(self):
        pooltest.stop_processes([self.server] + list(self.agents.values()))
        for i in self.agents:
            pooltest.kill_leftovers(os.path.join(self.dir, "agent%d" % i))
        # Job processes of a failed test that name this directory (they outlive shims).
        subprocess.run(["pkill", "-9", "-f", self.dir], check=False)
        pooltest.remove_dir(self.dir)


def task_pids(pool, marker):
    """Pids of job processes whose command line holds `marker`."""
    r = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def wait_until(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class TorchrunTest(unittest.TestCase):
    """Two GPUs per node, so a 3-task job of 2 GPUs each lands one task per agent."""

    @classmethod
    def setUpClass(cls):
        cls.pool = MultiPool(gpus=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def test_every_task_gets_its_rank_and_the_same_rendezvous(self):
        jid = self.pool.submit("--tasks", "3", "--gpus", "2", "--", "sh", "-c",
                               "env | grep -E '^(GPUPOOL_|PET_|MASTER_|WORLD_SIZE|RANK|LOCAL_)' | sort; "
                               "echo ==HF==; cat $GPUPOOL_HOSTFILE")
        job = self.pool.wait(jid, ("SUCCEEDED",))
        self.assertEqual([p["node"] for p in job["placement"]], ["node0", "node1", "node2"])
        ports = set()
        for t in range(3):
            text = self.pool.logs(jid, t)
            env = dict(line.split("=", 1) for line in text.split("==HF==")[0].split() if "=" in line)
            self.assertEqual(env["GPUPOOL_JOB_ID"], str(jid))  # the real id, in every task
            self.assertEqual(env["GPUPOOL_TASK_INDEX"], str(t))
            self.assertEqual(env["GPUPOOL_NUM_TASKS"], "3")
            self.assertEqual(env["GPUPOOL_NODES"], ",".join(HOSTS))
            self.assertEqual(env["PET_NNODES"], "3")
            self.assertEqual(env["PET_NODE_RANK"], str(t))
            self.assertEqual(env["PET_NPROC_PER_NODE"], "2")
            self.assertEqual(env["PET_MASTER_ADDR"], HOSTS[0])
            self.assertEqual(env["MASTER_ADDR"], HOSTS[0])
            self.assertEqual(env["WORLD_SIZE"], "3")
            self.assertEqual(env["RANK"], str(t))
            # One process per task, seeing only its task's GPUs (red team 7, finding 3).
            self.assertEqual((env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]), ("0", "1"))
            self.assertEqual(env["PET_MASTER_PORT"], env["MASTER_PORT"])
            ports.add(env["MASTER_PORT"])
            self.assertEqual(text.split("==HF==")[1].split("\n")[1:4],
                             ["%s slots=2" % h for h in HOSTS])
        self.assertEqual(len(ports), 1)
        self.assertNotEqual(ports, {"29500"})
        self.assertEqual(int(ports.pop()), job["master_port"])

    def test_a_job_of_another_user_reads_its_own_hostfile(self):
        out = self.pool.cli("submit", "--workdir", "/", "--tasks", "3", "--gpus", "2", "--",
                            "sh", "-c", "id -u; cat $GPUPOOL_HOSTFILE", user=65534).stdout
        jid = int(out.split()[-1])
        self.pool.wait(jid, ("SUCCEEDED",), timeout=60)
        for t in range(3):
            self.assertEqual(self.pool.logs(jid, t).split("\n")[:2], ["65534", HOSTS[0] + " slots=2"])

    def test_torchrun_allreduce_across_three_agents(self):
        jid = self.pool.submit("--tasks", "3", "--gpus", "2", "--", PYTHON, "-m",
                               "torch.distributed.run", os.path.join(HERE, "allreduce.py"))
        job = self.pool.wait(jid, ("SUCCEEDED", "FAILED"), timeout=180)
        self.assertEqual(job["state"], "SUCCEEDED", job["reason"] + self.pool.logs(jid, 0, "stderr"))
        ranks = {}
        for t in range(3):
            for line in self.pool.logs(jid, t).splitlines():
                if line.startswith("rank "):
                    words = line.replace(":", "").replace("(", "").replace(")", "").split()
                    # rank R of W task T sum S
                    ranks[int(words[1])] = (int(words[3]), words[5], int(words[7]))
                    self.assertEqual(words[5], str(t), line)  # printed by that task's ranks
        self.assertEqual(sorted(ranks), list(range(6)), ranks)
        for r, (world, _, total) in ranks.items():
            self.assertEqual(world, 6)
            self.assertEqual(total, 21)

    def test_env_rendezvous_without_torchrun(self):
        # One process per task: gpupool's own MASTER_ADDR/PORT, WORLD_SIZE, RANK.
        jid = self.pool.submit("--tasks", "3", "--gpus", "2", "--", PYTHON,
                               os.path.join(HERE, "allreduce.py"))
        job = self.pool.wait(jid, ("SUCCEEDED", "FAILED"), timeout=180)
        self.assertEqual(job["state"], "SUCCEEDED", job["reason"] + self.pool.logs(jid, 0, "stderr"))
        for t in range(3):
            self.assertIn("rank %d of 3 (task %d): sum 6" % (t, t), self.pool.logs(jid, t))

    def test_one_failing_task_stops_the_others_and_is_named(self):
        jid = self.pool.submit("--tasks", "3", "--gpus", "2", "--", "sh", "-c",
                               '[ "$GPUPOOL_TASK_INDEX" = 1 ] && exit 3; exec sleep 300')
        job = self.pool.wait(jid, ("FAILED",), timeout=60)
        self.assertIn("task 1 (node node1) exited with code 3", job["reason"])
        self.assertEqual(job["exit_code"], 3)
        self.assertTrue(all(t["ended"] for t in job["tasks"]))
        self.assertEqual(task_pids(self.pool, "exec sleep 300"), [])

    def test_cancel_stops_every_task_on_every_node(self):
        marker = "sleep 301"
        jid = self.pool.submit("--tasks", "3", "--gpus", "2", "--", "sh", "-c", "exec " + marker)
        self.pool.wait(jid, ("RUNNING",))
        wait_until(lambda: len(task_pids(self.pool, marker)) == 3, 20, "three tasks")
        self.pool.cli("cancel", str(jid))
        job = self.pool.wait(jid, ("CANCELLED",), timeout=60)
        self.assertTrue(all(t["cancelled"] for t in job["tasks"]), job["tasks"])
        wait_until(lambda: not task_pids(self.pool, marker), 20, "the tasks to end")

    def test_exec_by_its_owner_only_and_only_while_it_runs(self):
        jid = self.pool.submit("--tasks", "3", "--gpus", "2", "--", "sleep", "302")
        self.pool.wait(jid, ("RUNNING",))
        r = self.pool.cli("exec", "--job", str(jid), "--task", "2", "--", "sh", "-c",
                          "echo task=$GPUPOOL_TASK_INDEX gpus=$CUDA_VISIBLE_DEVICES; "
                          "echo to-stderr >&2; exit 7", check=False)
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertIn("task=2 gpus=GPU-", r.stdout)
        self.assertIn("to-stderr", r.stderr)
        # mpirun's form: HOST COMMAND, the job from GPUPOOL_JOB_ID.
        env = dict(self.pool.env, GPUPOOL_JOB_ID=str(jid))
        r = subprocess.run([GPUPOOL, "exec", HOSTS[1], "echo", "on", "$GPUPOOL_TASK_INDEX"],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout), (0, "on 1\n"), r.stderr)
        r = subprocess.run([GPUPOOL, "exec", "127.0.0.9", "true"], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("runs no task of job", r.stderr)
        # Another user may not.
        r = self.pool.cli("exec", "--job", str(jid), "--", "true", check=False, user=65534)
        self.assertEqual(r.returncode, 4, r.stderr)  # permission denied
        self.assertIn("belongs to", r.stderr)
        self.pool.cli("cancel", str(jid))
        self.pool.wait(jid, ("CANCELLED",), timeout=60)
        r = self.pool.cli("exec", "--job", str(jid), "--", "true", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("has ended", r.stderr)


RANK_LINE = re.compile(r"rank (\d+) of (\d+) \(task (\d+)\): sum (\d+) host \S+ "
                       r"gpus (\S+) local (\d+) uses (\S+)$")


def mpi_ranks(out):
    """{rank: (world, task, sum, [gpus], local rank, gpu used)} from allreduce_mpi.py."""
    ranks = {}
    for line in out.splitlines():
        m = RANK_LINE.match(line)
        if m:
            ranks[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                      m.group(5).split(","), int(m.group(6)), m.group(7))
    return ranks


def mpirun_command(pool, np, then=""):
    """The command of a --mpi job: mpirun of allreduce_mpi.py on `np` ranks over the host
    file, then, if it succeeded, the shell text `then` (in task 0, $EXEC is its gpupool
    exec).

    The "nodes" share this host's /tmp, where Open MPI 4's daemons of one job race to
    create the same session directory ("File exists" / "No such file"): mpirun goes
    through a wrapper of the job's own agent that gives each daemon a TMPDIR of its own,
    as separate nodes would have. No ssh is involved: mpirun's rsh agent is gpupool exec
    (whether or not ssh exists)."""
    # The ranks' program from the pool's directory, which a job of another user can read
    # wherever the source tree is.
    program = os.path.join(pool.dir, "allreduce_mpi.py")
    if not os.path.exists(program):
        shutil.copyfile(os.path.join(HERE, "allreduce_mpi.py"), program)
        os.chmod(program, 0o644)
    wrapper = os.path.join(pool.dir, "rsh-agent")
    if not os.path.exists(wrapper):
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nhost=$1\nshift\nmkdir -p "$GP_MPI_TMP/$host"\n'
                    'exec $GP_RSH_AGENT "$host" env TMPDIR="$GP_MPI_TMP/$host" "$@"\n')
        os.chmod(wrapper, 0o755)
    # The daemons' TMPDIRs under a directory of this pool's own, not /tmp/gp-mpi-JOBID:
    # another pool on this machine (a second suite, a leftover of an earlier run, another
    # user's directory of that name) has jobs of the same numbers.
    pool.mpi_tmp = os.path.join(pool.dir, "mpi")
    if not os.path.isdir(pool.mpi_tmp):
        os.mkdir(pool.mpi_tmp)
        os.chmod(pool.mpi_tmp, 0o1777)
    return ["sh", "-c",
            "export EXEC=\"$OMPI_MCA_plm_rsh_agent\" GP_RSH_AGENT=\"$OMPI_MCA_plm_rsh_agent\" "
            "GP_MPI_TMP=%s/$GPUPOOL_JOB_ID && "
            "OMPI_MCA_plm_rsh_agent=%s mpirun --hostfile $GPUPOOL_HOSTFILE -np %d %s %s && { %s; }" % (
                pool.mpi_tmp, wrapper, np, PYTHON, program, then or "true")]


def run_mpi_job(test, pool, np, then="", user=None, tasks=None, gpus=1):
    """Submits an --mpi job of `tasks` tasks (default np) and waits for it to succeed;
    returns (job, task 0's output)."""
    jid = pool.submit("--tasks", str(tasks or np), "--gpus", str(gpus), "--mpi", "--",
                      *mpirun_command(pool, np, then), user=user)
    job = pool.wait(jid, ("SUCCEEDED", "FAILED"), timeout=180)
    shutil.rmtree(os.path.join(pool.mpi_tmp, str(jid)), ignore_errors=True)
    out = pool.logs(jid, 0)
    test.assertEqual(job["state"], "SUCCEEDED",
                     job["reason"] + out + pool.logs(jid, 0, "stderr"))
    return job, out


class MpiTest(unittest.TestCase):
    """One GPU per node: a 3-task --gpus 1 job lands one task per agent. Node 1's state
    directory was made 0700 by an admin; the others' by their agents."""

    @classmethod
    def setUpClass(cls):
        cls.pool = MultiPool(gpus=1, premade={1: 0o700}).start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def test_mpirun_through_gpupool_exec_on_three_agents(self):
        # The held tasks started before task 0 had picked the port: an exec has it.
        job, out = run_mpi_job(self, self.pool, 3, then=(
            "$EXEC --job $GPUPOOL_JOB_ID --task 2 -- sh -c 'echo remote_port=$MASTER_PORT'"))
        self.assertEqual(len({p["node"] for p in job["placement"]}), 3)
        ranks = mpi_ranks(out)
        self.assertEqual(sorted(ranks), [0, 1, 2], out)
        for r, (world, task, total, gpus, local, uses) in ranks.items():
            # Rank r ran in task r (the daemon mpirun started there through gpupool exec),
            # with that task's one GPU.
            self.assertEqual((world, task, total, local), (3, r, 6, 0), out)
            self.assertEqual(gpus, job["placement"][r]["gpu_uuids"], out)
            self.assertEqual(uses, gpus[0])
        self.assertIn("remote_port=%d\n" % job["master_port"], out)
        # The held tasks were released when mpirun ended.
        self.assertTrue(all(t["ended"] for t in job["tasks"]))

    def test_a_users_mpi_job_reads_its_hostfile_and_no_other_agent_file(self):
        # Two agents made their own state directory (0700 under their umask 077, had it
        # been left so), node 1's is an admin's 0700 one: mpirun, run as the job's user
        # (nobody), must read the host file in each.
        # The job then waits while the agents' files are tried as that user and another.
        gate = os.path.join(self.pool.dir, "gate-%d" % time.time_ns())
        jid = self.pool.submit(
            "--tasks", "3", "--gpus", "1", "--mpi", "--",
            *mpirun_command(self.pool, 3, "echo hostfile=$GPUPOOL_HOSTFILE; "
                            "while [ ! -e %s ]; do sleep 0.1; done" % gate),
            user=65534)
        try:
            wait_until(lambda: "hostfile=" in self.pool.logs(jid, 0) or
                       self.pool.job(jid)["state"] in pooltest.FINAL_STATES, 120, "mpirun to end")
            out = self.pool.logs(jid, 0)
            job = self.pool.job(jid)
            self.assertIn("hostfile=", out, "%s %s\n%s%s" % (
                job["state"], job["reason"], out, self.pool.logs(jid, 0, "stderr")))
            hostfile = out.split("hostfile=")[1].split()[0]
            ranks = mpi_ranks(out)
            self.assertEqual(sorted(ranks), [0, 1, 2], out + self.pool.logs(jid, 0, "stderr"))
            files, dirs = [], []
            for i in range(len(self.pool.hosts)):
                for root, subdirs, names in os.walk(self.pool.agent_state(i)):
                    dirs.append(root)
                    files += [os.path.join(root, n) for n in names]
            self.assertIn(hostfile, files)
            probe = ("import json, os, sys\n"
                     "paths = json.loads(sys.argv[1])\n"
                     "def ok(f):\n"
                     "    try:\n"
                     "        f()\n"
                     "        return True\n"
                     "    except OSError:\n"
                     "        return False\n"
                     "print(json.dumps({'read': [p for p in paths['files'] if ok(lambda: open(p).close())],"
                     " 'listed': [d for d in paths['dirs'] if ok(lambda: os.listdir(d))]}))\n")
            arg = json.dumps({"files": files, "dirs": dirs})
            seen = {}
            for uid in (65534, 65533):  # the job's user, and another one
                r = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
                                    "--clear-groups", PYTHON, "-c", probe, arg],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                seen[uid] = json.loads(r.stdout)
            # The job's user reads its own files only: the host file and its tasks' logs.
            own = [f for f in seen[65534]["read"]
                   if os.path.basename(f) not in ("hostfile", "stdout.log", "stderr.log")]
            self.assertEqual(own, [])
            # Every task's host file, on every node, whoever made the state directory.
            hostfiles = [f for f in files if os.path.basename(f) == "hostfile" and
                         os.stat(f).st_uid == 65534]
            self.assertIn(hostfile, hostfiles)
            self.assertEqual(len({f.split("/agent/")[0] for f in hostfiles}), 3, hostfiles)
            for f in hostfiles:
                self.assertIn(f, seen[65534]["read"])
            for f in seen[65534]["read"]:
                self.assertEqual(os.stat(f).st_uid, 65534, f)
            self.assertEqual(seen[65533], {"read": [], "listed": []})
            self.assertEqual(seen[65534]["listed"], [])
        finally:
            open(gate, "w").close()
        job = self.pool.wait(jid, ("SUCCEEDED", "FAILED"), timeout=60)
        shutil.rmtree(os.path.join(self.pool.mpi_tmp, str(jid)), ignore_errors=True)
        self.assertEqual(job["state"], "SUCCEEDED", job["reason"])
        for i in range(len(self.pool.hosts)):
            self.assertEqual(os.stat(self.pool.agent_state(i)).st_mode & 0o777, 0o711)


class MpiColocatedTest(unittest.TestCase):
    """Two GPUs per node on two nodes: a 4-task --gpus 1 job puts two tasks on each. As
    under Slurm, the ranks mpirun starts on a node see every GPU the job holds there and
    pick theirs by local rank."""

    @classmethod
    def setUpClass(cls):
        cls.pool = MultiPool(gpus=2, nodes=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def node_tasks(self, job):
        """{node: [task indices on it]}."""
        by_node = {}
        for t, p in enumerate(job["placement"]):
            by_node.setdefault(p["node"], []).append(t)
        return by_node

    def test_ranks_on_a_node_use_every_gpu_the_job_holds_there(self):
        # Then, from task 0: a held task that is not the first on its node keeps its own
        # GPU for `gpupool exec --task K`.
        job, out = run_mpi_job(self, self.pool, 4, then=(
            "for k in 1 2 3; do $EXEC --job $GPUPOOL_JOB_ID --task $k -- "
            "sh -c 'echo exec task=$GPUPOOL_TASK_INDEX gpus=$CUDA_VISIBLE_DEVICES'; done"))
        by_node = self.node_tasks(job)
        self.assertEqual(sorted(len(t) for t in by_node.values()), [2, 2], by_node)
        ranks = mpi_ranks(out)
        self.assertEqual(sorted(ranks), [0, 1, 2, 3], out)
        for node, tasks in by_node.items():
            held = sorted(job["placement"][t]["gpu_uuids"][0] for t in tasks)
            # The node's ranks ran in its first task (mpirun's daemon there, or mpirun
            # itself on task 0's node) ...
            here = {r: v for r, v in ranks.items() if v[1] == tasks[0]}
            self.assertEqual(len(here), 2, (node, tasks, out))
            for world, _, total, gpus, _, _ in here.values():
                self.assertEqual((world, total), (4, 10))
                # ... which holds both of the job's GPUs on the node (in the node's order),
                self.assertEqual(sorted(gpus), held, out)
            # ... and one rank per local rank uses each of them.
            self.assertEqual(sorted(v[4] for v in here.values()), [0, 1], out)
            self.assertEqual(sorted(v[5] for v in here.values()), held, out)
            for k in tasks[1:]:
                self.assertIn("exec task=%d gpus=%s\n" % (k, job["placement"][k]["gpu_uuids"][0]),
                              out)
            if tasks[0] != 0:
                self.assertIn("exec task=%d gpus=%s\n" % (tasks[0], ",".join(held)), out)

    def test_tasks_that_each_run_the_command_keep_their_own_gpu(self):
        # torchrun's way (no --mpi): every task is its own launch, with its own GPU.
        jid = self.pool.submit("--tasks", "4", "--gpus", "1", "--", "sh", "-c",
                               "echo gpus=$CUDA_VISIBLE_DEVICES nproc=$PET_NPROC_PER_NODE")
        job = self.pool.wait(jid, ("SUCCEEDED",), timeout=60)
        self.assertEqual(sorted(len(t) for t in self.node_tasks(job).values()), [2, 2])
        for t in range(4):
            self.assertEqual(self.pool.logs(jid, t),
                             "gpus=%s nproc=1\n" % job["placement"][t]["gpu_uuids"][0])


class FailureTest(unittest.TestCase):
    """Controller and agent deaths in the middle of a gang."""

    def setUp(self):
        self.pool = MultiPool(gpus=1, node_timeout=3).start()

    def tearDown(self):
        self.pool.stop()

    def test_controller_kill9_between_two_task_exits(self):
        gate = os.path.join(self.pool.dir, "gate")
        jid = self.pool.submit("--tasks", "2", "--gpus", "1", "--", "sh", "-c",
                               '[ "$GPUPOOL_TASK_INDEX" = 1 ] && exit 0; '
                               'while [ ! -e %s ]; do sleep 0.1; done' % gate)
        wait_until(lambda: self.pool.job(jid)["tasks"][1].get("ended"), 30, "task 1 to end")
        self.pool.kill9(self.pool.server)
        self.pool.start_server()
        job = self.pool.job(jid)
        self.assertTrue(job["tasks"][1]["ended"])  # from the store
        self.assertFalse(job["tasks"][0]["ended"])
        open(gate, "w").close()
        job = self.pool.wait(jid, ("SUCCEEDED", "FAILED"), timeout=60)
        self.assertEqual(job["state"], "SUCCEEDED", job["reason"])

    def test_agent_kill9_ends_the_job_with_no_task_left_running(self):
        marker = "sleep 303"
        jid = self.pool.submit("--tasks", "3", "--gpus", "1", "--", "sh", "-c", "exec " + marker)
        self.pool.wait(jid, ("RUNNING",))
        wait_until(lambda: len(task_pids(self.pool, marker)) == 3, 20, "three tasks")
        lost = int(self.pool.job(jid)["placement"][1]["node"][-1])
        self.pool.kill9(self.pool.agents[lost])
        job = self.pool.wait(jid, ("LOST",), timeout=60)
        self.assertIn("stopped responding", job["reason"])
        # The other nodes' tasks are stopped at once; the lost node's task when its agent
        # comes back and learns that nobody expects it.
        wait_until(lambda: len(task_pids(self.pool, marker)) == 1, 30, "the live nodes' tasks")
        self.pool.start_agent(lost)
        wait_until(lambda: not task_pids(self.pool, marker), 60, "the lost node's task")


if __name__ == "__main__":
    why = missing_requirements()
    if why:
        print("SKIPPED: " + why)
        sys.exit(77)
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    sys.exit(1 if failed else 0)
