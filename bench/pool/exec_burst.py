#!/usr/bin/env python3
"""Where `gpupool exec` bursts spend their time (docs/benchmarks.md, "Gang start-up"):
with a 32-task --mpi job held on 32 agents (the gang_start.py pool), it times one exec
alone, 31 at once (one per task, with each remote command's start) and 31 at once into
one task, with `gpupool exec` and with the slim `gpupool-exec`, then 31 concurrent
`gpupool whoami` (client start-up and one request, no exec).

    sudo python3 bench/pool/exec_burst.py [--gpupool BIN]

Each line also gives the CPU the pool spent on it (server, agents, shims, clients and
the remote commands), counted by a cgroup v1 cpuacct group this script runs in, where
the host has one: on a shared machine that is steadier than wall time. gpupool moves
jobs only within the cpu, memory and devices hierarchies, so cpuacct sees them all.
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gang_start  # noqa: E402  (the pool of fake one-GPU agents)


CPUACCT = "/sys/fs/cgroup/cpuacct"


def join_cpuacct():
    """Moves this process (and so everything it starts) into a cpuacct group of its own;
    returns the group's directory, or None where there is no cgroup v1 cpuacct."""
    if not os.path.isfile(os.path.join(CPUACCT, "cpuacct.usage")):
        return None
    group = os.path.join(CPUACCT, "gp-exec-burst-%d" % os.getpid())
    try:
        os.makedirs(group, exist_ok=True)
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        return None
    return group


def leave_cpuacct(group):
    if group:
        with open(os.path.join(CPUACCT, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        try:
            os.rmdir(group)
        except OSError:
            pass


def cpu_seconds(group):
    if not group:
        return 0.0
    with open(os.path.join(group, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


GROUP = None


def timed(what, argvs, pool, capture=False):
    c = cpu_seconds(GROUP)
    t = time.time()
    ps = [subprocess.Popen(a, env=pool.env, stdout=subprocess.PIPE if capture else
                           subprocess.DEVNULL, text=True) for a in argvs]
    outs = [p.communicate()[0] for p in ps]
    took = time.time() - t
    extra = ""
    if GROUP:
        extra += "; pool CPU %.1f ms each" % ((cpu_seconds(GROUP) - c) / len(argvs) * 1000)
    if capture:
        starts = sorted(float(o) - t for o in outs)
        extra += "; remote commands started from %.2f s to %.2f s" % (starts[0], starts[-1])
    print("%-34s %.3f s%s" % (what, took, extra))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpupool")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("exec_burst: run as root")
    g = gang_start.find_gpupool(a.gpupool)
    global GROUP
    GROUP = join_cpuacct()
    pool = gang_start.Pool(g, 32)
    try:
        jid = int(pool.cli("submit", "--workdir", "/", "--tasks", "32", "--gpus", "1", "--mpi",
                           "--", "sleep", "600").split()[-1])
        while pool.json("show", str(jid))["job"]["state"] != "RUNNING":
            time.sleep(0.05)
        time.sleep(1)
        slim = os.path.join(os.path.dirname(g), "gpupool-exec")
        for name, ex in (("gpupool exec", [g, "exec", "--job", str(jid)]),
                         ("gpupool-exec", [slim, "--job", str(jid)])):
            print("-- " + name)
            burst(pool, ex)
        timed("31 whoami at once", [[g, "whoami"] for _ in range(31)], pool)
        pool.cli("cancel", str(jid))
    finally:
        pool.stop()
        leave_cpuacct(GROUP)


def burst(pool, ex):
    timed("one exec", [ex + ["--task", "5", "--", "true"]], pool)
    timed("31 execs at once, one per task",
          [ex + ["--task", str(i), "--", "date", "+%s.%N"] for i in range(1, 32)], pool,
          capture=True)
    timed("31 execs at once into one task",
          [ex + ["--task", "7", "--", "true"] for _ in range(31)], pool)


if __name__ == "__main__":
    main()
