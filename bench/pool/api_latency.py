#!/usr/bin/env python3
"""API latency of a loaded gpupool controller (python3 stdlib only).

  api_latency.py [--gpupool BIN] [--node NODE.json] [--queued 10000] [--clients 50]
                 [--duration 20] [--client c|python] [--mix steady|growing] [--out FILE]
                 [--free-gpus K] [--postgres [--pg-write-delay-ms D]]

Starts `gpupool up --fake NODE --state-dir TMP --port 0`, fills the 8 GPUs with long
`sleep` jobs (so nothing queued can start), queues --queued one-GPU jobs, then runs
--clients concurrent clients for --duration seconds, each issuing a mix of
  GET /v1/jobs/ID (40%), GET /v1/jobs?active=1&limit=50 (20%), GET /v1/nodes (20%),
  and with --mix steady (the default) POST /v1/jobs (10%) + POST /v1/jobs/ID/cancel
  (10%, the client's oldest job not yet cancelled; a submission when it has none), which
  holds the queue at --queued, or with --mix growing POST /v1/jobs (20%), under which a
  fast server's queue grows to several times --queued within the run,
over the Unix socket, one connection per request as the CLI does. Reports p50/p95/p99 per
request kind and overall, errors, and the controller's peak RSS (VmHWM of the `gpupool up`
process, which also holds the local agent). Everything is torn down at the end.

--free-gpus K leaves K of the GPUs free, so queued jobs run through them during the run:
the agent's events, the scheduler's assignments and the jobs' ends are written all along,
and some cancels hit running jobs. --pg-write-delay-ms D (with --postgres) makes every
statement that inserts or updates a job sleep D ms in the database (a statement trigger),
standing in for a database across a network or on a slow disk: what API calls wait for
when another caller's write is slow.

Two clients send the same mix: `--client c` (the default when it is built: bench/api_load
beside the gpupool binary's build, from bench/pool/api_load.cc), one process of threads
spending microseconds per request; `--client python`, several processes of threads (so
that the GIL does not serialize them), which on a 2-CPU machine take more CPU than the
server. Either way the clients share the machine's CPUs with the server, so the numbers
are an upper bound of what a client on another machine would see.
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "testlib"))
from pooltest import UnixConnection  # noqa: E402  (tests/testlib)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIXES = {"steady": (("get_job", 40), ("list_active", 20), ("nodes", 20), ("submit", 10),
                    ("cancel", 10)),
         "growing": (("get_job", 40), ("list_active", 20), ("nodes", 20), ("submit", 20),
                     ("cancel", 0))}
KINDS = MIXES["steady"]  # every kind, in table order



def call(sock, method, path, body=None, timeout=60):
    conn = UnixConnection(sock, timeout)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"} if body is not None else {})
        r = conn.getresponse()
        payload = r.read()
    finally:
        conn.close()
    try:
        return r.status, json.loads(payload) if payload else None
    except ValueError:
        return r.status, payload


def percentile(values, p):
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


# gpupool counts CPUs (the agent reports the machine's; a job asks for 1 by default): with
# a few CPUs only a few holder jobs would run, so every job asks for a share that lets
# each GPU hold one.
CPU_MILLI = max(1, (os.cpu_count() or 1) * 1000 // 8)


def job_body(workdir, command):
    return {"command": command, "workdir": workdir,
            "request": {"gpus": 1, "cpu_milli": CPU_MILLI}}


# ---- worker mode: one process of client threads, prints its samples as JSON ----

def worker(a):
    ids = [int(x) for x in a.ids.split(",")]
    stop_at = float(a.stop_at)
    samples = {k: [] for k, _ in KINDS}
    errors = {k: 0 for k, _ in KINDS}
    error_examples = []
    lock = threading.Lock()
    population = [k for k, w in MIXES[a.mix] for _ in range(w)]

    def client(seed):
        rng = random.Random(seed)
        mine = []  # jobs this client submitted and has not cancelled, oldest first
        while time.time() < stop_at:
            kind = rng.choice(population)
            if kind == "cancel" and not mine:
                kind = "submit"
            if kind == "get_job":
                req = ("GET", "/v1/jobs/%d" % rng.choice(ids), None, 200)
            elif kind == "list_active":
                req = ("GET", "/v1/jobs?active=1&limit=50", None, 200)
            elif kind == "nodes":
                req = ("GET", "/v1/nodes", None, 200)
            elif kind == "cancel":
                req = ("POST", "/v1/jobs/%d/cancel" % mine.pop(0), None, 200)
            else:
                req = ("POST", "/v1/jobs", job_body(a.workdir, ["true"]), 201)
            t0 = time.perf_counter()
            try:
                st, body = call(a.sock, req[0], req[1], req[2])
                ok = st == req[3]
                why = "" if ok else "%s %s -> %s %s" % (req[0], req[1], st, str(body)[:200])
            except (OSError, http.client.HTTPException) as e:
                ok, why = False, "%s %s -> %s" % (req[0], req[1], e)
            dt = (time.perf_counter() - t0) * 1000.0
            if ok and kind == "submit":
                mine.append(body["job"]["id"])
            with lock:
                if ok:
                    samples[kind].append(dt)
                else:
                    errors[kind] += 1
                    if len(error_examples) < 5:
                        error_examples.append(why)

    threads = [threading.Thread(target=client, args=(a.seed * 1000 + i,))
               for i in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    json.dump({"samples": samples, "errors": errors, "error_examples": error_examples},
              sys.stdout)
    return 0


# ---- driver mode ----

def vm_status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "VmRSS"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


class Postgres:
    """A throwaway PostgreSQL 15 server on a Unix socket in a temporary directory, run as
    the `postgres` account (initdb refuses root), fsync off as in the store tests."""

    BIN = "/usr/lib/postgresql/15/bin"

    def __init__(self, write_delay_ms=0):
        self.write_delay_ms = write_delay_ms
        if not os.path.exists(os.path.join(self.BIN, "initdb")):
            raise RuntimeError("--postgres needs postgresql-15 (scripts/install-deps.sh)")
        self.dir = tempfile.mkdtemp(prefix="gp-apilat-pg-", dir="/tmp")
        shutil.chown(self.dir, "postgres", "postgres")
        data = os.path.join(self.dir, "data")
        as_pg = ["runuser", "-u", "postgres", "--"]
        subprocess.run(as_pg + [os.path.join(self.BIN, "initdb"), "-D", data, "-A", "trust",
                                "-U", "postgres"], check=True, capture_output=True)
        subprocess.run(as_pg + [os.path.join(self.BIN, "pg_ctl"), "-D", data, "-w", "-l",
                                os.path.join(self.dir, "log"), "-o",
                                "-k %s -c listen_addresses='' -c fsync=off" % self.dir, "start"],
                       check=True, capture_output=True)
        subprocess.run(as_pg + [os.path.join(self.BIN, "psql") if os.path.exists(
            os.path.join(self.BIN, "psql")) else "psql", "-h", self.dir, "-U", "postgres", "-c",
            "CREATE DATABASE gpupool"], check=True, capture_output=True)
        self.spec = "postgresql:///gpupool?host=%s&user=postgres" % self.dir

    def psql(self, sql):
        psql = os.path.join(self.BIN, "psql")
        subprocess.run(["runuser", "-u", "postgres", "--",
                        psql if os.path.exists(psql) else "psql", "-h", self.dir, "-U",
                        "postgres", "-d", "gpupool", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       check=True, capture_output=True)

    def slow_writes(self):
        """Once the server made the schema: job inserts and updates sleep write_delay_ms."""
        if self.write_delay_ms <= 0:
            return
        self.psql("CREATE FUNCTION gp_bench_slow() RETURNS trigger LANGUAGE plpgsql AS $$ "
                  "BEGIN PERFORM pg_sleep(%f); RETURN NULL; END $$; "
                  "CREATE TRIGGER gp_bench_slow BEFORE INSERT OR UPDATE ON jobs "
                  "FOR EACH STATEMENT EXECUTE FUNCTION gp_bench_slow();"
                  % (self.write_delay_ms / 1000.0))

    def stop(self):
        subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(self.BIN, "pg_ctl"), "-D",
                        os.path.join(self.dir, "data"), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


class Server:
    def __init__(self, binary, node, store=None):
        self.dir = tempfile.mkdtemp(prefix="gp-apilat-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work)
        self.log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [binary, "up", "--fake", node, "--state-dir", self.dir, "--port", "0"] +
            (["--store", store] if store else []) +
            # A queue of up to 1,000,000 of one user's jobs: past the default bounds.
            ["--max-queued-per-user", "1000000000", "--max-queued-total", "1000000000"],
            stdout=self.log, stderr=self.log, start_new_session=True)

    def tail(self):
        try:
            with open(os.path.join(self.dir, "server.log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def wait_up(self, gpus):
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gpupool up exited with %s:\n%s"
                                   % (self.proc.returncode, self.tail()))
            if os.path.exists(self.sock):
                try:
                    st, body = call(self.sock, "GET", "/v1/nodes", timeout=5)
                    if st == 200 and any(n.get("state") == "up" and len(n.get("gpus", [])) == gpus
                                         for n in body.get("nodes", [])):
                        return
                except (OSError, http.client.HTTPException, AttributeError):
                    pass
            time.sleep(0.05)
        raise RuntimeError("gpupool up did not report a %d-GPU node within 30 s:\n%s"
                           % (gpus, self.tail()))

    def stop(self, running_ids):
        # Cancel the long sleep jobs first so no job outlives the benchmark.
        for jid in running_ids:
            try:
                call(self.sock, "POST", "/v1/jobs/%d/cancel" % jid, timeout=10)
            except (OSError, http.client.HTTPException):
                pass
        deadline = time.time() + 15
        for jid in running_ids:
            while time.time() < deadline:
                try:
                    st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid, timeout=5)
                    if st != 200 or body["job"]["state"] not in ("PENDING", "ASSIGNED",
                                                                 "RUNNING"):
                        break
                except (OSError, http.client.HTTPException):
                    break
                time.sleep(0.1)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["pkill", "-KILL", "-f", "agent-shim --job-dir " + self.dir], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def submit_many(sock, workdir, n, threads=4):
    """Queues n one-GPU `true` jobs from a few threads; returns their ids."""
    ids, errs = [], []
    lock = threading.Lock()
    counter = [0]

    def run():
        while True:
            with lock:
                if counter[0] >= n or errs:
                    return
                counter[0] += 1
            try:
                st, body = call(sock, "POST", "/v1/jobs", job_body(workdir, ["true"]))
            except (OSError, http.client.HTTPException) as e:
                st, body = None, str(e)
            with lock:
                if st == 201:
                    ids.append(body["job"]["id"])
                else:
                    errs.append("submit answered %s: %s" % (st, str(body)[:300]))

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise RuntimeError(errs[0])
    return ids


def find_gpupool():
    for c in (os.path.join(ROOT, "build", "h-bench", "gpupool"),
              os.path.join(ROOT, "build", "release", "gpupool"), shutil.which("gpupool")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def stats(ms):
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95),
            "p99_ms": percentile(ms, 99), "max_ms": max(ms)}


def driver(a):
    binary = a.gpupool or find_gpupool()
    if not binary or not os.access(binary, os.X_OK):
        raise RuntimeError("no gpupool binary at %s: build it (make build) or pass --gpupool"
                           % (binary or "build/h-bench, build/release or PATH"))
    client_bin = None
    if a.client != "python":
        client_bin = a.client_binary or os.path.join(os.path.dirname(os.path.abspath(binary)),
                                                     "bench", "api_load")
        if not os.access(client_bin, os.X_OK):
            if a.client == "c":
                raise RuntimeError("no C client at %s: build it (cmake --build BUILD --target "
                                   "api_load) or pass --client python" % client_bin)
            print("no C client at %s: using the Python clients" % client_bin, file=sys.stderr)
            client_bin = None
    gpus = len(json.load(open(a.node))["gpus"])
    pg = Postgres(a.pg_write_delay_ms) if a.postgres else None
    srv = Server(binary, a.node, pg.spec if pg else a.store)
    running = []
    try:
        srv.wait_up(gpus)
        if pg:
            pg.slow_writes()
        # Occupy the GPUs (all but --free-gpus) with jobs that outlast the run (time limit
        # as a safety net).
        for _ in range(gpus - a.free_gpus):
            hold = job_body(srv.work, ["sleep", "3600"])
            hold.update({"time_limit_s": 900, "name": "apilat-hold"})
            st, body = call(srv.sock, "POST", "/v1/jobs", hold)
            if st != 201:
                raise RuntimeError("submitting a holder job answered %s: %s" % (st, body))
            running.append(body["job"]["id"])
        deadline = time.time() + 30
        while True:
            st, body = call(srv.sock, "GET", "/v1/jobs?state=RUNNING")
            if st == 200 and len(body["jobs"]) >= gpus - a.free_gpus:
                break
            if time.time() > deadline:
                raise RuntimeError("the %d holder jobs did not all start within 30 s:\n%s"
                                   % (gpus, srv.tail()))
            time.sleep(0.1)
        t0 = time.time()
        ids = submit_many(srv.sock, srv.work, a.queued)
        fill_s = time.time() - t0
        print("queued %d jobs in %.1f s (%.0f/s)" % (len(ids), fill_s, len(ids) / fill_s),
              file=sys.stderr, flush=True)
        rss_before = vm_status(srv.proc.pid)
        # Service time without concurrency: one client, each kind a few times in a row, to
        # tell an expensive request from one that waits behind the others under load.
        solo = {}
        for kind, req in (("get_job", ("GET", "/v1/jobs/%d" % ids[len(ids) // 2], None)),
                          ("list_active", ("GET", "/v1/jobs?active=1&limit=50", None)),
                          ("nodes", ("GET", "/v1/nodes", None)),
                          ("submit", ("POST", "/v1/jobs", job_body(srv.work, ["true"])))):
            ms = []
            for _ in range(a.solo):
                t1 = time.perf_counter()
                call(srv.sock, *req)
                ms.append((time.perf_counter() - t1) * 1000.0)
            solo[kind] = stats(ms)

        procs = 1 if client_bin else min(a.clients, a.processes)
        per = [a.clients // procs + (1 if i < a.clients % procs else 0) for i in range(procs)]
        stop_at = time.time() + 2 + a.duration  # 2 s for the workers to start
        # GET /v1/jobs/ID picks from a sample of the queued jobs (argv stays small).
        pick = random.Random(1).sample(ids, min(len(ids), 2000)) + running
        id_list = ",".join(str(i) for i in pick)
        common = ["--sock", srv.sock, "--workdir", srv.work, "--ids", id_list,
                  "--stop-at", repr(stop_at)]
        if client_bin:
            cmds = [[client_bin, "--threads", str(n), "--seed", str(i), "--mix", a.mix,
                     "--cpu-milli", str(CPU_MILLI)] + common for i, n in enumerate(per)]
        else:
            cmds = [[sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(n),
                     "--seed", str(i), "--mix", a.mix] + common for i, n in enumerate(per)]
        workers = [subprocess.Popen(c, stdout=subprocess.PIPE) for c in cmds]
        merged = {k: [] for k, _ in KINDS}
        errors = {k: 0 for k, _ in KINDS}
        examples = []
        for w in workers:
            out, _ = w.communicate(timeout=a.duration + 120)
            if w.returncode != 0:
                raise RuntimeError("a client process failed (exit %s)" % w.returncode)
            r = json.loads(out)
            for k in merged:
                merged[k] += r["samples"][k]
                errors[k] += r["errors"][k]
            examples += r["error_examples"]
        st, body = call(srv.sock, "GET", "/v1/jobs?state=PENDING")
        pending = len(body["jobs"]) if st == 200 else None
        mem = vm_status(srv.proc.pid)
        all_ms = [x for v in merged.values() for x in v]
        res = {
            "queued_before": len(ids), "pending_after": pending, "clients": a.clients,
            "client_processes": procs, "duration_s": a.duration, "fill_s": fill_s,
            "requests": len(all_ms), "requests_per_s": len(all_ms) / a.duration,
            "errors": errors, "error_examples": examples[:5],
            "by_kind": {k: stats(v) for k, v in merged.items()},
            "overall": stats(all_ms),
            "solo": solo,
            "controller_rss_bytes_before_load": rss_before.get("VmRSS"),
            "controller_peak_rss_bytes": mem.get("VmHWM"),
            "controller_rss_bytes_end": mem.get("VmRSS"),
            "host_cpus": os.cpu_count(),
            "client": "c" if client_bin else "python",
            "mix": a.mix,
            "free_gpus": a.free_gpus,
            "store": ("postgresql, write delay %g ms" % a.pg_write_delay_ms) if pg
            else (a.store or "sqlite"),
        }
    finally:
        srv.stop(running)
        if pg:
            pg.stop()
    return res


def print_table(res):
    print("API latency: %d queued (%s pending at the end), %d %s clients (%s mix) for %d s, "
          "%d requests (%.0f/s)" % (res["queued_before"], res["pending_after"], res["clients"],
                                    "C++" if res["client"] == "c" else "Python", res["mix"],
                                    res["duration_s"], res["requests"], res["requests_per_s"]))
    print("store: %s; %d GPU(s) left free for queued jobs to run through"
          % (res["store"], res["free_gpus"]))
    print("| request | n | p50 ms | p95 ms | p99 ms | max ms | errors |")
    print("|---|---|---|---|---|---|---|")
    names = {"get_job": "GET /v1/jobs/ID", "list_active": "GET /v1/jobs?active=1&limit=50",
             "nodes": "GET /v1/nodes", "submit": "POST /v1/jobs",
             "cancel": "POST /v1/jobs/ID/cancel"}
    for k, _ in KINDS:
        s = res["by_kind"][k]
        if s["n"]:
            print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %d |" % (
                names[k], s["n"], s["p50_ms"], s["p95_ms"], s["p99_ms"], s["max_ms"],
                res["errors"][k]))
        else:
            print("| %s | 0 | - | - | - | - | %d |" % (names[k], res["errors"][k]))
    s = res["overall"]
    if s["n"]:
        print("| all | %d | %.1f | %.1f | %.1f | %.1f | %d |" % (
            s["n"], s["p50_ms"], s["p95_ms"], s["p99_ms"], s["max_ms"],
            sum(res["errors"].values())))
    solo = res.get("solo", {})
    if solo and all(v["n"] for v in solo.values()):
        print("one client alone, %d of each: %s" % (
            next(iter(solo.values()))["n"],
            ", ".join("%s p50 %.1f ms" % (names[k], v["p50_ms"]) for k, v in solo.items())))
    mib = lambda b: "-" if b is None else "%.1f MiB" % (b / 1048576.0)
    print("controller RSS: %s after queueing, peak (VmHWM) %s, %s at the end" % (
        mib(res["controller_rss_bytes_before_load"]), mib(res["controller_peak_rss_bytes"]),
        mib(res["controller_rss_bytes_end"])))
    for e in res["error_examples"]:
        print("error example: " + e)


def on_term(_signum, _frame):
    raise KeyboardInterrupt()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpupool", help="gpupool binary (default: build/h-bench, build/release)")
    ap.add_argument("--node", default=os.path.join(HERE, "node-8gpu.json"))
    ap.add_argument("--queued", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--processes", type=int, default=5, help="client processes")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--solo", type=int, default=10,
                    help="requests of each kind from one client before the load")
    ap.add_argument("--mix", choices=("steady", "growing"), default="steady",
                    help="steady: submissions and cancels balance (the queue stays at "
                    "--queued); growing: 20%% submissions (the queue grows)")
    ap.add_argument("--client", choices=("auto", "c", "python"), default="auto",
                    help="load generator: c (bench/api_load), python, or auto (c when built)")
    ap.add_argument("--client-binary", help="api_load binary (default: BUILD/bench/api_load "
                    "beside --gpupool)")
    ap.add_argument("--store", help="the server's --store (default: its SQLite file)")
    ap.add_argument("--postgres", action="store_true",
                    help="run the server on a throwaway PostgreSQL 15 (postgresql-15)")
    ap.add_argument("--pg-write-delay-ms", type=float, default=0.0,
                    help="with --postgres: every job insert or update statement sleeps this "
                    "long in the database")
    ap.add_argument("--free-gpus", type=int, default=0,
                    help="GPUs not held by long jobs: queued jobs run through them")
    ap.add_argument("--out")
    # worker mode (internal)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sock", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    ap.add_argument("--stop-at", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if not (1 <= a.queued <= 1000000 and 1 <= a.clients <= 1000 and 1 <= a.processes
            and 0 < a.duration <= 600):
        ap.error("--queued 1..1000000, --clients 1..1000, --duration 0..600 s")
    if a.pg_write_delay_ms and not a.postgres:
        ap.error("--pg-write-delay-ms needs --postgres")
    if not 0 <= a.pg_write_delay_ms <= 1000 or a.free_gpus < 0:
        ap.error("--pg-write-delay-ms 0..1000, --free-gpus 0 or more")
    # Ctrl-C / TERM: unwind through driver()'s finally so the server is stopped.
    signal.signal(signal.SIGTERM, on_term)
    res = driver(a)
    print_table(res)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, OSError, KeyboardInterrupt) as e:
        print("api_latency: %s" % (e or "interrupted"), file=sys.stderr)
        sys.exit(1)
