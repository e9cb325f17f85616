#!/usr/bin/env python3
"""One controller against thousands of simulated nodes (issue 31). python3 stdlib only.

  sudo python3 bench/pool/scale.py --nodes N --pending M [--postgres] [--duration 300]
      [--run-time exp:10] [--json] [--out FILE] [--perf FILE] [--check]

Starts `gpupool server` (SQLite; --postgres: a throw-away PostgreSQL 15 on a Unix socket,
as the store tests run it, with a leader-elected controller), queues --pending trivial
one-GPU jobs (arrays of up to 1,000 elements), then starts `sim_agents` with --nodes nodes
of bench/pool/node-8gpu.json's 8 GPUs, each task "running" for --run-time. Measured:

  register_s      sim_agents' start until every node is registered (with the queue full)
  starts_per_s    job starts over the --duration window (sim_agents' acknowledged starts),
                  which begins once every node registered; a feeder tops the queue up to
                  --pending with more arrays as jobs start
  pass_p50_s/p99  the scheduling pass, from the controller's own histogram
                  gpupool_scheduling_pass_seconds (GET /metrics), counted over the window
                  only, interpolated within the bucket as Prometheus' histogram_quantile
  api_p99_ms      the worse of the two below, measured as a second user (`nobody`) on the
                  Unix socket, one request each 200 ms during the window:
                  queue_p99_ms  GET /v1/jobs?active=1 (what `gpupool queue` asks)
                  submit_p99_ms POST /v1/jobs, one one-GPU job
  rss_mib         the server's peak VmRSS over the window (/proc/PID/status)
  server_threads  the server's peak thread count over the window (/proc/PID/status)
  cpu_ms_per_start  the server's CPU (user + system, /proc/PID/stat) over the window over
                  the starts in it

--check (the CI run, tests/scale): no window; waits until every queued job has ended, then
checks that each ran exactly once and the counts add up, exiting 1 otherwise. --tcp runs
the nodes over TCP with a node token each (made with POST /v1/tokens), as remote agents
do; by default they use the Unix socket as root.
"""
import argparse
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "testlib"))
import pooltest  # noqa: E402

NODE = os.path.join(HERE, "node-8gpu.json")
ARRAY = 1000  # elements per submitted array (the server's default max-array-size is 1001)


def call(sock, method, path, body=None, timeout=120):
    conn = pooltest.UnixConnection(sock, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def find_binary(name, rel):
    for c in (os.path.join(ROOT, "build", "release", rel), os.path.join(ROOT, "build", "h-bench", rel)):
        if os.path.exists(c):
            return c
    return shutil.which(name) or os.path.join(ROOT, "build", "release", rel)


def histogram(text, name):
    """{le: cumulative count}, sum, count of a Prometheus histogram without labels."""
    buckets, total, count = {}, 0.0, 0
    for line in text.splitlines():
        m = re.match(r'%s_bucket\{le="([^"]+)"\} (\S+)' % name, line)
        if m:
            buckets[float("inf") if m.group(1) == "+Inf" else float(m.group(1))] = float(m.group(2))
        elif line.startswith(name + "_sum "):
            total = float(line.split()[1])
        elif line.startswith(name + "_count "):
            count = float(line.split()[1])
    return buckets, total, count


def quantile(q, before, after):
    """histogram_quantile over the difference of two scrapes."""
    bounds = sorted(after[0])
    cum = [(b, after[0][b] - before[0].get(b, 0.0)) for b in bounds]
    n = cum[-1][1] if cum else 0
    if n <= 0:
        return None
    rank, prev_b, prev_c = q * n, 0.0, 0.0
    for b, c in cum:
        if c >= rank:
            if b == float("inf"):
                return prev_b
            return prev_b + (b - prev_b) * ((rank - prev_c) / max(c - prev_c, 1e-9))
        prev_b, prev_c = b, c
    return prev_b


def proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return int(out["VmRSS"].split()[0]) / 1024.0, int(out["Threads"])


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu(pid):
    """{comm: [cpu_s, runqueue_wait_s]} over the process's threads (the main thread apart
    as "main"); from /proc/PID/task/TID/stat and schedstat."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                text = f.read()
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                wait_ns = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        comm = "main" if int(tid) == pid else text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        acc = out.setdefault(comm, [0.0, 0.0])
        acc[0] += cpu
        acc[1] += wait_ns / 1e9
    return out


def read_stats(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Prober:
    """`queue` and `submit` as a second user, in a child that has become `nobody`."""

    def __init__(self, sock, period_s=0.2):
        nobody = pwd.getpwnam("nobody")
        self.rfd, wfd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(self.rfd)
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                lat = {"queue": [], "submit": [], "errors": 0}
                stop = [False]
                signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
                while not stop[0]:
                    for kind in ("queue", "submit"):
                        t = time.perf_counter()
                        try:
                            if kind == "queue":
                                st, _ = call(sock, "GET", "/v1/jobs?active=1", timeout=60)
                            else:
                                st, _ = call(sock, "POST", "/v1/jobs", {
                                    "command": ["true"], "workdir": "/tmp",
                                    "request": {"gpus": 1, "cpu_milli": 1000}}, timeout=60)
                            ok = st in (200, 201)
                        except OSError:
                            ok = False
                        if ok:
                            lat[kind].append((time.perf_counter() - t) * 1000.0)
                        else:
                            lat["errors"] += 1
                    time.sleep(period_s)
                with os.fdopen(wfd, "w") as f:
                    json.dump(lat, f)
            finally:
                os._exit(0)
        os.close(wfd)

    def stop(self):
        os.kill(self.pid, signal.SIGTERM)
        with os.fdopen(self.rfd) as f:
            text = f.read()
        os.waitpid(self.pid, 0)
        return json.loads(text)


def submit_array(sock, n, workdir):
    body = {"command": ["true"], "workdir": workdir, "request": {"gpus": 1, "cpu_milli": 1000}}
    if n > 1:
        body["array"] = "0-%d" % (n - 1)
    st, data = call(sock, "POST", "/v1/jobs", body)
    if st != 201:
        raise RuntimeError("submitting %d jobs answered %d: %s" % (n, st, data[:300]))


def fill(sock, count, workdir):
    left = count
    while left > 0:
        n = min(ARRAY, left)
        submit_array(sock, n, workdir)
        left -= n


def all_jobs(sock):
    st, body = call(sock, "GET", "/v1/jobs?all=1&state=PENDING,ASSIGNED,RUNNING,SUCCEEDED,"
                    "FAILED,CANCELLED,TIMEOUT,LOST", timeout=300)
    if st != 200:
        raise RuntimeError("listing jobs answered %d: %s" % (st, body[:300]))
    return json.loads(body)["jobs"]


def main():
    # SIGTERM ends the run as Ctrl-C does: the finally clause stops what it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpupool", default=None)
    ap.add_argument("--sim-agents", default=None)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--warmup", type=float, default=10,
                    help="seconds between the last registration and the window")
    ap.add_argument("--run-time", default="exp:10", help="sim_agents --run-time")
    ap.add_argument("--workers", type=int, default=8, help="sim_agents --workers")
    ap.add_argument("--sim-args", default="", help="more sim_agents options, space-separated")
    ap.add_argument("--node-timeout", type=int, default=120)
    ap.add_argument("--tcp", action="store_true", help="nodes over TCP with a node token each")
    ap.add_argument("--check", action="store_true", help="CI: every job runs once, then exit")
    ap.add_argument("--check-timeout", type=float, default=120)
    ap.add_argument("--perf", help="perf record -g the server for --perf-s mid-window here")
    ap.add_argument("--perf-s", type=float, default=20)
    ap.add_argument("--perf-args", default="-g",
                    help="perf record's options (e.g. '--call-graph dwarf,16384')")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    ap.add_argument("--out")
    ap.add_argument("--keep", action="store_true", help="keep the state directory")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("scale.py: run as root (it registers nodes as root on the Unix socket and "
              "probes as `nobody`)", file=sys.stderr)
        return 77
    if not (1 <= a.nodes <= 100000 and 1 <= a.pending <= 10000000 and a.duration > 0):
        ap.error("--nodes 1..100000, --pending 1 or more, --duration > 0")
    gpupool = os.path.abspath(a.gpupool or find_binary("gpupool", "gpupool"))
    sim = os.path.abspath(a.sim_agents or find_binary("sim_agents", "bench/sim_agents"))
    log = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr, flush=True))

    d = pooltest.make_test_dir("gp-scale-")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "gpupool.sock")
    work = os.path.join(d, "work")
    os.makedirs(work)
    pg = None
    procs = []
    res = {"nodes": a.nodes, "gpus": a.nodes * 8, "pending": a.pending,
           "store": "postgresql" if a.postgres else "sqlite", "run_time": a.run_time}
    try:
        cmd = [gpupool, "server", "--config", "", "--state-dir", d, "--node-timeout",
               str(a.node_timeout), "--max-queued-per-user", str(max(10000, 2 * a.pending + 10000)),
               "--max-queued-total", str(max(100000, 2 * a.pending + 10000))]
        port = 0
        if a.tcp:
            s = __import__("socket").socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            cmd += ["--listen", "127.0.0.1"]
        cmd += ["--port", str(port)]
        if a.postgres:
            import hasite  # noqa: E402
            why = hasite.missing()
            if why:
                print("scale.py --postgres " + why, file=sys.stderr)
                return 77
            pg = hasite.Postgres(d)
            cmd += ["--store", pg.spec, "--advertise", "unix:" + sock]
        slog = open(os.path.join(d, "server.log"), "ab")
        server = subprocess.Popen(cmd, stdout=slog, stderr=slog, start_new_session=True)
        procs.append(server)
        pooltest.wait_for("the server's API", lambda: os.path.exists(sock) and
                          call(sock, "GET", "/v1/whoami")[0] == 200, timeout=60)

        t0 = time.time()
        fill(sock, a.pending, work)
        res["fill_s"] = round(time.time() - t0, 2)
        log("queued %d jobs in %.1f s" % (a.pending, res["fill_s"]))

        sim_cmd = [sim, "--node-file", NODE, "--nodes", str(a.nodes), "--workers",
                   str(a.workers), "--run-time", a.run_time, "--stats",
                   os.path.join(d, "sim.json")] + a.sim_args.split()
        if a.tcp:
            lines = []
            for k in range(a.nodes):
                name = "sim%05d" % k
                st, body = call(sock, "POST", "/v1/tokens", {"user": name, "kind": "node"})
                if st != 201:
                    raise RuntimeError("a node token for %s answered %d: %s" % (name, st, body))
                lines.append("%s %s" % (name, json.loads(body)["token"]))
            tokens = os.path.join(d, "node-tokens")
            with open(tokens, "w") as f:
                f.write("\n".join(lines) + "\n")
            os.chmod(tokens, 0o600)
            sim_cmd += ["--controller", "http://127.0.0.1:%d" % port, "--token-file", tokens]
        else:
            sim_cmd += ["--controller", "unix:" + sock]
        alog = open(os.path.join(d, "sim.log"), "ab")
        agents = subprocess.Popen(sim_cmd, stdout=alog, stderr=alog, start_new_session=True)
        procs.insert(0, agents)
        stats_path = os.path.join(d, "sim.json")

        def stats():
            s = read_stats(stats_path)
            if agents.poll() is not None:
                raise RuntimeError("sim_agents exited: see %s/sim.log" % d)
            if server.poll() is not None:
                with open(os.path.join(d, "server.log"), errors="replace") as f:
                    tail = f.read()[-2000:]
                raise RuntimeError("gpupool server exited (%s); its log ends:\n%s" % (
                    server.returncode, tail))
            return s

        pooltest.wait_for("every node registered", lambda: (stats() or {}).get("register_s"),
                          timeout=max(120, a.nodes / 10))
        res["register_s"] = stats()["register_s"]
        log("%d nodes registered in %.1f s" % (a.nodes, res["register_s"]))

        if a.check:
            deadline = time.time() + a.check_timeout
            while (stats() or {}).get("ends", 0) < a.pending:
                if time.time() > deadline:
                    raise RuntimeError("only %s of %d jobs ended within %ds: %s" % (
                        stats().get("ends"), a.pending, a.check_timeout, stats()))
                time.sleep(0.1)
            pooltest.stop_processes([agents])
            final = read_stats(stats_path)
            jobs = all_jobs(sock)
            states = {}
            for j in jobs:
                states[j["state"]] = states.get(j["state"], 0) + 1
            attempts = {j.get("attempt") for j in jobs}
            res.update({"sim": final, "job_states": states, "attempts": sorted(attempts)})
            problems = []
            if len(jobs) != a.pending:
                problems.append("%d jobs listed, %d queued" % (len(jobs), a.pending))
            if states.get("SUCCEEDED", 0) != a.pending:
                problems.append("not every job SUCCEEDED: %s" % states)
            for key in ("starts", "ends", "launches", "tasks_started"):
                if final[key] != a.pending:
                    problems.append("sim_agents %s = %d, not %d" % (key, final[key], a.pending))
            for key in ("tasks_started_twice", "rejected_orders", "cancels", "register_errors",
                        "event_errors", "lost_registrations"):
                if final[key] != 0:
                    problems.append("sim_agents %s = %d, not 0" % (key, final[key]))
            if len(attempts) != 1:
                problems.append("jobs ran in several attempts: %s" % sorted(attempts))
            res["problems"] = problems
            print(json.dumps(res, indent=None if a.json else 1))
            if problems:
                print("scale.py --check FAILED: " + "; ".join(problems), file=sys.stderr)
                print("server log tail:\n" + open(os.path.join(d, "server.log"),
                                                  errors="replace").read()[-3000:],
                      file=sys.stderr)
                return 1
            return 0

        # The window: the queue kept at --pending by a feeder, probes as `nobody`.
        stop = threading.Event()
        feed = {"submitted": a.pending, "array_ms": [], "errors": 0}

        def feeder():
            while not stop.is_set():
                s = read_stats(stats_path) or {}
                if feed["submitted"] - s.get("launches", 0) < a.pending:
                    t = time.perf_counter()
                    try:
                        submit_array(sock, ARRAY, work)
                        feed["submitted"] += ARRAY
                        feed["array_ms"].append((time.perf_counter() - t) * 1000.0)
                    except (OSError, RuntimeError):
                        feed["errors"] += 1
                        time.sleep(1)
                else:
                    stop.wait(0.5)

        prober = Prober(sock)  # forked before the feeder thread starts
        time.sleep(a.warmup)  # the feeder starts with the window: warm-up starts come from the fill
        threads = [threading.Thread(target=feeder, daemon=True)]
        for t in threads:
            t.start()
        stats()  # the server still runs
        _, m0 = call(sock, "GET", "/metrics")
        h0 = histogram(m0.decode(), "gpupool_scheduling_pass_seconds")
        s0, c0, w0 = stats(), proc_cpu_s(server.pid), time.time()
        a0, load0 = proc_cpu_s(agents.pid), os.getloadavg()[0]
        t0 = threads_cpu(server.pid)
        rss, thr, perf = 0.0, 0, None
        perf_at = w0 + max(0.0, (a.duration - a.perf_s) / 2)
        while time.time() - w0 < a.duration:
            r, n = proc_status(server.pid)
            rss, thr = max(rss, r), max(thr, n)
            if a.perf and perf is None and time.time() >= perf_at:
                perf = subprocess.Popen(["perf", "record"] + a.perf_args.split() + ["-o", a.perf, "-p",
                                         str(server.pid), "--", "sleep", str(a.perf_s)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            stats()
            time.sleep(1)
        s1, c1, w1 = stats(), proc_cpu_s(server.pid), time.time()
        a1, load1 = proc_cpu_s(agents.pid), os.getloadavg()[0]
        t1 = threads_cpu(server.pid)
        _, m1 = call(sock, "GET", "/metrics")
        h1 = histogram(m1.decode(), "gpupool_scheduling_pass_seconds")
        stop.set()
        probe = prober.stop()
        if perf:
            perf.wait()
        starts = s1["starts"] - s0["starts"]
        passes = h1[2] - h0[2]
        res.update({
            "duration_s": round(w1 - w0, 1),
            "starts": starts,
            "starts_per_s": round(starts / (w1 - w0), 1),
            "ends_per_s": round((s1["ends"] - s0["ends"]) / (w1 - w0), 1),
            "passes": int(passes),
            "pass_mean_s": round((h1[1] - h0[1]) / passes, 4) if passes else None,
            "pass_p50_s": quantile(0.5, h0, h1),
            "pass_p99_s": quantile(0.99, h0, h1),
            "queue_p50_ms": percentile(probe["queue"], 50),
            "queue_p99_ms": percentile(probe["queue"], 99),
            "submit_p50_ms": percentile(probe["submit"], 50),
            "submit_p99_ms": percentile(probe["submit"], 99),
            "probe_errors": probe["errors"],
            "submit_array_p50_ms": percentile(feed["array_ms"], 50),
            "submit_array_p99_ms": percentile(feed["array_ms"], 99),
            "rss_mib": round(rss, 1),
            "server_threads": thr,
            "cpu_ms_per_start": round((c1 - c0) * 1000.0 / starts, 3) if starts else None,
            "server_cpu_pct": round((c1 - c0) * 100.0 / (w1 - w0), 1),
"sim_cpu_pct": round((a1 - a0) * 100.0 / (w1 - w0), 1),
            "loadavg_1m": [round(load0, 1), round(load1, 1)],
            "polls_per_s": round((s1["polls"] - s0["polls"]) / (w1 - w0), 1),
            "sim": s1,
        })
        # Per thread kind: CPU and time spent runnable but waiting for a CPU (a busy
        # machine's share), in seconds over the window. The scheduler is the thread named
        # like the binary ("gpupool"); HTTP handlers are "MHD-worker".
        res["server_threads_cpu_s"] = {
            k: {"cpu_s": round(v[0] - t0.get(k, [0, 0])[0], 2),
                "runq_wait_s": round(v[1] - t0.get(k, [0, 0])[1], 2)} for k, v in t1.items()}
        sched = res["server_threads_cpu_s"].get("gpupool")
        res["pass_cpu_s"] = round(sched["cpu_s"] / passes, 4) if sched and passes else None
        for k in ("pass_p50_s", "pass_p99_s"):
            if res[k] is not None:
                res[k] = round(res[k], 4)
        p99s = [v for v in (res["queue_p99_ms"], res["submit_p99_ms"]) if v is not None]
        res["api_p99_ms"] = round(max(p99s), 1) if p99s else None
        for k in ("queue_p50_ms", "queue_p99_ms", "submit_p50_ms", "submit_p99_ms",
                  "submit_array_p50_ms", "submit_array_p99_ms"):
            if res[k] is not None:
                res[k] = round(res[k], 1)
        print(json.dumps(res, indent=None if a.json else 1))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)
        return 0
    finally:
        pooltest.stop_processes([p for p in procs if p is not None])
        if pg:
            pg.stop()
        if a.keep:
            print("state kept in " + d, file=sys.stderr)
        else:
            pooltest.remove_dir(d)


if __name__ == "__main__":
    sys.exit(main())
