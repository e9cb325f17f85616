"""The node check's shared helpers (nodecheck.py, nodecheck_checks.py): running commands,
the pool's API on its Unix socket, the context the checks get, the fake GPU's telemetry
file, the pool jobs as the checks see them, and the checks' outcomes."""
import datetime
import glob
import http.client
import json
import os
import socket
import statistics
import subprocess
import time


FINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "LOST")
ACTIVE = "PENDING,ASSIGNED,RUNNING"
MIB = 1 << 20
# Check results: status and the plain-words reason in details["summary"].
PASS, FAIL, SKIP = "pass", "fail", "skip"


# ---- small helpers ----------------------------------------------------------------------

def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def write_json(path, obj):
    write(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def tail(text, n=1500):
    text = text or ""
    return text if len(text) <= n else "..." + text[-n:]


def run(cmd, env=None, timeout=60, save=None):
    """Runs cmd; returns (rc, stdout, stderr). rc is None when it could not start or
    timed out (stderr says which). `save` (a path without extension) keeps the output."""
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        rc, out, err = p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except FileNotFoundError as e:
        rc, out, err = None, "", "cannot run %s: %s" % (cmd[0], e)
    except subprocess.TimeoutExpired as e:
        rc = None
        out = (e.stdout or b"").decode(errors="replace")
        err = "%s did not finish within %d s" % (" ".join(cmd[:3]), timeout)
    if save:
        write(save + ".out", out)
        if err:
            write(save + ".err", err)
    return rc, out, err


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def api(sock, method, path, body=None, timeout=10):
    """One request to the pool's API on its Unix socket: (status, parsed JSON or bytes)."""
    conn = UnixConnection(sock, timeout)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"} if body is not None else {})
        r = conn.getresponse()
        data = r.read()
        if "json" in (r.getheader("Content-Type") or ""):
            try:
                return r.status, json.loads(data)
            except ValueError:
                pass
        return r.status, data
    finally:
        conn.close()


def mean(xs):
    return statistics.fmean(xs) if xs else None


def close(a, b, abs_tol, rel_tol=0.0):
    return abs(a - b) <= max(abs_tol, rel_tol * max(abs(a), abs(b)))


# ---- the context every check gets ------------------------------------------------------

class Context:
    """What the orchestrator found and the children need (saved as JSON between them)."""

    def __init__(self, d):
        self.__dict__.update(d)

    def bin(self, name):
        return os.path.join(self.kit, "bin", name)

    def smi(self):
        if self.fake:
            return [self.python_self, os.path.join(self.kit, "fake", "nvidia-smi")]
        return [self.nvidia_smi] if self.nvidia_smi else None

    def gpupool(self, *args):
        return [self.bin("gpupool")] + list(args)

    def client(self, *args):
        """A client command against the check's pool: gpupool CMD --server unix:SOCK ..."""
        return [self.bin("gpupool"), args[0], "--server", "unix:" + self.pool["socket"]] + list(args[1:])

    def dir(self, name):
        d = os.path.join(self.out, name)
        os.makedirs(d, exist_ok=True)
        return d


def kit_env(kit, fake, out):
    """The environment of the kit's own binaries: its libraries first; in fake mode the
    fake libnvidia-ml (also for the gtest cases, which dlopen libnvidia-ml.so.1 by name)."""
    env = dict(os.environ)
    paths = [os.path.join(kit, "lib")]
    if fake:
        paths.insert(0, os.path.join(kit, "fake"))
        env["GPUPOOL_NVML_LIBRARY"] = os.path.join(kit, "fake", "libnvidia-ml.so.1")
        env["FAKE_NVML_SCENARIO"] = os.path.join(out, "fake", "scenario.json")
        env["FAKE_NVML_TELEMETRY"] = os.path.join(out, "fake", "telemetry.json")
    if os.environ.get("LD_LIBRARY_PATH"):
        paths.append(os.environ["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(paths)
    return env


def smi_env(ctx):
    """nvidia-smi's environment: the machine's own (fake mode: the fake's files)."""
    env = dict(os.environ)
    if ctx.fake:
        env["FAKE_NVML_SCENARIO"] = ctx.kit_env["FAKE_NVML_SCENARIO"]
        env["FAKE_NVML_TELEMETRY"] = ctx.kit_env["FAKE_NVML_TELEMETRY"]
    return env


def set_fake_telemetry(ctx, device=None):
    """Fake mode: what the fake NVML (and the fake nvidia-smi) report for GPU 0 from now
    on, as a real GPU would under the job's load. Written whole and renamed into place."""
    path = ctx.kit_env["FAKE_NVML_TELEMETRY"]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"devices": {"0": device or {"utilization_gpu": 0, "processes": []}}}, f)
    os.replace(tmp, path)


def busy_fake_gpu(ctx, pids):
    scenario = read_json(ctx.kit_env["FAKE_NVML_SCENARIO"], {})
    base = scenario.get("devices", [{}])[0].get("memory_used", 0)
    per = 2 << 30
    set_fake_telemetry(ctx, {
        "utilization_gpu": 93, "utilization_memory": 40, "power_mw": 512000, "temperature": 55,
        "memory_used": base + per * len(pids),
        "processes": [{"pid": p, "used_memory": per, "sm_util": 90 // max(1, len(pids))}
                      for p in pids]})


# ---- pool helpers (children) -------------------------------------------------------------

def submit(ctx, name, opts, argv):
    """gpupool submit --json as a user would; returns the job."""
    # --export=NONE: a job of the kit gets what it is given, never the caller's shell
    # environment (which may hold secrets, and would be stored with the job).
    cmd = ctx.client("submit", "--json", "--name", name, "--cpus", ctx.job_cpus,
                     "--workdir", "/tmp", "--export=NONE", *opts)
    if ctx.job_env_ld:
        cmd += ["--env", "LD_LIBRARY_PATH=" + ctx.job_env_ld]
    cmd += ["--"] + argv
    rc, out, err = run(cmd, env=ctx.kit_env, timeout=30)
    if rc != 0:
        raise CheckError("gpupool submit failed (exit %s): %s" % (rc, tail(err or out, 500)))
    return json.loads(out)["job"]


def job(ctx, jid):
    st, body = api(ctx.pool["socket"], "GET", "/v1/jobs/%d" % jid)
    if st != 200:
        raise CheckError("GET /v1/jobs/%d answered %d" % (jid, st))
    return body["job"]


def wait_job(ctx, jid, states, timeout):
    deadline = time.time() + timeout
    while True:
        j = job(ctx, jid)
        if j["state"] in states:
            return j
        if time.time() > deadline:
            raise CheckError("job %d still %s after %d s (wanted %s); reason: %s" % (
                jid, j["state"], timeout, "/".join(states), j.get("reason") or j.get("pending_reason")))
        time.sleep(0.2)


def logs(ctx, jid, stream="stdout"):
    st, body = api(ctx.pool["socket"], "GET", "/v1/jobs/%d/logs?stream=%s" % (jid, stream))
    if st != 200:
        return ""
    return body.decode(errors="replace") if isinstance(body, bytes) else json.dumps(body)


def events(text):
    """The JSON lines a torch_job.py printed, by event."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            out[e.get("event")] = e
    return out


def wait_event(ctx, jid, name, timeout):
    deadline = time.time() + timeout
    while True:
        ev = events(logs(ctx, jid)).get(name)
        if ev is not None:
            return ev
        j = job(ctx, jid)
        if j["state"] in FINAL:
            ev = events(logs(ctx, jid)).get(name)
            if ev is not None:
                return ev
            raise CheckError("job %d ended %s before printing its %s line; reason: %s; stderr: %s" % (
                jid, j["state"], name, j.get("reason"), tail(logs(ctx, jid, "stderr"), 800)))
        if time.time() > deadline:
            raise CheckError("job %d printed no %s line within %d s; stderr: %s" % (
                jid, name, timeout, tail(logs(ctx, jid, "stderr"), 800)))
        time.sleep(0.2)


def save_job(ctx, d, jid):
    j = job(ctx, jid)
    write_json(os.path.join(d, "job-%d.json" % jid), j)
    write(os.path.join(d, "job-%d.stdout" % jid), logs(ctx, jid))
    write(os.path.join(d, "job-%d.stderr" % jid), logs(ctx, jid, "stderr"))
    shim = read_json(shim_path(ctx, jid))
    if shim:
        write_json(os.path.join(d, "job-%d.shim.json" % jid), shim)
    return j


def shim_path(ctx, jid):
    """The job supervisor's record (src/agent/job_files.h), kept after the job ended: task
    0's run directory of the job's last attempt, STATE/agent/jobs/<job>/<task>.<attempt>/."""
    runs = []
    for p in glob.glob(os.path.join(ctx.pool["state_dir"], "agent", "jobs", str(jid), "0.*", "shim.json")):
        attempt = os.path.basename(os.path.dirname(p)).split(".", 1)[1]
        if attempt.isdigit():
            runs.append((int(attempt), p))
    return max(runs)[1] if runs else os.path.join(ctx.pool["state_dir"], "agent", "jobs", str(jid),
                                                  "0.1", "shim.json")


def isolation_note(ctx, jid):
    return (read_json(shim_path(ctx, jid)) or {}).get("isolation")


def follow_jobs(ctx, jids, timeout):
    """Waits until every job ended. In fake mode the fake GPU looks busy while any of
    them runs, with their processes on it, as a real one would under their work."""
    deadline = time.time() + timeout
    pids = {}
    shown = None
    while True:
        states = {jid: job(ctx, jid)["state"] for jid in jids}
        if ctx.fake:
            for jid in jids:
                if jid not in pids and states[jid] == "RUNNING":
                    start = events(logs(ctx, jid)).get("start")
                    if start and start.get("pid"):
                        pids[jid] = start["pid"]
            live = sorted(p for jid, p in pids.items() if states[jid] == "RUNNING")
            if live != shown:
                if live:
                    busy_fake_gpu(ctx, live)
                else:
                    set_fake_telemetry(ctx)
                shown = live
        if all(s in FINAL for s in states.values()):
            if ctx.fake:
                set_fake_telemetry(ctx)
            return
        if time.time() > deadline:
            raise CheckError("jobs still running after %d s: %s" % (timeout, states))
        time.sleep(0.2)


class CheckError(Exception):
    """A check failed for the reason given."""


class Skip(Exception):
    """A check cannot run here, for the reason given."""


def need_pool(ctx):
    if not ctx.pool or not ctx.pool.get("socket"):
        reason = (ctx.pool or {}).get("error", "the pool was not started")
        if (ctx.pool or {}).get("skip"):
            raise Skip(reason)
        raise CheckError("no pool: " + reason)


def need_torch(ctx):
    if not ctx.torch_python:
        raise Skip("no PyTorch: " + ctx.torch_reason)


def dev_str(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.0f" % v if abs(v) >= 100 else "%.3g" % v
    return str(v)
