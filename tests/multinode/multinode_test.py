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
    """A server and one agent per host, each agent's fake node holding `gpus` GPUs."""

    def __init__(self, gpus, node_timeout=30):
        self.dir = pooltest.make_test_dir("gp-mn-")
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
        for i in range(len(HOSTS)):
            self.start_agent(i)
        deadline = time.time() + 30
        while time.time() < deadline:
            nodes = self.json("nodes")["nodes"]
            if sum(n["state"] == "up" for n in nodes) == len(HOSTS):
                return self
            time.sleep(0.05)
        raise AssertionError("agents did not register:\n" + self.log())

    def start_server(self):
        with open(os.path.join(self.dir, "server.log"), "ab") as log:
            self.server = subprocess.Popen(
                [GPUPOOL, "server", "--state-dir", self.dir, "--port", "0",
                 "--node-timeout", str(self.node_timeout)],
                stdout=log, stderr=log, start_new_session=True)
        # Answering, not merely there: a killed server leaves its socket file behind.
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.cli("whoami", check=False).returncode == 0:
                return
            time.sleep(0.05)
        raise AssertionError("the server did not come up:\n" + self.log())

    def start_agent(self, i):
        state = os.path.join(self.dir, "agent%d" % i)
        os.makedirs(state, exist_ok=True)
        with open(os.path.join(self.dir, "agent%d.log" % i), "ab") as log:
            self.agents[i] = subprocess.Popen(
                [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--state-dir", state,
                 "--fake", self.node_file, "--node-name", "node%d" % i, "--address", HOSTS[i]],
                stdout=log, stderr=log, start_new_session=True)

    def cli(self, *args, check=True, timeout=60, user=None):
        cmd = [GPUPOOL] + list(args)
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

    def submit(self, *args):
        env = []
        for e in NET_ENV:
            env += ["--env", e]
        out = self.cli("submit", "--workdir", HERE, *env, *args).stdout
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
                               "env | grep -E '^(GPUPOOL_|PET_|MASTER_|WORLD_SIZE|RANK)' | sort; "
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


class MpiTest(unittest.TestCase):
    """One GPU per node: a 3-task --gpus 1 job lands one task per agent."""

    @classmethod
    def setUpClass(cls):
        cls.pool = MultiPool(gpus=1).start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def test_mpirun_through_gpupool_exec_on_three_agents(self):
        # No ssh is involved: mpirun's rsh agent is gpupool exec (whether or not ssh exists).
        # The three "nodes" share this host's /tmp, where Open MPI 4's daemons of one job
        # race to create the same session directory ("File exists" / "No such file"):
        # mpirun goes through a wrapper of the job's own agent that gives each daemon a
        # TMPDIR of its own, as separate nodes would have.
        wrapper = os.path.join(self.pool.dir, "rsh-agent")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nhost=$1\nshift\nmkdir -p "$GP_MPI_TMP/$host"\n'
                    'exec $GP_RSH_AGENT "$host" env TMPDIR="$GP_MPI_TMP/$host" "$@"\n')
        os.chmod(wrapper, 0o755)
        jid = self.pool.submit(
            "--tasks", "3", "--gpus", "1", "--mpi", "--", "sh", "-c",
            "export GP_RSH_AGENT=\"$OMPI_MCA_plm_rsh_agent\" "
            "GP_MPI_TMP=/tmp/gp-mpi-$GPUPOOL_JOB_ID && "
            "OMPI_MCA_plm_rsh_agent=" + wrapper + " "
            "mpirun --hostfile $GPUPOOL_HOSTFILE -np 3 %s %s && "
            # The held tasks started before task 0 had picked the port: an exec has it.
            "$OMPI_MCA_plm_rsh_agent --job $GPUPOOL_JOB_ID --task 2 -- "
            "sh -c 'echo remote_port=$MASTER_PORT'" % (
                PYTHON, os.path.join(HERE, "allreduce_mpi.py")))
        job = self.pool.wait(jid, ("SUCCEEDED", "FAILED"), timeout=180)
        shutil.rmtree("/tmp/gp-mpi-%d" % jid, ignore_errors=True)
        out = self.pool.logs(jid, 0)
        self.assertEqual(job["state"], "SUCCEEDED",
                         job["reason"] + out + self.pool.logs(jid, 0, "stderr"))
        self.assertEqual(len({p["node"] for p in job["placement"]}), 3)
        for r in range(3):
            # Rank r ran in task r: the daemon mpirun started there through gpupool exec.
            self.assertIn("rank %d of 3 (task %d): sum 6" % (r, r), out)
        self.assertIn("remote_port=%d\n" % job["master_port"], out)
        # The held tasks were released when mpirun ended.
        self.assertTrue(all(t["ended"] for t in job["tasks"]))


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
