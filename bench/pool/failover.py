#!/usr/bin/env python3
"""Failover of the controller (issue 16's target: takeover p50 <= 5 s over 10 kills, no job
lost or run twice). --controllers (default 2) on one real PostgreSQL 15 (tests/testlib/hasite.py),
two agents on fake 4-GPU nodes, and a CLI client submitting trivial jobs the whole time.
The leader is killed with SIGKILL --kills times (with two controllers they alternate),
and started again as a standby each time. Takeover = from the kill until the other controller answers /readyz
(it holds the lease and has loaded the state); also shown: until the next submission
through the CLI (given both addresses) succeeds.

  sudo python3 bench/pool/failover.py --gpupool build/release/gpupool [--kills 10]
      [--lease-ms 5000] [--controllers 2] [--out failover.json]

Needs root and postgresql-15.
"""
import argparse
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "testlib"))
import hasite  # noqa: E402


def percentile(values, p):
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpupool", default="build/release/gpupool")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--lease-ms", type=int, default=5000)
    ap.add_argument("--controllers", type=int, default=2, choices=range(2, 6))
    ap.add_argument("--out")
    args = ap.parse_args()
    why = hasite.missing()
    if why:
        sys.exit("failover.py " + why)
    site = hasite.Site(os.path.abspath(args.gpupool), controllers=args.controllers, agents=2,
                       lease_ms=args.lease_ms)
    ids, failures, lock, stop = [], [], threading.Lock(), threading.Event()
    submitted_at = []  # (time the submit returned, id)

    def submitter():
        while not stop.is_set():
            jid, err = site.submit()
            with lock:
                if jid is None:
                    failures.append(err)
                else:
                    ids.append(jid)
                    submitted_at.append(time.time())

    try:
        site.wait_nodes(2)
        threads = [threading.Thread(target=submitter) for _ in range(2)]
        for t in threads:
            t.start()
        takeovers, first_submit, leaders = [], [], []
        for _ in range(args.kills):
            time.sleep(2.0)  # jobs flow between kills
            old = site.leader()
            # A standby must be up (it was restarted after the previous kill).
            other = [n for n in site.names if n != old][0]
            while not os.path.exists(site.sock(other)):
                time.sleep(0.02)
            time.sleep(0.5)
            t0 = time.time()
            site.kill9(old)
            new = site.leader(besides=old, timeout=60)
            takeovers.append(time.time() - t0)
            leaders.append((old, new))
            site.start_controller(old)
            while True:
                with lock:
                    later = [t for t in submitted_at if t > t0]
                if later:
                    first_submit.append(min(later) - t0)
                    break
                time.sleep(0.02)
        stop.set()
        for t in threads:
            t.join()
        jobs = site.wait_all(ids, timeout=300)
        runs = site.runs_of()
        result = {
            "kills": args.kills,
            "lease_ms": args.lease_ms,
            "takeover_s": [round(t, 3) for t in takeovers],
            "takeover_p50_s": round(percentile(takeovers, 50), 3),
            "takeover_max_s": round(max(takeovers), 3),
            "first_submit_after_kill_s": [round(t, 3) for t in first_submit],
            "first_submit_p50_s": round(percentile(first_submit, 50), 3),
            "jobs_accepted": len(ids),
            "jobs_succeeded": sum(1 for i in ids if jobs[i]["state"] == "SUCCEEDED"),
            "jobs_lost": sum(1 for i in ids if runs.get(i, 0) == 0),
            "jobs_run_twice": sum(1 for i in ids if runs.get(i, 0) > 1),
            "submissions_failed": len(failures),
            "alternated": all(leaders[i][1] == leaders[i + 1][0] for i in range(len(leaders) - 1)),
        }
    finally:
        stop.set()
        site.stop()
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
