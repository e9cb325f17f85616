#!/usr/bin/env python3
"""GET /metrics at scale (issue 17's target: an answer in under 100 ms for 1,000 nodes of
8 GPUs). python3 stdlib only.

  sudo python3 bench/pool/metrics_scale.py [--gpupool BIN] [--nodes 1000] [--gpus 8]
      [--jobs 4000] [--scrapes 30] [--out FILE]

Starts `gpupool server` (SQLite store, node timeout an hour so that nodes without a
polling agent stay up), registers --nodes nodes of --gpus fake GPUs each through the agent
protocol (POST /v1/agent/register as root on the Unix socket, protocol 1.3), queues --jobs
one-GPU jobs that the scheduler places on them (they stay ASSIGNED: no agent starts them,
but they hold their GPUs, so the DCGM gauges carry hpc_job and user labels), sends one
telemetry batch per node (a sample per GPU), then scrapes GET /metrics --scrapes times in a
row as root (an admin) and reports the answer time (p50, p99, max), its size and how many
series it has. The first scrape is reported apart: it warms the store's caches.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "testlib"))
import pooltest  # noqa: E402


def call(sock, method, path, body=None, timeout=60):
    conn = pooltest.UnixConnection(sock, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def node_info(name, gpus):
    out = {"schema": "gpupool.node/v1", "hostname": name, "gpus": []}
    for i in range(gpus):
        out["gpus"].append({
            "vendor": "nvidia", "index": i, "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-%s-%04d" % (name, i), "pci_bus_id": "0000:%02x:00.0" % (i + 1),
            "memory_total_bytes": 85520809984, "compute_capability": "9.0",
            "minor_number": i, "device_nodes": ["/dev/nvidia%d" % i], "backend": "fake"})
    return out


def percentile(values, p):
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpupool", default=os.path.join(ROOT, "build", "release", "gpupool"))
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--scrapes", type=int, default=30)
    ap.add_argument("--perf", help="record a perf profile of the server's scrapes here")
    ap.add_argument("--out")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("metrics_scale.py: run as root (it registers nodes on the Unix socket)")
    if not (1 <= a.nodes <= 20000 and 1 <= a.gpus <= 16 and 0 <= a.jobs and 2 <= a.scrapes):
        ap.error("--nodes 1..20000, --gpus 1..16, --jobs 0 or more, --scrapes 2 or more")
    d = pooltest.make_test_dir("gp-metrics-")
    sock = os.path.join(d, "gpupool.sock")
    log = open(os.path.join(d, "server.log"), "ab")
    proc = subprocess.Popen([a.gpupool, "server", "--config", "", "--state-dir", d, "--port", "0",
                             "--node-timeout", "3600"], stdout=log, stderr=log,
                            start_new_session=True)
    try:
        deadline = time.time() + 30
        while not os.path.exists(sock):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("gpupool server did not start (see %s/server.log)" % d)
            time.sleep(0.05)
        t0 = time.time()
        for n in range(a.nodes):
            name = "n%05d" % n
            st, body = call(sock, "POST", "/v1/agent/register", {
                "protocol": "1.3", "node": name, "info": node_info(name, a.gpus),
                "cpu_milli": 128000, "memory_mib": 1024 * 1024, "running": []})
            if st != 200:
                raise RuntimeError("registering %s answered %d: %s" % (name, st, body[:300]))
        reg_s = time.time() - t0
        for _ in range(a.jobs):
            st, body = call(sock, "POST", "/v1/jobs", {
                "command": ["true"], "workdir": d, "request": {"gpus": 1, "cpu_milli": 100}})
            if st != 201:
                raise RuntimeError("submitting answered %d: %s" % (st, body[:300]))
        deadline = time.time() + 120
        while True:  # until the scheduler placed them all
            st, body = call(sock, "GET", "/v1/jobs?state=PENDING&limit=1")
            if st == 200 and not json.loads(body)["jobs"]:
                break
            if time.time() > deadline:
                raise RuntimeError("the jobs were not all placed within 120 s")
            time.sleep(0.2)
        # Which jobs hold each GPU, as an agent tells it with each sample.
        holders = {}
        st, body = call(sock, "GET", "/v1/jobs?state=ASSIGNED")
        for j in json.loads(body)["jobs"] if st == 200 else []:
            for p in j.get("placement", []):
                for u in p.get("gpu_uuids", []):
                    holders.setdefault(u, []).append(
                        {"job_id": j["id"], "gpu_milli": p.get("gpu_milli", 1000)})
        now_ms = int(time.time() * 1000)
        for n in range(a.nodes):
            name = "n%05d" % n
            samples = [{"index": i, "uuid": "GPU-%s-%04d" % (name, i), "at_ms": now_ms,
                        "util_pct": float((n * 7 + i * 13) % 100), "mem_used_mib": 1000 + i,
                        "mem_total_mib": 81559, "power_w": 300.0 + i, "temp_c": 50.0 + i % 7,
                        "xid_errors": 0,
                        "jobs": holders.get("GPU-%s-%04d" % (name, i), [])}
                       for i in range(a.gpus)]
            st, body = call(sock, "POST", "/v1/agent/telemetry",
                            {"node": name, "samples": samples})
            if st not in (200, 204):
                raise RuntimeError("telemetry of %s answered %d: %s" % (name, st, body[:300]))
        perf = None
        if a.perf:  # a profile of the server during the scrapes
            perf = subprocess.Popen(["perf", "record", "-g", "-o", a.perf, "-p", str(proc.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        ms, size, series = [], 0, 0
        for k in range(a.scrapes):
            t1 = time.perf_counter()
            st, body = call(sock, "GET", "/metrics")
            ms.append((time.perf_counter() - t1) * 1000.0)
            if st != 200:
                raise RuntimeError("GET /metrics answered %d: %s" % (st, body[:300]))
            size = len(body)
            text = body.decode()
            series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
            dcgm = sum(1 for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
            with_job = sum(1 for line in text.splitlines()
                           if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and "hpc_job=" in line)
        if perf:
            perf.send_signal(2)
            perf.wait()
        warm = ms[1:]
        res = {"nodes": a.nodes, "gpus_per_node": a.gpus, "jobs": a.jobs,
               "register_s": reg_s, "first_scrape_ms": ms[0],
               "p50_ms": percentile(warm, 50), "p99_ms": percentile(warm, 99),
               "max_ms": max(warm), "bytes": size, "series": series,
               "gpu_util_series": dcgm, "gpu_util_series_with_job": with_job}
        print("GET /metrics, %d nodes x %d GPUs, %d jobs placed: first %.1f ms; then p50 %.1f ms, "
              "p99 %.1f ms, max %.1f ms over %d scrapes; %.1f MiB, %d series (%d "
              "DCGM_FI_DEV_GPU_UTIL, %d with hpc_job)"
              % (a.nodes, a.gpus, a.jobs, ms[0], res["p50_ms"], res["p99_ms"], res["max_ms"],
                 len(warm), size / 1048576.0, series, dcgm, with_job))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        pooltest.stop_processes([proc])
        log.close()
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
