#!/usr/bin/env python3
"""Measures one side of the gpupool-vs-Slurm benchmark of trivial one-GPU jobs, or prints
the side-by-side table of several measurements (python3 stdlib only).

  pool_vs_slurm.py measure --system slurm|slurm-array|gpupool-api|gpupool-cli \
      --work DIR --jobs 1000 --idle-jobs 30 --out RESULT.json [--sock SOCK] [--gpupool BIN]
  pool_vs_slurm.py report --out ALL.json RESULT.json...

`measure` expects the system to be up already (bench_pool_vs_slurm.sh starts it; Slurm via
SLURM_CONF, gpupool via its Unix socket). Every job is the same trivial command for both
systems, `date +%s.%N > WORK/starts/start.JOBID`, run through sh and asking for one GPU:
the job writes the time it started, the client writes the time just before it submitted,
so submit-to-start needs no scheduler timestamps (Slurm's have 1 s resolution).

Two phases per system:
  burst: submit --jobs jobs back to back from one client, then wait until none is queued or
         running. submissions/s = jobs / (last submit returned - first submit began);
         completed/s = jobs / (last completion seen - first submit began); submit-to-start
         p50/p99 over all jobs (includes the time a job waits for a free GPU).
  idle:  --idle-jobs jobs one at a time, each submitted to an idle node and waited for
         until it has finished: submit-to-start p50/p99 of a job that never queues.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "testlib"))
from pooltest import UnixConnection  # noqa: E402  (tests/testlib)

POLL_S = 0.05  # how often completion is polled (both systems alike)
# gpupool counts CPUs (its agent reports the machine's, a job asks for 1 by default), so on a
# small machine CPUs, not GPUs, would cap concurrency; 8 jobs share the CPUs instead, as
# Slurm's partition lets them (OverSubscribe=FORCE:8 in slurm_setup.sh).
CPU_MILLI = max(1, (os.cpu_count() or 1) * 1000 // 8)


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]



class Api:
    """A keep-alive HTTP client of the gpupool API over its Unix socket."""

    def __init__(self, sock):
        self.path = sock
        self.conn = None

    def call(self, method, path, body=None):
        data = json.dumps(body) if body is not None else None
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = UnixConnection(self.path, timeout=60)
            try:
                self.conn.request(method, path, body=data,
                                  headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                payload = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, json.loads(payload) if payload else None
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise RuntimeError("unreachable")


def job_cmd(starts, var):
    return "date +%%s.%%N > %s/start.$%s" % (starts, var)


class Slurm:
    name = "slurm"

    def __init__(self, work):
        self.work = work
        self.starts = os.path.join(work, "starts")
        os.makedirs(os.path.join(work, "out"), exist_ok=True)

    def submit(self):
        out = subprocess.run(
            ["sbatch", "--parsable", "--gres=gpu:1", "-D", self.work,
             "-o", os.path.join(self.work, "out", "%j.out"),
             "--wrap", job_cmd(self.starts, "SLURM_JOB_ID")],
            check=True, capture_output=True, text=True).stdout
        return out.strip().split(";")[0]

    def active(self, job=None):
        cmd = ["squeue", "-h", "-o", "%i"] + (["-j", job] if job else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            # squeue -j on a purged job fails: it is no longer active.
            if job and "Invalid job id" in r.stderr:
                return 0
            raise RuntimeError("squeue failed: " + r.stderr.strip())
        return len(r.stdout.split())

    def failed(self, ids):
        return []  # checked through the start files


class SlurmArray(Slurm):
    name = "slurm-array"

    def submit_array(self, n):
        out = subprocess.run(
            ["sbatch", "--parsable", "--gres=gpu:1", "--array=0-%d" % (n - 1), "-D", self.work,
             "-o", os.path.join(self.work, "out", "%A_%a.out"),
             "--wrap", "date +%%s.%%N > %s/start.${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
             % self.starts],
            check=True, capture_output=True, text=True).stdout
        base = out.strip().split(";")[0]
        return ["%s_%d" % (base, i) for i in range(n)]


class GpupoolApi:
    name = "gpupool-api"
    final = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "LOST")

    def __init__(self, work, sock):
        self.work = work
        self.starts = os.path.join(work, "starts")
        self.api = Api(sock)

    def submit(self):
        st, body = self.api.call("POST", "/v1/jobs", {
            "command": ["sh", "-c", job_cmd(self.starts, "GPUPOOL_JOB_ID")],
            "workdir": self.work, "request": {"gpus": 1, "cpu_milli": CPU_MILLI}})
        if st != 201:
            raise RuntimeError("submit answered %s: %s" % (st, body))
        return str(body["job"]["id"])

    def active(self, job=None):
        if job:
            st, body = self.api.call("GET", "/v1/jobs/" + job)
            if st != 200:
                raise RuntimeError("GET job answered %s: %s" % (st, body))
            return 0 if body["job"]["state"] in self.final else 1
        st, body = self.api.call("GET", "/v1/jobs?active=1&limit=1")
        if st != 200:
            raise RuntimeError("GET jobs answered %s: %s" % (st, body))
        return len(body["jobs"])

    def record(self, job):
        st, body = self.api.call("GET", "/v1/jobs/" + job)
        return body["job"] if st == 200 else None

    def failed(self, ids):
        st, body = self.api.call("GET", "/v1/jobs?state=FAILED,CANCELLED,TIMEOUT,LOST")
        if st != 200:
            raise RuntimeError("GET jobs answered %s: %s" % (st, body))
        wanted = set(ids)
        return ["%s %s %s" % (j["id"], j["state"], j.get("reason", ""))
                for j in body["jobs"] if str(j["id"]) in wanted]


class GpupoolCli(GpupoolApi):
    name = "gpupool-cli"

    def __init__(self, work, sock, binary):
        super().__init__(work, sock)
        self.binary = binary
        self.server = "unix:" + sock

    def submit(self):
        r = subprocess.run(
            [self.binary, "submit", "--server", self.server, "--gpus", "1",
             "--cpus", "%.3f" % (CPU_MILLI / 1000.0), "--workdir",
             self.work, "--", "sh", "-c", job_cmd(self.starts, "GPUPOOL_JOB_ID")],
            capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("gpupool submit exited %d: %s" % (r.returncode, r.stderr.strip()))
        m = re.search(r"\d+", r.stdout)
        if not m:
            raise RuntimeError("gpupool submit printed no job id: %r" % r.stdout)
        return m.group(0)


def read_start(starts, job, wait_s=0.0):
    """The start time a job wrote, or None; waits up to wait_s for it to appear."""
    path = os.path.join(starts, "start." + job)
    deadline = time.time() + wait_s
    while True:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return float(text)
        except (OSError, ValueError):
            pass
        if time.time() >= deadline:
            return None
        time.sleep(0.001)


def wait_drained(system, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if system.active() == 0:
            return time.time()
        time.sleep(POLL_S)
    raise RuntimeError("%s: jobs still active after %d s" % (system.name, timeout_s))


def latency_stats(lat_s):
    ms = [x * 1000.0 for x in lat_s]
    return {"p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
            "mean_ms": sum(ms) / len(ms), "max_ms": max(ms), "n": len(ms)}


class CpuBreakdown:
    """The CPU a burst costs, per job and per part (--cpu-cgroup): the exact total of the
    cgroup v2 directory the pool and this client run in (cpu.stat usage_usec), the exact
    CPU of the `gpupool up` process itself (its threads) and of what it reaped (the shims
    and, through them, the jobs; /proc/PID/stat utime+stime and cutime+cstime), this
    client's own (os.times), and the split by process or thread name from perf samples of
    that cgroup (one sample per PERF_PERIOD_US of CPU): the controller's threads are
    "gpupool" and libmicrohttpd's "MHD-*", the agent's "gp-agent" (`gpupool up` names
    them), the supervisors
    "gpupool-agent-s", the jobs "sh" and "date". A process is counted under its parent's
    name until it calls exec."""

    PERF_PERIOD_US = 250
    PARTS = (("controller", ("gpupool", "MHD-")), ("agent", ("gp-agent",)),
             ("shim", ("gpupool-agent-s",)), ("job", ("sh", "date")),
             ("client", ("python3", "python")))

    def __init__(self, cgroup, pool_pid, work):
        self.cgroup = cgroup.rstrip("/")
        self.pool_pid = pool_pid
        self.perf_data = os.path.join(work, "perf.data")
        self.perf = None
        self.t0 = None

    def _usage_us(self):
        with open(os.path.join(self.cgroup, "cpu.stat")) as f:
            for line in f:
                k, v = line.split()
                if k == "usage_usec":
                    return int(v)
        raise RuntimeError("no usage_usec in %s/cpu.stat" % self.cgroup)

    def _pool_ticks(self):
        if not self.pool_pid:
            return None
        with open("/proc/%d/stat" % self.pool_pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # Fields 14-17 (utime stime cutime cstime) are at 11-14 after the name.
        return [int(x) for x in fields[11:15]]

    def start(self):
        import shutil
        root = os.path.dirname(self.cgroup)
        if shutil.which("perf"):
            def leave_cgroup():  # perf's own CPU is not the pool's
                with open(os.path.join(root, "cgroup.procs"), "w") as f:
                    f.write("0")
            self.perf = subprocess.Popen(
                ["perf", "record", "-q", "-a", "-e", "cpu-clock",
                 "-c", str(self.PERF_PERIOD_US * 1000), "-G", os.path.basename(self.cgroup),
                 "-o", self.perf_data], preexec_fn=leave_cgroup,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # perf is recording before the first submission
        self.t0 = (self._usage_us(), self._pool_ticks(), os.times())

    def stop(self, jobs):
        import signal
        usage1, pool1, times1 = self._usage_us(), self._pool_ticks(), os.times()
        usage0, pool0, times0 = self.t0
        tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        res = {"jobs": jobs, "total_cpu_ms_per_job": (usage1 - usage0) / 1000.0 / jobs,
               "client_cpu_ms_per_job": ((times1.user - times0.user) +
                                         (times1.system - times0.system)) * 1000.0 / jobs}
        if pool0 and pool1:
            d = [b - a for a, b in zip(pool0, pool1)]
            res["pool_process_cpu_ms_per_job"] = (d[0] + d[1]) * tick_ms / jobs
            res["pool_reaped_children_cpu_ms_per_job"] = (d[2] + d[3]) * tick_ms / jobs
        if self.perf is not None:
            self.perf.send_signal(signal.SIGINT)
            self.perf.wait()
            out = subprocess.run(["perf", "script", "-F", "comm", "-i", self.perf_data],
                                 capture_output=True, text=True).stdout
            counts = {}
            for line in out.splitlines():
                name = line.strip()
                counts[name] = counts.get(name, 0) + 1
            ms = self.PERF_PERIOD_US / 1000.0
            parts = {}
            for part, names in self.PARTS:
                mine = [n for n in counts if n in names or
                        any(p.endswith("-") and n.startswith(p) for p in names)]
                parts[part] = sum(counts.pop(n) for n in mine) * ms / jobs
            parts["other"] = sum(counts.values()) * ms / jobs
            res["sampled_cpu_ms_per_job"] = parts
            res["sampled_other_names"] = dict(sorted(counts.items(), key=lambda kv: -kv[1])[:10])
        return res


def burst(system, jobs, timeout_s, cpu=None):
    subs = []
    if cpu:
        cpu.start()
    t_first = time.time()
    if isinstance(system, SlurmArray):
        ids = system.submit_array(jobs)
        subs = [(i, t_first) for i in ids]
    else:
        for _ in range(jobs):
            t0 = time.time()
            subs.append((system.submit(), t0))
    t_sub_done = time.time()
    t_drained = wait_drained(system, timeout_s)
    cpu_res = cpu.stop(jobs) if cpu else None
    starts = [read_start(system.starts, j, wait_s=5.0) for j, _ in subs]
    missing = [j for (j, _), s in zip(subs, starts) if s is None]
    lat = [s - t0 for (_, t0), s in zip(subs, starts) if s is not None]
    res = {
        "jobs": jobs,
        "submit_s": t_sub_done - t_first,
        "makespan_s": t_drained - t_first,
        "submissions_per_s": jobs / max(t_sub_done - t_first, 1e-9),
        "completed_per_s": jobs / max(t_drained - t_first, 1e-9),
        "jobs_that_did_not_run": len(missing),
        "failed": system.failed([j for j, _ in subs])[:10],
    }
    if cpu_res:
        res["cpu_breakdown"] = cpu_res
    if lat:
        res["submit_to_start"] = latency_stats(lat)
    if hasattr(system, "record"):
        # How long a trivial job holds its GPU by the server's records (started event to
        # exited event), over a sample: with 8 GPUs, completed/s <= 8 / this.
        held = []
        for j, _ in subs[::max(1, len(subs) // 50)]:
            r = system.record(j)
            if r and r.get("end_time_us") and r.get("start_time_us"):
                held.append((r["end_time_us"] - r["start_time_us"]) / 1000.0)
        if held:
            res["server_recorded_run_ms_p50"] = percentile(held, 50)
    return res


def idle(system, n, timeout_s):
    lat = []
    parts = []
    for _ in range(n):
        t0 = time.time()
        job = system.submit()
        s = read_start(system.starts, job, wait_s=timeout_s)
        if s is None:
            raise RuntimeError("%s: idle job %s did not start within %d s"
                               % (system.name, job, timeout_s))
        lat.append(s - t0)
        deadline = time.time() + timeout_s
        while system.active(job) and time.time() < deadline:
            time.sleep(0.01)
        # Let the node settle (Slurm marks the node COMPLETING briefly) so the next job
        # really finds an idle node.
        while system.active() and time.time() < deadline:
            time.sleep(0.01)
        if hasattr(system, "record"):
            j = system.record(job)
            if j and j.get("start_time_us") and j.get("submit_time_us"):
                parts.append((j["submit_time_us"] / 1e6 - t0,
                              (j["start_time_us"] - j["submit_time_us"]) / 1e6,
                              s - j["start_time_us"] / 1e6))
    if not lat:
        return None
    res = latency_stats(lat)
    if parts:
        # Where the time goes, from the server's records (p50 of each part, ms):
        # client -> server accepted it, accepted -> agent reported the start, reported
        # start -> the job's own first command ran.
        res["breakdown_p50_ms"] = {
            name: percentile([p[i] * 1000.0 for p in parts], 50)
            for i, name in enumerate(("client_to_accepted", "accepted_to_started",
                                      "started_to_job_command"))}
    return res


def cmd_measure(a):
    work = os.path.abspath(a.work)
    os.makedirs(os.path.join(work, "starts"), exist_ok=True)
    if a.system == "slurm":
        system = Slurm(work)
    elif a.system == "slurm-array":
        system = SlurmArray(work)
    elif a.system == "gpupool-api":
        system = GpupoolApi(work, a.sock)
    else:
        system = GpupoolCli(work, a.sock, a.gpupool)
    res = {"system": system.name, "host_cpus": os.cpu_count()}
    print("[%s] burst of %d jobs..." % (system.name, a.jobs), file=sys.stderr, flush=True)
    cpu = None
    if a.cpu_cgroup:
        with open(os.path.join(a.cpu_cgroup, "cgroup.procs"), "w") as f:
            f.write("0")  # this client counts too
        cpu = CpuBreakdown(a.cpu_cgroup, a.pool_pid, work)
    res["burst"] = burst(system, a.jobs, a.timeout, cpu)
    if a.idle_jobs > 0 and not isinstance(system, SlurmArray):
        print("[%s] %d jobs one at a time on the idle node..." % (system.name, a.idle_jobs),
              file=sys.stderr, flush=True)
        res["idle"] = idle(system, a.idle_jobs, a.timeout)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res), file=sys.stderr)
    return 0


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def cmd_report(a):
    results = []
    for p in a.results:
        try:
            with open(p) as f:
                results.append(json.load(f))
        except (OSError, ValueError) as e:
            print("skipping %s: %s" % (p, e), file=sys.stderr)
    if not results:
        print("no result file could be read", file=sys.stderr)
        return 1
    floor = next((r for r in results if r.get("system") == "floor"), None)
    results = [r for r in results if r.get("system") != "floor"]
    by = {r["system"]: r for r in results}

    def g(r, *path):
        for k in path:
            if not isinstance(r, dict) or k not in r:
                return None
            r = r[k]
        return r

    head = ("system", "jobs", "submit/s", "completed/s", "makespan s", "burst p50 ms",
            "burst p99 ms", "idle p50 ms", "idle p99 ms", "not run")
    rows = []
    for r in results:
        rows.append((r["system"], str(g(r, "burst", "jobs")),
                     fmt(g(r, "burst", "submissions_per_s")),
                     fmt(g(r, "burst", "completed_per_s")),
                     fmt(g(r, "burst", "makespan_s"), "%.2f"),
                     fmt(g(r, "burst", "submit_to_start", "p50_ms")),
                     fmt(g(r, "burst", "submit_to_start", "p99_ms")),
                     fmt(g(r, "idle", "p50_ms")), fmt(g(r, "idle", "p99_ms")),
                     str(g(r, "burst", "jobs_that_did_not_run"))))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]

    ratios = {}
    slurm = by.get("slurm")
    for name in ("gpupool-api", "gpupool-cli"):
        gp = by.get(name)
        if not gp or not slurm:
            continue
        rr = {}
        for key, path, inverse in (
                ("submissions_per_s", ("burst", "submissions_per_s"), False),
                ("completed_per_s", ("burst", "completed_per_s"), False),
                ("burst_p50", ("burst", "submit_to_start", "p50_ms"), True),
                ("burst_p99", ("burst", "submit_to_start", "p99_ms"), True),
                ("idle_p50", ("idle", "p50_ms"), True),
                ("idle_p99", ("idle", "p99_ms"), True)):
            x, y = g(gp, *path), g(slurm, *path)
            if x and y:
                rr[key] = (y / x) if inverse else (x / y)
        ratios[name + "/slurm"] = rr
    if ratios:
        lines.append("")
        lines.append("Ratios gpupool/Slurm (throughput: gpupool ÷ Slurm; latency: Slurm ÷ "
                     "gpupool, so > 1 means gpupool is better):")
        for k, rr in ratios.items():
            lines.append("  %s: %s" % (k, ", ".join("%s %.1fx" % (n, v) for n, v in rr.items())))
    for r in results:
        cb = g(r, "burst", "cpu_breakdown")
        if not cb:
            continue
        lines.append("")
        lines.append("%s, CPU ms per job in the burst: total %.2f (cgroup), `gpupool up` "
                     "process %s, what it reaped (shims + jobs) %s, client %.2f" % (
                         r["system"], cb["total_cpu_ms_per_job"],
                         fmt(cb.get("pool_process_cpu_ms_per_job"), "%.2f"),
                         fmt(cb.get("pool_reaped_children_cpu_ms_per_job"), "%.2f"),
                         cb["client_cpu_ms_per_job"]))
        parts = cb.get("sampled_cpu_ms_per_job")
        if parts:
            lines.append("  sampled by name: " + ", ".join(
                "%s %.2f" % (k, v) for k, v in parts.items()))
    if floor:
        lines.append("")
        lines.append("Per-process floor (posix_spawn + wait, in a row):")
        for f in floor.get("floor", []):
            lines.append("  %s: %.2f ms wall, %.2f ms CPU per run" % (
                f["command"], f["wall_ms_per_run"], f["cpu_ms_per_run"]))
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"results": results, "ratios": ratios, "floor": floor,
                       "table_markdown": table}, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--system", required=True,
                   choices=("slurm", "slurm-array", "gpupool-api", "gpupool-cli"))
    m.add_argument("--work", required=True, help="directory the jobs write their start times to")
    m.add_argument("--jobs", type=int, default=1000)
    m.add_argument("--idle-jobs", type=int, default=30)
    m.add_argument("--timeout", type=int, default=900, help="seconds to wait for the jobs")
    m.add_argument("--sock", help="gpupool API socket (STATE_DIR/gpupool.sock)")
    m.add_argument("--gpupool", default="gpupool", help="gpupool binary (gpupool-cli)")
    m.add_argument("--cpu-cgroup", help="cgroup v2 directory the pool runs in: report the "
                   "burst's CPU per job and per part (CpuBreakdown)")
    m.add_argument("--pool-pid", type=int, help="the `gpupool up` process (--cpu-cgroup)")
    m.add_argument("--out", required=True)
    r = sub.add_parser("report")
    r.add_argument("--out")
    r.add_argument("results", nargs="+")
    a = ap.parse_args()
    if a.cmd == "measure":
        if a.jobs < 1 or a.idle_jobs < 0:
            ap.error("--jobs must be >= 1 and --idle-jobs >= 0")
        if a.system.startswith("gpupool") and not a.sock:
            ap.error("--sock is needed for " + a.system)
        return cmd_measure(a)
    return cmd_report(a)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.CalledProcessError) as e:
        msg = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) and e.stderr \
            else str(e)
        print("pool_vs_slurm: %s" % msg, file=sys.stderr)
        sys.exit(1)
