#!/usr/bin/env python3
"""Trivial-job throughput of the pool on its two stores, side by side (issue 16's target:
PostgreSQL at least 80% of SQLite). Each round starts `gpupool server` on one store and
one agent on a fake 8-GPU node, then runs pool_vs_slurm.py's gpupool-api measurement
(--jobs trivial one-GPU jobs submitted back to back, then --idle-jobs one at a time).
Rounds alternate SQLite, PostgreSQL, SQLite, ... so that the machine's drift hits both.
The PostgreSQL server runs as a leader-elected controller: its lease, renewals and the
fencing check in every write are part of what is measured. PostgreSQL is a local
PostgreSQL 15 on a Unix socket with fsync off (as the store tests run it), SQLite is in WAL
mode on the same disk.

  sudo python3 bench/pool/store_throughput.py --gpupool build/release/gpupool \\
      [--rounds 2] [--jobs 1000] [--out store_throughput.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "testlib"))
import hasite  # noqa: E402
import pooltest  # noqa: E402

NODE = os.path.join(HERE, "node-8gpu.json")


def run_round(gpupool, store, pg, jobs, idle_jobs, root):
    d = tempfile.mkdtemp(prefix="gp-st-%s-" % store, dir=root)
    os.chmod(d, 0o755)
    sock = os.path.join(d, "gpupool.sock")
    server_cmd = [gpupool, "server", "--config", "", "--state-dir", d, "--port", "0"]
    if store == "postgresql":
        server_cmd += ["--store", pg.spec, "--advertise", "unix:" + sock]
    log = open(os.path.join(d, "log"), "ab")
    server = subprocess.Popen(server_cmd, stdout=log, stderr=log, start_new_session=True)
    agent = None
    try:
        deadline = time.time() + 30
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.05)
        agent = subprocess.Popen(
            [gpupool, "agent", "--config", "", "--controller", "unix:" + sock, "--state-dir",
             os.path.join(d, "a"), "--fake", NODE, "--node-name", "bench"], stdout=log,
            stderr=log, start_new_session=True)
        out = os.path.join(d, "result.json")
        subprocess.run([sys.executable, os.path.join(HERE, "pool_vs_slurm.py"), "measure",
                        "--system", "gpupool-api", "--work", os.path.join(d, "work"), "--jobs",
                        str(jobs), "--idle-jobs", str(idle_jobs), "--sock", sock, "--out", out],
                       check=True)
        with open(out) as f:
            return json.load(f)
    finally:
        pooltest.stop_processes([agent, server])
        pooltest.kill_leftovers(os.path.join(d, "a"))
        if store == "postgresql":
            # The next round starts on an empty database.
            subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-h", pg.dir, "-U",
                            "postgres", "-q", "-c", "DROP DATABASE gpupool", "-c",
                            "CREATE DATABASE gpupool"], check=True, capture_output=True)
        pooltest.remove_dir(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpupool", default="build/release/gpupool")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per store")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--idle-jobs", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    why = hasite.missing()
    if why:
        sys.exit("store_throughput.py " + why)
    root = pooltest.make_test_dir("gp-st-")
    pg = hasite.Postgres(root)
    rows = []
    try:
        for i in range(args.rounds):
            for store in ("sqlite", "postgresql"):
                r = run_round(os.path.abspath(args.gpupool), store, pg, args.jobs,
                              args.idle_jobs, root)
                b, idle = r["burst"], r.get("idle", {})
                rows.append({"round": i + 1, "store": store,
                             "submissions_per_s": round(b["submissions_per_s"], 1),
                             "completed_per_s": round(b["completed_per_s"], 1),
                             "idle_submit_to_start_p50_ms": idle.get("p50_ms"),
                             "idle_submit_to_start_p99_ms": idle.get("p99_ms")})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        pg.stop()
        pooltest.remove_dir(root)

    def mean(store, key):
        v = [r[key] for r in rows if r["store"] == store]
        return sum(v) / len(v)

    summary = {"rounds": rows}
    for key in ("submissions_per_s", "completed_per_s"):
        summary["postgresql_over_sqlite_" + key] = round(
            mean("postgresql", key) / mean("sqlite", key), 3)
    print(json.dumps(summary, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
