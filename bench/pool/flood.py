#!/usr/bin/env python3
"""One user floods the API with 5,000 submissions; how long does `gpupool queue` take
for another user meanwhile (issue 15 B.5)? Run twice in one go, side by side: without
limits, and with the flooding user limited to 500 queued jobs (`max_queued`), so that the
rest of the flood is refused at once instead of growing the queue every pass scans.

    sudo python3 bench/pool/flood.py [--jobs 5000] [--threads 16] [--gpupool BIN]

The flood is root's (uid 0 on the Unix socket, 16 threads of POSTs); the second user is
`nobody`, running `gpupool queue` every 100 ms (client start-up included). No agents run,
so nothing starts and every accepted job stays queued.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gang_start  # noqa: E402  (find_gpupool)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "testlib"))
from pooltest import UnixConnection  # noqa: E402  (tests/testlib)


def request(sock, method, path, body=None):
    c = UnixConnection(sock, timeout=60)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def run(g, jobs, threads, max_queued):
    d = tempfile.mkdtemp(prefix="gp-flood-", dir="/tmp")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "gpupool.sock")
    log = open(os.path.join(d, "server.log"), "ab")
    server = subprocess.Popen([g, "server", "--state-dir", d, "--port", "0"], stdout=log,
                              stderr=log, start_new_session=True)
    env = dict(os.environ, GPUPOOL_SERVER="unix:" + sock)
    try:
        while subprocess.run([g, "whoami"], env=env, capture_output=True).returncode:
            time.sleep(0.05)
        if max_queued:
            st, body = request(sock, "PUT", "/v1/limits",
                               {"users": {"root": {"max_queued": max_queued}}})
            assert st == 200, body
        counts = {"accepted": 0, "refused": 0}
        lock = threading.Lock()
        done = threading.Event()

        def flood(n):
            for _ in range(n):
                st, _ = request(sock, "POST", "/v1/jobs",
                                {"command": ["true"], "workdir": "/", "request": {"gpus": 0}})
                with lock:
                    counts["accepted" if st == 201 else "refused"] += 1

        workers = [threading.Thread(target=flood, args=(jobs // threads,)) for _ in range(threads)]
        lat = []
        t0 = time.time()
        for w in workers:
            w.start()

        def watch():
            while not done.is_set():
                t = time.time()
                r = subprocess.run(["runuser", "-u", "nobody", "--", g, "queue"], env=env,
                                   capture_output=True)
                if r.returncode == 0:
                    lat.append(time.time() - t)
                time.sleep(0.1)

        watcher = threading.Thread(target=watch)
        watcher.start()
        for w in workers:
            w.join()
        flood_s = time.time() - t0
        done.set()
        watcher.join()
        lat.sort()
        return {"max_queued": max_queued or "none", "accepted": counts["accepted"],
                "refused": counts["refused"], "flood_s": round(flood_s, 2),
                "queue_samples": len(lat),
                "queue_p50_ms": round(1000 * statistics.median(lat), 1),
                "queue_p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1),
                "queue_max_ms": round(1000 * lat[-1], 1)}
    finally:
        server.terminate()
        server.wait(15)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--gpupool")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("flood: run as root (the second user is `nobody`)")
    g = gang_start.find_gpupool(a.gpupool)
    rows = [run(g, a.jobs, a.threads, None), run(g, a.jobs, a.threads, 500)]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
