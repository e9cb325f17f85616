#!/usr/bin/env python3
"""What GPU telemetry costs the node (issue 17, target: under 1% of one core for an 8-GPU
node at the default 5 s interval). python3 stdlib only.

  telemetry_cost.py [--gpupool BIN] [--fake-nvml LIB] [--duration 60] [--out FILE]

Runs `gpupool up` (controller and agent in one process) on the fake libnvidia-ml.so.1 of
tests/fakelib/nvml with the 8-GPU H100 scenario, each GPU with two compute processes (so
the agent also maps processes to jobs through /proc/PID/cgroup), three times: telemetry
off (--telemetry-interval 0), at the default 5 s, and at 1 s. For each it waits until the
telemetry shows on GET /v1/nodes, then reads the process's CPU time (utime + stime of
/proc/PID/stat) across --duration seconds of an otherwise idle pool. The cost of
telemetry is the difference to the run without it; the 1 s run gives the CPU time of one
round (8 samples taken, sent, decoded and kept) with five times the signal. Both include
the controller's side (it runs in the same process): an upper bound of the agent's.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TICK = os.sysconf("SC_CLK_TCK")


def find_gpupool(arg):
    if arg:
        return arg
    for p in ("build/h-bench/gpupool", "build/release/gpupool"):
        if os.access(os.path.join(ROOT, p), os.X_OK):
            return os.path.join(ROOT, p)
    return shutil.which("gpupool") or "gpupool"


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def run(gpupool, lib, interval, duration):
    state = tempfile.mkdtemp(prefix="gp-telemetry-bench-")
    telemetry = os.path.join(state, "telemetry.json")
    with open(telemetry, "w") as f:
        json.dump({"devices": {str(i): {
            "utilization_gpu": 40 + i, "memory_used": (i + 1) << 30, "power_mw": 350000,
            "temperature": 55, "ecc_total": 0,
            "processes": [{"pid": os.getpid(), "used_memory": 1 << 30, "sm_util": 20},
                          {"pid": 1, "used_memory": 1 << 29, "sm_util": 10}]}
            for i in range(8)}}, f)
    env = dict(os.environ, GPUPOOL_NVML_LIBRARY=lib,
               FAKE_NVML_SCENARIO=os.path.join(ROOT, "tests/fakelib/nvml/scenarios",
                                               "h100_hgx_8gpu.json"),
               FAKE_NVML_TELEMETRY=telemetry,
               GPUPOOL_SERVER="unix:" + os.path.join(state, "gpupool.sock"))
    log = open(os.path.join(state, "up.log"), "wb")
    up = subprocess.Popen([gpupool, "up", "--state-dir", state, "--port", "0",
                           "--telemetry-interval", str(interval)],
                          env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            r = subprocess.run([gpupool, "nodes", "--json"], env=env, capture_output=True,
                               text=True)
            if r.returncode == 0:
                nodes = json.loads(r.stdout)["nodes"]
                gpus = nodes[0]["gpus"] if nodes else []
                if len(gpus) == 8 and (interval == 0 or all("telemetry" in g for g in gpus)):
                    break
            if time.time() > deadline or up.poll() is not None:
                raise SystemExit("the pool did not come up with 8 GPUs (see %s/up.log)" % state)
            time.sleep(0.5)
        time.sleep(2)  # start-up work done
        before = cpu_seconds(up.pid)
        time.sleep(duration)
        used = cpu_seconds(up.pid) - before
    finally:
        up.terminate()
        up.wait(30)
        shutil.rmtree(state, ignore_errors=True)
    return used


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpupool")
    ap.add_argument("--fake-nvml", help="the fake libnvidia-ml.so.1 (default: beside the build)")
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--out")
    a = ap.parse_args()
    gpupool = find_gpupool(a.gpupool)
    lib = a.fake_nvml or os.path.join(os.path.dirname(gpupool),
                                      "tests/fakelib/nvml/normal/libnvidia-ml.so.1")
    if not os.path.exists(lib):
        raise SystemExit("no fake NVML library at %s: build the tests (fake_nvml)" % lib)
    res = {}
    for interval in (0, 5, 1):
        res[interval] = run(gpupool, lib, interval, a.duration)
        print("interval %s: %.3f s of CPU in %.0f s (%.3f%% of one core)"
              % (interval or "off", res[interval], a.duration,
                 100 * res[interval] / a.duration), flush=True)
    at5 = max(0.0, res[5] - res[0]) / a.duration
    per_round = max(0.0, res[1] - res[0]) / a.duration  # one round a second
    out = {"duration_s": a.duration, "cpu_s": {str(k): v for k, v in res.items()},
           "cost_at_5s_pct_of_core": 100 * at5,
           "cpu_ms_per_round": 1000 * per_round,
           "cost_at_5s_from_rounds_pct_of_core": 100 * per_round / 5}
    print("telemetry at 5 s, 8 GPUs: %.3f%% of one core measured; %.2f ms of CPU per round "
          "(%.3f%% of one core at 5 s)" % (out["cost_at_5s_pct_of_core"],
                                           out["cpu_ms_per_round"],
                                           out["cost_at_5s_from_rounds_pct_of_core"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
