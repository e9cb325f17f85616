#!/usr/bin/env python3
"""Gang start-up on many agents (issue 14's target): a 32-task gang on 32 agents, each a
fake one-GPU node on this host, every task started within 1 s of placement (p50 of 20
runs); and the same with --mpi, where task 0 starts a command on each of the 31 other
tasks through `gpupool exec` (what mpirun does with its daemons).

    sudo python3 bench/pool/gang_start.py --out gang_start.json
    options: --agents 32 --runs 20 --gpupool BIN

Per run it reports, from the job record (the agents' start times, one clock):
  plain:  submit -> last task started, and first -> last task started;
  mpi:    submit -> last of the 31 remote commands started (each prints its start time),
          and task 0 started -> last remote command started; the remote commands are
          started with the task's $OMPI_MCA_plm_rsh_agent, as mpirun starts its daemons.
The submit time includes the scheduler's arrival batching (at most 100 ms while idle), so
"placement" is bounded above by it. Needs root (agents run jobs as their users).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE = os.path.join(ROOT, "tests", "integration", "node-4gpu.json")


def find_gpupool(flag):
    for c in ([flag] if flag else []) + [os.path.join(ROOT, "build", "h-bench", "gpupool"),
                                          os.path.join(ROOT, "build", "release", "gpupool"),
                                          shutil.which("gpupool") or ""]:
        if c and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit("gang_start: no gpupool binary (build it, or pass --gpupool)")


class Pool:
    def __init__(self, gpupool, agents):
        self.g = gpupool
        self.dir = tempfile.mkdtemp(prefix="gp-gang-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.sock)
        with open(NODE) as f:
            node = json.load(f)
        node["gpus"] = node["gpus"][:1]
        self.node = os.path.join(self.dir, "node.json")
        with open(self.node, "w") as f:
            json.dump(node, f)
        self.procs = []
        log = open(os.path.join(self.dir, "server.log"), "ab")
        self.procs.append(subprocess.Popen([gpupool, "server", "--state-dir", self.dir, "--port", "0"],
                                           stdout=log, stderr=log, start_new_session=True))
        while subprocess.run([gpupool, "whoami"], env=self.env, capture_output=True).returncode:
            time.sleep(0.05)
        for i in range(agents):
            state = os.path.join(self.dir, "a%d" % i)
            os.makedirs(state)
            alog = open(os.path.join(self.dir, "agent%d.log" % i), "ab")
            # Each agent with a node token of its own, as on a real cluster: root's
            # requests on the socket share one quota of waiting requests (16).
            name = "n%02d" % i
            token = self.json("token", "create", "--kind", "node", "--user", name)["token"]
            self.procs.append(subprocess.Popen(
                [gpupool, "agent", "--controller", "unix:" + self.sock, "--state-dir", state,
                 "--fake", self.node, "--node-name", name, "--token", token,
                 "--address", "127.0.1.%d" % (i + 1)],
                stdout=alog, stderr=alog, start_new_session=True))
        while True:
            nodes = self.json("nodes")["nodes"]
            if sum(n["state"] == "up" for n in nodes) == agents:
                break
            time.sleep(0.1)

    def cli(self, *args):
        r = subprocess.run([self.g] + list(args), env=self.env, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("gpupool %s: %s" % (" ".join(args), r.stderr))
        return r.stdout

    def json(self, *args):
        return json.loads(self.cli(*(list(args) + ["--json"])))

    def run(self, args):
        jid = int(self.cli("submit", "--workdir", "/", *args).split()[-1])
        while True:
            job = self.json("show", str(jid))["job"]
            if job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED", "LOST", "TIMEOUT"):
                return jid, job
            time.sleep(0.05)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=32)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--gpupool")
    ap.add_argument("--out")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("gang_start: run as root")
    g = find_gpupool(a.gpupool)
    pool = Pool(g, a.agents)
    n = a.agents
    rows = {"plain": [], "mpi": []}
    try:
        for _ in range(a.runs):
            jid, job = pool.run(["--tasks", str(n), "--gpus", "1", "--", "true"])
            assert job["state"] == "SUCCEEDED", job
            starts = [t["start_time_us"] for t in job["tasks"]]
            rows["plain"].append({"submit_to_last_s": (max(starts) - job["submit_time_us"]) / 1e6,
                                  "first_to_last_s": (max(starts) - min(starts)) / 1e6})
        # What mpirun does: its rsh agent (the task's OMPI_MCA_plm_rsh_agent), once per task.
        remote = ("for i in $(seq 1 %d); do $OMPI_MCA_plm_rsh_agent --job $GPUPOOL_JOB_ID "
                  "--task $i -- sh -c 'echo $GPUPOOL_TASK_INDEX $(date +%%s%%N)' & done; wait"
                  % (n - 1))
        for _ in range(a.runs):
            jid, job = pool.run(["--tasks", str(n), "--gpus", "1", "--mpi", "--", "sh", "-c", remote])
            assert job["state"] == "SUCCEEDED", job
            lines = [l.split() for l in pool.cli("logs", str(jid)).splitlines()]
            at = {int(t): int(ns) / 1000 for t, ns in lines if t.isdigit() and ns.isdigit()}
            assert len(at) == n - 1, (len(at), pool.cli("logs", str(jid), "--stderr"))
            stamps = list(at.values())
            t0 = job["tasks"][0]["start_time_us"]
            # How long each remote command took once its held task was running.
            after_task = [at[t] - max(t0, job["tasks"][t]["start_time_us"]) for t in at]
            rows["mpi"].append({"submit_to_last_s": (max(stamps) - job["submit_time_us"]) / 1e6,
                                "task0_to_last_remote_s": (max(stamps) - t0) / 1e6,
                                "held_task_to_last_s": (max(stamps) - max(
                                    job["tasks"][t]["start_time_us"] for t in at)) / 1e6,
                                "remote_after_its_task_max_s": max(after_task) / 1e6})
    finally:
        pool.stop()
    summary = {}
    for mode, rs in rows.items():
        for key in rs[0]:
            vals = [r[key] for r in rs]
            summary["%s.%s" % (mode, key)] = {"p50": statistics.median(vals), "p90": pct(vals, 0.9),
                                              "max": max(vals)}
    print("%d-task gang on %d agents, %d runs each (seconds)" % (n, n, a.runs))
    print("%-32s %8s %8s %8s" % ("measure", "p50", "p90", "max"))
    for k, v in summary.items():
        print("%-32s %8.3f %8.3f %8.3f" % (k, v["p50"], v["p90"], v["max"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"agents": n, "runs": a.runs, "summary": summary, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
