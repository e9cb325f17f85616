#!/usr/bin/env python3
"""How long a controller that takes the lease spends loading the pool's state from
PostgreSQL (docs/deploy.md, "One leader"): the time the lease must outlast, or be renewed
through. A real PostgreSQL 15 (tests/testlib/hasite.py), one `gpupool server`; the queue is
filled with trivial one-GPU jobs (arrays of 1,000 through POST /v1/jobs, as
bench/pool/scale.py does) up to each --jobs count; at each count the server is stopped
(it gives the lease up) and started --restarts times, and each start's load is read from
its log: from "leads at epoch" to "loaded N active jobs".

--takeover S: then, at the last count, three controllers (default lease 5 s), the leader
killed with SIGKILL and started again as a standby; for S seconds each controller that
exits is started again (as systemd's Restart=on-failure would, without its 5 s pause);
shown: the epochs the lease went through, the exits with 75 (lease lost), and when a
controller first answered /readyz 200 and whether one still did at the end.

  sudo python3 bench/pool/lease_load.py --gpupool build/release/gpupool
      [--jobs 10000,100000] [--restarts 3] [--takeover 40]

Needs root and postgresql-15.
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "testlib"))
sys.path.insert(0, HERE)
import hasite  # noqa: E402
import pooltest  # noqa: E402
import scale  # noqa: E402

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}) ")


def stamp(line):
    m = STAMP.match(line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f") if m else None


def spawn(gpupool, root, pg, log_path, name="c0"):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [gpupool, "--log-level", "info", "server", "--config", "", "--state-dir", d,
             "--port", "0", "--store", pg.spec, "--max-queued-per-user", "1000000", "--max-queued-total", "1000000"],
            stdout=log, stderr=log, start_new_session=True), os.path.join(d, "gpupool.sock")


def start(gpupool, root, pg, log_path):
    proc, sock = spawn(gpupool, root, pg, log_path)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("the server exited:\n" + open(log_path, errors="replace").read()[-3000:])
        if os.path.exists(sock) and hasite.call(sock, "GET", "/readyz", timeout=600)[0] == 200:
            return proc, sock
        time.sleep(0.05)
    sys.exit("the server did not get ready")


def load_ms(log_path):
    led = loaded = None
    text = None
    with open(log_path, errors="replace") as f:
        for line in f:
            if "leads at epoch" in line:
                led = stamp(line)
            elif "controller: loaded" in line:
                loaded, text = stamp(line), line.split("controller: ", 1)[1].strip()
    return (loaded - led).total_seconds() * 1000.0, text


def ready(sock):
    try:
        return hasite.call(sock, "GET", "/readyz", timeout=2)[0] == 200
    except Exception:  # noqa: BLE001  (not listening yet, exited, busy)
        return False


def takeover(gpupool, root, pg, watch_s):
    names = ["t0", "t1", "t2"]
    procs, socks, exits = {}, {}, []
    for n in names:
        procs[n], socks[n] = spawn(gpupool, root, pg, os.path.join(root, n + ".log"), n)
    leader = None
    while leader is None:
        leader = next((n for n in names if ready(socks[n])), None)
        time.sleep(0.05)
    epoch = int(pg.query("SELECT epoch FROM leader_lease")[0][0])
    procs[leader].kill()
    procs[leader].wait()
    t0 = time.time()
    procs[leader], _ = spawn(gpupool, root, pg, os.path.join(root, leader + ".log"), leader)
    first_ready, epochs = None, [epoch]
    while time.time() - t0 < watch_s:
        e = int(pg.query("SELECT epoch FROM leader_lease")[0][0])
        if e != epochs[-1]:
            epochs.append(e)
        for n in names:
            rc = procs[n].poll()
            if rc is not None:
                exits.append((round(time.time() - t0, 1), n, rc))
                procs[n], _ = spawn(gpupool, root, pg, os.path.join(root, n + ".log"), n)
        if first_ready is None and any(ready(socks[n]) for n in names):
            first_ready = time.time() - t0
        time.sleep(0.1)
    at_end = [n for n in names if ready(socks[n])]
    pooltest.stop_processes(list(procs.values()), timeout=60)
    print("takeover: epochs %s; exits (s after the kill, controller, status) %s; first "
          "ready %s s after the kill; ready at the end: %s; uptime: %s" % (
              epochs, exits, first_ready and round(first_ready, 1), at_end,
              open("/proc/loadavg").read().split()[:3]), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpupool", default="build/release/gpupool")
    ap.add_argument("--jobs", default="10000,100000")
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--takeover", type=float, default=0, metavar="S")
    args = ap.parse_args()
    why = hasite.missing()
    if why:
        sys.exit("lease_load.py " + why)
    gpupool = os.path.abspath(args.gpupool)
    root = pooltest.make_test_dir("gp-leaseload-")
    pg = hasite.Postgres(root)
    work = os.path.join(root, "work")
    os.makedirs(work)
    proc = None
    try:
        queued = 0
        for n, target in enumerate(int(x) for x in args.jobs.split(",")):
            log = os.path.join(root, "fill%d.log" % n)
            proc, sock = start(gpupool, root, pg, log)
            t = time.perf_counter()
            scale.fill(sock, target - queued, work)
            fill_s = time.perf_counter() - t
            queued = target
            pooltest.stop_processes([proc])
            times = []
            for r in range(args.restarts):
                log = os.path.join(root, "load%d-%d.log" % (n, r))
                proc, sock = start(gpupool, root, pg, log)
                ms, text = load_ms(log)
                times.append(ms)
                pooltest.stop_processes([proc])
                proc = None
            print("%d jobs (filled in %.0f s): load %s ms; %s; uptime: %s" % (
                target, fill_s, ", ".join("%.0f" % x for x in times), text,
                open("/proc/loadavg").read().split()[:3]), flush=True)
        if args.takeover > 0:
            takeover(gpupool, root, pg, args.takeover)
    finally:
        if proc is not None:
            pooltest.stop_processes([proc])
        pg.stop()
        pooltest.remove_dir(root)


if __name__ == "__main__":
    main()
