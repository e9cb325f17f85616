#!/usr/bin/env python3
"""The node acceptance check (issue 26, docs/node-check.md): runs every check of the kit
against this machine and writes DIR/report.json, DIR/report.md and the raw captures.

    run.sh --out DIR [--mode auto|real|fake] [--python PATH] [--only CHECK,...]

run.sh (beside bin/, lib/, tests/, fake/ and share/) calls this with --kit. On a machine
where gpupool's NVML discovery or nvidia-smi shows a GPU the checks run for real;
elsewhere (or with --mode fake) they run against the fake libnvidia-ml and the fake
nvidia-smi in fake/, every result is marked fake, and the run still proves that the kit
works (CI runs it so).

Each check runs in a child process of its own with its own time limit, killed with its
process group when it overruns, so one that hangs cannot eat the others' time; the whole
run stays within --budget seconds (default 450, under the 8 minutes asked for). Checks that
need a pool share one `gpupool up` in a temporary state directory, which is stopped and
cleaned up (jobs cancelled, supervisors and job cgroups removed) whatever happens. Nothing
here changes the GPU's settings: it reads NVML and nvidia-smi, and runs jobs.

The kit's binaries run with LD_LIBRARY_PATH=KIT/lib; nothing else does (Python, PyTorch,
nvidia-smi and the jobs keep the machine's own libraries).
"""
import argparse
import datetime
import errno
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

CHECKS = ["discovery", "real-driver-tests", "xid", "telemetry", "pool-job", "isolation",
          "enforcement", "health"]
NEEDS_POOL = {"telemetry", "pool-job", "isolation"}
# Seconds each check may take before it is killed. Their sum with the pool's start and
# stop stays under the budget, so a run never passes 8 minutes even when all hang.
LIMITS = {"discovery": 40, "real-driver-tests": 60, "xid": 30, "telemetry": 110,
          "pool-job": 120, "isolation": 50, "enforcement": 10, "health": 10}
POOL_START_S = 30
POOL_STOP_S = 30
DEFAULT_BUDGET_S = 450
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "LOST")
ACTIVE = "PENDING,ASSIGNED,RUNNING"
CDI_KIND = "gpupool-nodecheck.local/gpu"
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
    cmd = ctx.client("submit", "--json", "--name", name, "--cpus", ctx.job_cpus,
                     "--workdir", "/tmp", *opts)
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
    """The job supervisor's record (src/agent/job_files.h), kept after the job ended."""
    return os.path.join(ctx.pool["state_dir"], "agent", "jobs", str(jid), "shim.json")


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


# ---- the checks ------------------------------------------------------------------------

def norm_bus(bus):
    """'00000000:1B:00.0' and '0000:1b:00.0' -> (0, 0x1b, 0, 0)."""
    m = re.match(r"^\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)\s*$", bus or "")
    return tuple(int(x, 16) for x in m.groups()) if m else None


def version_tuple(text):
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?", text or "")
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def csv_rows(text):
    rows = []
    for line in text.splitlines():
        if line.strip():
            rows.append([c.strip() for c in line.split(",")])
    return rows


def fixture_name(node):
    gpus = [g for g in node.get("gpus", []) if g.get("vendor") == "nvidia"]
    model = gpus[0]["name"] if gpus else "no-gpu"
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    slug = slug.replace("nvidia-", "", 1)
    driver = (node.get("drivers", {}).get("nvidia") or {}).get("version", "nodriver")
    return "nvidia-%dx%s-%s.json" % (len(gpus), slug, driver)


def check_discovery(ctx):
    d = ctx.dir("discovery")
    details = {}
    rc, out, err = run(ctx.gpupool("gpus", "--json"), env=ctx.kit_env, timeout=30,
                       save=os.path.join(d, "gpupool-gpus"))
    if rc != 0:
        raise CheckError("gpupool gpus --json failed (exit %s): %s" % (rc, tail(err, 800)))
    node = json.loads(out)
    # What discovery said on stderr (its hint about fake nodes left out).
    details["diagnostics"] = [l for l in err.splitlines() if l.startswith("gpupool gpus:")]
    # nvidia-smi knows NVIDIA's GPUs only (sysfs may also list another vendor's).
    gpus = [g for g in node.get("gpus", []) if g.get("vendor") == "nvidia"]
    if not gpus:
        # Why: the NVML backend alone says (auto discovery keeps a missing library quiet).
        _, _, why = run(ctx.gpupool("gpus", "--backend", "nvml", "--json"), env=ctx.kit_env,
                        timeout=30, save=os.path.join(d, "gpupool-gpus-nvml"))
        raise CheckError("gpupool found no NVIDIA GPU: " + tail(why.strip(), 600))
    # The capture as a fixture, and its replay: byte-identical through --fake.
    fixture = os.path.join(d, "fixture", fixture_name(node))
    write(fixture, out)
    details["fixture"] = os.path.relpath(fixture, ctx.out)
    rrc, rout, rerr = run(ctx.gpupool("gpus", "--fake", fixture, "--json"), env=ctx.kit_env,
                          timeout=30, save=os.path.join(d, "replay"))
    problems = []
    if rrc != 0 or rout != out:
        problems.append("the fixture does not replay byte-identical with `gpupool gpus --fake` "
                        "(exit %s; see discovery/replay.out)" % rrc)
    else:
        details["replay"] = "byte-identical"

    smi = ctx.smi()
    if smi is None:
        raise CheckError("nvidia-smi is not on PATH: nothing to compare discovery with")
    senv = smi_env(ctx)
    fields = "index,uuid,name,pci.bus_id,driver_version,memory.total"
    rc, qout, qerr = run(smi + ["--query-gpu=" + fields, "--format=csv,noheader,nounits"],
                         env=senv, timeout=30, save=os.path.join(d, "nvidia-smi-query-gpu"))
    if rc != 0:
        raise CheckError("nvidia-smi --query-gpu failed (exit %s): %s" % (rc, tail(qerr or qout, 500)))
    smi_gpus = {}
    for r in csv_rows(qout):
        if len(r) >= 6:
            smi_gpus[r[1]] = {"index": r[0], "name": r[2], "bus": r[3], "driver": r[4], "mem": r[5]}
    rc, cout, _ = run(smi + ["--query-gpu=uuid,compute_cap", "--format=csv,noheader"], env=senv,
                      timeout=30, save=os.path.join(d, "nvidia-smi-compute-cap"))
    caps = {r[0]: r[1] for r in csv_rows(cout) if len(r) >= 2} if rc == 0 else {}
    if rc != 0:
        details["compute_cap"] = "nvidia-smi cannot query compute_cap (older than R510?): not compared"
    rc, hout, _ = run(smi, env=senv, timeout=30, save=os.path.join(d, "nvidia-smi"))
    m = re.search(r"CUDA Version\s*:?\s*([0-9]+\.[0-9]+)", hout)
    smi_cuda = m.group(1) if m else None

    nv = node.get("drivers", {}).get("nvidia") or {}
    compared = []
    if set(smi_gpus) != {g["uuid"] for g in gpus}:
        problems.append("GPUs differ: nvidia-smi lists %s, gpupool %s" % (
            sorted(smi_gpus), sorted(g["uuid"] for g in gpus)))
    for g in gpus:
        s = smi_gpus.get(g["uuid"])
        if s is None:
            continue
        who = "GPU %s (%s)" % (g["index"], g["uuid"])
        row = {"gpu": g["index"], "uuid": g["uuid"]}

        def cmp(field, ours, theirs, same):
            row[field] = {"gpupool": ours, "nvidia-smi": theirs, "match": bool(same)}
            if not same:
                problems.append("%s %s: gpupool %r, nvidia-smi %r" % (who, field, ours, theirs))
        cmp("index", g["index"], s["index"], str(g["index"]) == s["index"])
        cmp("name", g["name"], s["name"], g["name"] == s["name"])
        cmp("pci_bus_id", g["pci_bus_id"], s["bus"], norm_bus(g["pci_bus_id"]) == norm_bus(s["bus"]))
        ours_mib = g["memory_total_bytes"] // MIB
        try:
            theirs_mib = int(float(s["mem"]))
            # Same NVML figure, but nvidia-smi may report memory without what the driver
            # reserves on some versions: within 1%.
            same_mem = close(ours_mib, theirs_mib, 1, 0.01)
        except ValueError:
            theirs_mib, same_mem = s["mem"], False
        cmp("memory_total_mib", ours_mib, theirs_mib, same_mem)
        cmp("driver", nv.get("version"), s["driver"], nv.get("version") == s["driver"])
        if g["uuid"] in caps:
            cmp("compute_capability", g.get("compute_capability"), caps[g["uuid"]],
                version_tuple(g.get("compute_capability")) == version_tuple(caps[g["uuid"]]))
        compared.append(row)
    if smi_cuda is None:
        details["cuda_version"] = "nvidia-smi printed no CUDA version: not compared"
    else:
        ours = nv.get("runtime_version")
        details["cuda_version"] = {"gpupool": ours, "nvidia-smi": smi_cuda}
        if version_tuple(ours) != version_tuple(smi_cuda):
            problems.append("CUDA version: gpupool %r, nvidia-smi %r" % (ours, smi_cuda))
    details["gpus"] = compared
    if problems:
        details["problems"] = problems
        return FAIL, "%d GPU(s); %d difference(s): %s" % (len(gpus), len(problems), "; ".join(problems[:3])), details
    return PASS, "%d GPU(s) (%s), driver %s, CUDA %s: every field matches nvidia-smi; fixture %s" % (
        len(gpus), gpus[0]["name"], nv.get("version"), nv.get("runtime_version"),
        os.path.basename(fixture)), details


def check_real_driver_tests(ctx):
    d = ctx.dir("real-driver-tests")
    binary = os.path.join(ctx.kit, "tests", "nvml_backend_test")
    report = os.path.join(d, "gtest.json")
    rc, out, err = run([binary, "--gtest_filter=*RealDriver*", "--gtest_output=json:" + report],
                       env=ctx.kit_env, timeout=50, save=os.path.join(d, "nvml_backend_test"))
    g = read_json(report)
    if g is None:
        raise CheckError("the test binary wrote no report (exit %s): %s" % (rc, tail(err or out, 800)))
    cases, failed, skipped = [], [], []
    for suite in g.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = "%s.%s" % (suite.get("name"), t.get("name"))
            result = t.get("result", "COMPLETED")
            fails = [f.get("failure", "") for f in t.get("failures", [])]
            status = "failed" if fails else ("skipped" if result == "SKIPPED" else "passed")
            cases.append({"test": name, "status": status, "failures": fails})
            (failed if fails else skipped if status == "skipped" else []).append(name)
    notes = [l for l in out.splitlines() if l.startswith("note:") or l.startswith("GPU ")]
    details = {"cases": cases, "output": notes}
    if not cases:
        raise CheckError("no *RealDriver* test case ran")
    if failed or rc != 0:
        return FAIL, "%d of %d failed: %s" % (len(failed), len(cases), ", ".join(failed)), details
    if skipped:
        # They skip only without a usable driver: on a GPU machine that is a failure.
        return FAIL, "%d of %d skipped (no usable driver?): %s" % (
            len(skipped), len(cases), ", ".join(skipped)), details
    return PASS, "%d real-driver cases passed: %s" % (len(cases), ", ".join(c["test"] for c in cases)), details


def read_samples(path):
    rounds = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rounds.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rounds


def check_xid(ctx):
    d = ctx.dir("xid")
    path = os.path.join(d, "samples.jsonl")
    rc, out, err = run(ctx.gpupool("gpus", "--sample", "4", "--sample-interval", "0.5"),
                       env=ctx.kit_env, timeout=25, save=os.path.join(d, "sample"))
    write(path, out)
    rounds = read_samples(path)
    if not rounds:
        raise CheckError("gpupool gpus --sample printed nothing (exit %s): %s" % (rc, tail(err, 600)))
    details = {"rounds": len(rounds), "sampler": rounds[0].get("sampler"),
               "took_ms": [round(r.get("took_ms", 0), 3) for r in rounds]}
    problems = []
    if rounds[0].get("note"):
        details["note"] = rounds[0]["note"]
    seen = {}
    for r in rounds:
        if r.get("error"):
            problems.append("round %d: %s" % (r["round"], r["error"]))
        if r.get("took_ms", 0) > 2000:
            problems.append("round %d took %.0f ms: the Xid drain blocked" % (r["round"], r["took_ms"]))
        for s in r.get("samples", []):
            if "xid_errors" not in s or "xid_count" not in s:
                problems.append("GPU %s: no Xid figures (event set not registered)%s" % (
                    s.get("index"), ": " + r["note"] if r.get("note") else ""))
            elif s["xid_count"] > 0:
                seen[s["index"]] = (s["xid_errors"], s["xid_count"])
    problems = sorted(set(problems), key=problems.index)
    details["xid_seen"] = {str(k): {"last_xid": v[0], "count": v[1]} for k, v in seen.items()}
    expected = {}
    if ctx.fake:
        scenario = read_json(ctx.kit_env["FAKE_NVML_SCENARIO"], {})
        for i, dev in enumerate(scenario.get("devices", [])):
            for x in dev.get("xid_events", []):
                expected[i] = x["xid"] if isinstance(x, dict) else x
        got = {k: v[0] for k, v in seen.items()}
        if got != expected:
            problems.append("the fake's scripted Xid events %s were drained as %s" % (expected, got))
    elif seen:
        problems.append("the driver reported Xid errors during the check: %s (see dmesg)" % (
            ", ".join("GPU %s: Xid %s x%s" % (k, v[0], v[1]) for k, v in seen.items())))
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    worst = max(r.get("took_ms", 0) for r in rounds)
    what = ("the scripted Xid %s drained" % expected) if ctx.fake else "no Xid event"
    return PASS, "event sets registered on %d GPU(s); %d non-blocking drains (slowest sample %.1f ms); %s" % (
        len(rounds[0].get("samples", [])), len(rounds), worst, what), details


def parse_dmon(text):
    """nvidia-smi dmon's rows as dicts keyed by its header's column names."""
    cols, rows = None, []
    for line in text.splitlines():
        if line.startswith("#"):
            if cols is None:
                cols = line.lstrip("#").split()
            continue
        vals = line.split()
        if cols and len(vals) == len(cols):
            row = {}
            for c, v in zip(cols, vals):
                try:
                    row[c] = float(v)
                except ValueError:
                    row[c] = None
            rows.append(row)
    return cols or [], rows


def check_telemetry(ctx):
    need_pool(ctx)
    need_torch(ctx)
    smi = ctx.smi()
    if smi is None:
        raise CheckError("nvidia-smi is not on PATH: nothing to compare the telemetry with")
    d = ctx.dir("telemetry")
    burn = ctx.burn_seconds
    j = submit(ctx, "nodecheck-telemetry", ["--gpus", "1"],
               [ctx.torch_python, ctx.job_script, "work", str(burn)])
    jid = j["id"]
    details = {"job": jid}
    wait_job(ctx, jid, ("RUNNING",) + FINAL, 30)
    start = wait_event(ctx, jid, "start", 90)
    if start.get("torch") is None:
        raise CheckError("the job could not import torch: %s" % start.get("error"))
    pid = start["pid"]
    j = job(ctx, jid)
    uuid = j["placement"][0]["gpu_uuids"][0]
    gpu_index = None
    details.update({"pid": pid, "gpu_uuid": uuid, "device": start.get("device"),
                    "torch": start.get("torch")})
    if ctx.fake:
        busy_fake_gpu(ctx, [pid])
    rounds = max(3, int(burn) - 4)
    samples_path = os.path.join(d, "gpupool-samples.jsonl")
    dmon_path = os.path.join(d, "nvidia-smi-dmon.txt")
    senv = smi_env(ctx)
    with open(samples_path, "w") as sf, open(dmon_path, "w") as df:
        ps = subprocess.Popen(ctx.gpupool("gpus", "--sample", str(rounds), "--sample-interval", "1"),
                              env=ctx.kit_env, stdout=sf, stderr=subprocess.PIPE)
        pd = subprocess.Popen(smi + ["dmon", "-s", "pum", "-d", "1", "-c", str(rounds)], env=senv,
                              stdout=df, stderr=subprocess.STDOUT)
        apps = []
        for k in range(2):
            time.sleep(1.5 if k == 0 else max(1.0, rounds / 2.0 - 1.5))
            rc, aout, aerr = run(smi + ["--query-compute-apps=pid,used_memory,gpu_uuid",
                                        "--format=csv,noheader,nounits"], env=senv, timeout=20,
                                 save=os.path.join(d, "nvidia-smi-compute-apps-%d" % k))
            apps.append(csv_rows(aout) if rc == 0 else [])
        try:
            ps.wait(rounds + 20)
            pd.wait(rounds + 20)
        finally:
            for p in (ps, pd):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        sample_err = ps.stderr.read().decode(errors="replace")
    j = wait_job(ctx, jid, FINAL, burn + 60)
    if ctx.fake:
        set_fake_telemetry(ctx)
    end = events(logs(ctx, jid)).get("end", {})
    j = save_job(ctx, d, jid)
    st, nodes = api(ctx.pool["socket"], "GET", "/v1/nodes")
    write_json(os.path.join(d, "nodes.json"), nodes)

    problems = []
    ours = read_samples(samples_path)
    if not ours:
        raise CheckError("gpupool gpus --sample printed nothing: %s" % tail(sample_err, 600))
    with open(dmon_path) as f:
        cols, dmon_rows = parse_dmon(f.read())
    # Our rounds for the job's GPU.
    mine = []
    for r in ours:
        for s in r.get("samples", []):
            if s.get("uuid") == uuid:
                mine.append(s)
                gpu_index = s.get("index")
    if not mine:
        raise CheckError("the sampler reported nothing for GPU %s" % uuid)
    theirs = [row for row in dmon_rows if row.get("gpu") == gpu_index]
    details["rounds"] = {"gpupool": len(mine), "dmon": len(theirs), "dmon_columns": cols}
    if not theirs:
        problems.append("nvidia-smi dmon printed no row for GPU %s" % gpu_index)

    def compare(label, ours_key, dmon_key, abs_tol, rel_tol, floor=None):
        a = [s[ours_key] for s in mine if s.get(ours_key) is not None]
        b = [row[dmon_key] for row in theirs if row.get(dmon_key) is not None]
        entry = {"gpupool_mean": round(mean(a), 1) if a else None,
                 "dmon_mean": round(mean(b), 1) if b else None,
                 "tolerance": "max(%s, %d%%)" % (abs_tol, rel_tol * 100)}
        details[label] = entry
        if not a:
            problems.append("%s: the sampler reported none" % label)
            return
        if not b:
            entry["note"] = "nvidia-smi dmon has no %s column here" % dmon_key
            return
        if not close(mean(a), mean(b), abs_tol, rel_tol):
            problems.append("%s: gpupool %.1f, nvidia-smi dmon %.1f" % (label, mean(a), mean(b)))
        if floor is not None and mean(a) < floor:
            problems.append("%s: %.1f on average under a matrix-product loop (expected >= %s)" % (
                label, mean(a), floor))

    compare("utilization_pct", "util_pct", "sm", 20, 0.0, None if ctx.fake else 50)
    # NVML's v1 memory figure includes what the driver reserves; dmon may not.
    compare("memory_used_mib", "mem_used_mib", "fb", 1024, 0.03)
    compare("power_w", "power_w", "pwr", 40, 0.15)

    # The job's process: seen by the sampler on its GPU, attributed to its job, and in
    # nvidia-smi's list of compute apps with about the same memory.
    procs = [p for s in mine for p in s.get("processes", []) if p.get("pid") == pid]
    attributed = [p for p in procs if p.get("job_id") == jid]
    others = sorted({p.get("job_id", 0) for p in procs if p.get("job_id") != jid})
    smi_mem = [float(r[1]) for rows in apps for r in rows
               if len(r) >= 3 and r[0] == str(pid) and re.match(r"^[0-9.]+$", r[1])]
    smi_pids = sorted({r[0] for rows in apps for r in rows if r})
    ours_mem = [p["used_mib"] for p in procs if p.get("used_mib") is not None]
    ours_util = [p["util_pct"] for p in procs if p.get("util_pct") is not None]
    details["process"] = {
        "pid": pid, "rounds_seen": len(procs), "rounds_attributed_to_job": len(attributed),
        "other_job_ids": others, "nvidia_smi_pids": smi_pids,
        "used_mib": {"gpupool_median": statistics.median(ours_mem) if ours_mem else None,
                     "nvidia-smi": smi_mem},
        "util_pct_mean": round(mean(ours_util), 1) if ours_util else None}
    if not procs:
        problems.append("the job's process %d never appeared in the sampler's process list" % pid)
    elif not attributed:
        problems.append("the job's process %d was never attributed to job %d (job ids seen: %s)" % (
            pid, jid, others))
    if str(pid) not in smi_pids:
        problems.append("nvidia-smi --query-compute-apps did not list the job's process %d (it "
                        "listed %s)" % (pid, smi_pids or "none"))
    elif smi_mem and ours_mem and not close(statistics.median(ours_mem), smi_mem[-1], 256, 0.10):
        problems.append("process memory: gpupool %s MiB, nvidia-smi %s MiB" % (
            statistics.median(ours_mem), smi_mem[-1]))

    # The pool saw it too: the job's utilisation from the agent's telemetry.
    util = j.get("gpu_util") or {}
    details["pool_job_gpu_util"] = util
    details["job_state"] = j["state"]
    details["work"] = {k: end.get(k) for k in ("seconds", "iterations", "tflops", "relative_error")}
    if j["state"] != "SUCCEEDED":
        problems.append("the job ended %s: %s" % (j["state"], j.get("reason")))
    if not util or not util.get("peak_pct"):
        problems.append("the pool recorded no GPU utilisation for the job")
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    return PASS, ("%d s matrix-product loop (%s TFLOPS on %s): utilisation %s vs dmon %s %%, memory %s vs "
                  "%s MiB, power %s vs %s W; process %d attributed to job %d in %d/%d rounds, "
                  "listed by nvidia-smi") % (
        burn, dev_str(end.get("tflops")), start.get("device"),
        dev_str(details["utilization_pct"]["gpupool_mean"]), dev_str(details["utilization_pct"]["dmon_mean"]),
        dev_str(details["memory_used_mib"]["gpupool_mean"]), dev_str(details["memory_used_mib"]["dmon_mean"]),
        dev_str(details["power_w"]["gpupool_mean"]), dev_str(details["power_w"]["dmon_mean"]),
        pid, jid, len(attributed), len(mine)), details


def torch_job_checks(ctx, name, j, start, end, problems, share=None):
    """What a finished torch_job.py must show: its GPU, and real work."""
    uuids = j["placement"][0]["gpu_uuids"] if j.get("placement") else []
    env = start.get("env") or {}
    seen = [u for u in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",") if u]
    if j["state"] != "SUCCEEDED":
        problems.append("%s ended %s: %s" % (name, j["state"], j.get("reason")))
    if len(uuids) != 1:
        problems.append("%s was placed on %s, not one GPU" % (name, uuids))
    if seen != uuids:
        problems.append("%s saw CUDA_VISIBLE_DEVICES=%s, not its GPU %s" % (name, seen, uuids))
    if share is not None and env.get("GPUPOOL_GPU_MILLI") != str(share):
        problems.append("%s saw GPUPOOL_GPU_MILLI=%s, not %s" % (name, env.get("GPUPOOL_GPU_MILLI"), share))
    if not ctx.fake:
        if not start.get("cuda_available"):
            problems.append("%s: torch.cuda.is_available() is false (torch %s, CUDA %s)" % (
                name, start.get("torch"), start.get("torch_cuda")))
        elif start.get("device_count") != 1:
            problems.append("%s: PyTorch sees %s GPUs, not exactly 1" % (name, start.get("device_count")))
        elif start.get("device_uuid") and uuids and start["device_uuid"].lower() != uuids[0].lower():
            problems.append("%s: PyTorch's GPU is %s, not the job's %s" % (name, start["device_uuid"], uuids[0]))
    if not end:
        problems.append("%s printed no result" % name)
    elif not end.get("iterations") or end.get("relative_error") is None or end["relative_error"] > 1e-2:
        problems.append("%s: no real work (iterations %s, relative error %s)" % (
            name, end.get("iterations"), end.get("relative_error")))


def check_pool_job(ctx):
    need_pool(ctx)
    need_torch(ctx)
    d = ctx.dir("pool-job")
    work = str(ctx.work_seconds)
    argv = [ctx.torch_python, ctx.job_script, "work", work]
    whole = submit(ctx, "nodecheck-gpus1", ["--gpus", "1"], argv)["id"]
    pair = [submit(ctx, "nodecheck-share-%d" % k, ["--gpu-share", "0.5"], argv)["id"] for k in (1, 2)]
    details = {"jobs": {"gpus1": whole, "share": pair}}
    problems = []
    follow_jobs(ctx, [whole] + pair, 100)
    results = {}
    for jid in [whole] + pair:
        j = save_job(ctx, d, jid)
        ev = events(logs(ctx, jid))
        results[jid] = (j, ev.get("start", {}), ev.get("end", {}))
        if ev.get("start", {}).get("torch", "") is None:
            raise CheckError("job %d could not import torch: %s" % (jid, ev["start"].get("error")))
    j, start, end = results[whole]
    torch_job_checks(ctx, "the --gpus 1 job %d" % whole, j, start, end, problems)
    details["gpus1"] = {"state": j["state"], "placement": j.get("placement"),
                        "sees": (start.get("env") or {}).get("CUDA_VISIBLE_DEVICES"),
                        "torch": start.get("torch"), "device": start.get("device"),
                        "device_name": start.get("device_name"), "device_uuid": start.get("device_uuid"),
                        "device_count": start.get("device_count"),
                        "tflops": end.get("tflops"), "relative_error": end.get("relative_error")}
    shared = []
    for k, jid in enumerate(pair):
        pj, ps, pe = results[jid]
        torch_job_checks(ctx, "the --gpu-share 0.5 job %d" % jid, pj, ps, pe, problems, share=500)
        shared.append({"id": jid, "state": pj["state"], "placement": pj.get("placement"),
                       "start_us": pj.get("start_time_us"), "end_us": pj.get("end_time_us"),
                       "tflops": pe.get("tflops")})
    details["share"] = shared
    a, b = results[pair[0]][0], results[pair[1]][0]
    if a["state"] == b["state"] == "SUCCEEDED":
        if not (max(a["start_time_us"], b["start_time_us"]) < min(a["end_time_us"], b["end_time_us"])):
            problems.append("the two halves did not run at the same time")
        if ctx.gpu_count == 1 and a["placement"][0]["gpu_uuids"] != b["placement"][0]["gpu_uuids"]:
            problems.append("the two halves were not placed on the one GPU")
        for x in (a, b):
            if x["placement"][0].get("gpu_milli") != 500:
                problems.append("job %d holds %s thousandths, not 500" % (x["id"], x["placement"][0].get("gpu_milli")))
    # Used GPU-hours, from the agent's telemetry: above zero once a sample came in. On
    # the shared GPU each half is charged what its own processes used, so the halves'
    # figures also say that the agent attributed their processes to them.
    deadline = time.time() + 15
    labels = {whole: "gpus1", pair[0]: "share %d" % pair[0], pair[1]: "share %d" % pair[1]}
    used = {}
    while True:
        used = {labels[jid]: (job(ctx, jid).get("gpu_util") or {}).get("used_gpu_hours")
                for jid in labels}
        if all((u or 0) > 0 for u in used.values()) or time.time() > deadline:
            break
        time.sleep(0.5)
    details["used_gpu_hours"] = used
    for label, u in used.items():
        if not u or u <= 0:
            problems.append("the %s job's used GPU-hours are %s, not above zero" % (label, u))
    used = used["gpus1"]
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    return PASS, ("--gpus 1 job saw exactly its GPU %s and did %s TFLOPS on %s; the --gpu-share 0.5 pair "
                  "ran together on %s; used GPU-hours %.6f") % (
        j["placement"][0]["gpu_uuids"][0], dev_str(end.get("tflops")), start.get("device"),
        a["placement"][0]["gpu_uuids"][0] if a.get("placement") else "?", used), details


def check_isolation(ctx):
    need_pool(ctx)
    if ctx.pool.get("no_standin"):
        raise Skip(ctx.pool["no_standin"])
    d = ctx.dir("isolation")
    rc, out, err = run(ctx.gpupool("gpus", "--json"), env=ctx.kit_env, timeout=30)
    if rc != 0:
        raise CheckError("gpupool gpus --json failed: %s" % tail(err, 500))
    nodes = {g["uuid"]: g["device_nodes"][0] for g in json.loads(out).get("gpus", [])
             if g.get("device_nodes")}
    if not nodes:
        raise CheckError("discovery names no GPU device node")
    argv = [ctx.python_self, ctx.job_script, "open", ",".join("%s=%s" % kv for kv in sorted(nodes.items()))]
    without = submit(ctx, "nodecheck-no-gpu", [], argv)["id"]
    with_gpu = submit(ctx, "nodecheck-gpu", ["--gpus", "1"], argv)["id"]
    problems = []
    details = {"device_nodes": nodes, "jobs": {"without_gpu": without, "with_gpu": with_gpu}}
    res = {}
    for jid in (without, with_gpu):
        wait_job(ctx, jid, FINAL, 40)
        j = save_job(ctx, d, jid)
        res[jid] = (j, events(logs(ctx, jid)).get("open"))
    for label, jid in (("without_gpu", without), ("with_gpu", with_gpu)):
        j, ev = res[jid]
        details[label] = {"state": j["state"], "reason": j.get("reason"),
                          "isolation": isolation_note(ctx, jid), "open": ev}
        if j["state"] != "SUCCEEDED" or ev is None:
            problems.append("the job %s ended %s without reporting: %s %s" % (
                label.replace("_", " "), j["state"], j.get("reason"), tail(logs(ctx, jid, "stderr"), 300)))
            continue
        granted = [x for x in ev["devices"] if x["granted"]]
        if len(granted) != (0 if label == "without_gpu" else 1):
            problems.append("the job %s was given %d of the GPUs (CUDA_VISIBLE_DEVICES=%r)" % (
                label.replace("_", " "), len(granted), (ev.get("env") or {}).get("CUDA_VISIBLE_DEVICES")))
        for x in ev["devices"]:
            if not x["granted"]:
                if x.get("opened"):
                    problems.append("the job %s opened %s, a GPU it was not given" % (
                        label.replace("_", " "), x["path"]))
                elif x.get("errno") != errno.EPERM:
                    problems.append("the job %s could not open %s, but for %s (%s), not the cgroup's "
                                    "EPERM" % (label.replace("_", " "), x["path"], x.get("errno_name"),
                                               x.get("error")))
            elif ctx.fake:
                # No driver backs the stand-in node: the cgroup let the open through when
                # it fails for anything but EPERM/EACCES (ENXIO).
                if not x.get("opened") and x.get("errno") in (errno.EPERM, errno.EACCES):
                    problems.append("the job with the GPU was refused %s: %s" % (x["path"], x.get("error")))
            elif not x.get("opened"):
                problems.append("the job with the GPU could not open its %s: %s (%s)" % (
                    x["path"], x.get("errno_name"), x.get("error")))
        if label == "without_gpu" and (ev.get("env") or {}).get("CUDA_VISIBLE_DEVICES") != "":
            problems.append("the job without GPU had CUDA_VISIBLE_DEVICES=%r" % (
                (ev.get("env") or {}).get("CUDA_VISIBLE_DEVICES")))
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    mine = [x for x in res[with_gpu][1]["devices"] if x["granted"]][0]
    got = "opened its %s" % mine["path"] if mine.get("opened") else \
        "got past the cgroup on %s (%s: no driver behind the stand-in node)" % (mine["path"], mine.get("errno_name"))
    return PASS, "a job without GPU got EPERM on %s (%s); a job with a GPU %s%s" % (
        ", ".join(sorted(nodes.values())), details["without_gpu"]["isolation"] or "?", got,
        " and EPERM on the others" if len(nodes) > 1 else ""), details


def check_enforcement(ctx):
    raise Skip("GPU sharing enforcement (compute and memory limits of a --gpu-share job) does not "
               "exist in gpupool yet: shares are accounted, not enforced (docs/status.md)")


def check_health(ctx):
    raise Skip("GPU health checks (draining a node on Xid, ECC or NVLink faults) do not exist in "
               "gpupool yet (docs/status.md)")


CHECK_FUNCS = {"discovery": check_discovery, "real-driver-tests": check_real_driver_tests,
               "xid": check_xid, "telemetry": check_telemetry, "pool-job": check_pool_job,
               "isolation": check_isolation, "enforcement": check_enforcement, "health": check_health}


def run_child(name, ctx_path, result_path):
    ctx = Context(read_json(ctx_path))
    started = time.time()
    try:
        status, summary, details = CHECK_FUNCS[name](ctx)
    except Skip as e:
        status, summary, details = SKIP, str(e), {}
    except CheckError as e:
        status, summary, details = FAIL, str(e), {}
    except Exception as e:  # a bug in the check itself: say so, with where
        status, summary, details = FAIL, "the check crashed: %r" % e, {"traceback": traceback.format_exc()}
    details = dict(details)
    details["summary"] = summary
    write_json(result_path, {"status": status, "details": details,
                             "child_seconds": round(time.time() - started, 3)})
    return 0


# ---- the orchestrator --------------------------------------------------------------------

class Orchestrator:
    def __init__(self, args):
        self.args = args
        self.kit = os.path.abspath(args.kit)
        self.out = os.path.abspath(args.out)
        self.started = time.time()
        self.deadline = self.started + args.budget
        self.results = []
        self.pool_proc = None
        self.pool = {}
        self.ctx = None
        # The children's context (it holds this process's environment, which is nobody's
        # business in a report that gets shared) and results: private, removed at the end.
        self.work = tempfile.mkdtemp(prefix="gpupool-nodecheck-work-")

    def left(self):
        return self.deadline - time.time()

    def detect(self):
        os.makedirs(self.out, exist_ok=True)
        python_self = os.path.realpath(sys.executable)
        info = {"kit": self.kit, "out": self.out, "python_self": python_self}
        nvidia_smi = shutil.which("nvidia-smi")
        mode = self.args.mode
        probe = None
        if mode in ("auto", "real"):
            env = kit_env(self.kit, False, self.out)
            rc, out, err = run([os.path.join(self.kit, "bin", "gpupool"), "gpus", "--backend", "nvml",
                                "--json"], env=env, timeout=30, save=os.path.join(self.out, "probe", "nvml"))
            gpus = []
            if rc == 0:
                try:
                    gpus = json.loads(out).get("gpus", [])
                except ValueError:
                    pass
            smi_gpus = 0
            if nvidia_smi:
                src, sout, _ = run([nvidia_smi, "-L"], timeout=30, save=os.path.join(self.out, "probe", "nvidia-smi-L"))
                smi_gpus = sum(1 for l in sout.splitlines() if l.startswith("GPU ")) if src == 0 else 0
            probe = {"nvml_gpus": len(gpus), "nvidia_smi": nvidia_smi, "nvidia_smi_gpus": smi_gpus,
                     "why": tail(err.strip(), 300) if not gpus else None}
            if mode == "auto":
                # Real when either sees a GPU: a kit whose gpupool cannot run here (or
                # cannot load NVML) must fail on a GPU machine, not pass in fake mode.
                mode = "real" if gpus or smi_gpus else "fake"
        fake = mode == "fake"
        info.update({"mode": mode, "fake": fake, "probe": probe, "nvidia_smi": nvidia_smi})
        if fake:
            os.makedirs(os.path.join(self.out, "fake"), exist_ok=True)
            shutil.copyfile(os.path.join(self.kit, "fake", "scenario.json"),
                            os.path.join(self.out, "fake", "scenario.json"))
        info["kit_env"] = kit_env(self.kit, fake, self.out)
        if fake:
            c = Context(info)
            set_fake_telemetry(c)
        # PyTorch: the python given, else python3 on PATH; jobs run it by absolute path.
        info["torch_python"], info["torch_reason"], info["torch"] = self.find_torch()
        info["job_script"] = os.path.join(self.kit, "share", "torch_job.py")
        info["burn_seconds"] = self.args.burn_seconds or (3 if fake else 30)
        info["work_seconds"] = self.args.work_seconds or (2 if fake else 5)
        # Jobs get the machine's library path (CUDA installs may need it), not the kit's.
        info["job_env_ld"] = os.environ.get("LD_LIBRARY_PATH", "")
        info["job_cpus"] = "1"
        info["gpu_count"] = 0
        info["pool"] = {}
        self.ctx = info

    def find_torch(self):
        candidates = [self.args.python] if self.args.python else [shutil.which("python3")]
        for py in candidates:
            if not py:
                continue
            py = shutil.which(py) or py
            rc, out, err = run([py, "-c", "import json, torch; print(json.dumps({'torch': torch.__version__, "
                                "'cuda': torch.cuda.is_available(), 'cuda_version': torch.version.cuda, "
                                "'devices': torch.cuda.device_count() if torch.cuda.is_available() else 0}))"],
                               timeout=90)
            if rc == 0:
                try:
                    return os.path.realpath(py), "", json.loads(out.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    pass
            last = (err.strip().splitlines() or ["exit %s" % rc])[-1]
            return None, "%s cannot import torch (%s); give one that can with --python" % (py, last), None
        return None, "no python3 on PATH; give one with PyTorch with --python", None

    # -- the pool --
    def start_pool(self):
        started = time.time()
        pool = {"started": now_iso()}
        self.pool = pool
        if os.geteuid() != 0:
            pool.update({"skip": True, "error": "the pool checks run `gpupool up` as root (they set up "
                         "job cgroups and device rules): run the kit as root"})
            return
        state = tempfile.mkdtemp(prefix="gpupool-nodecheck-", dir="/tmp")
        os.chmod(state, 0o755)
        pool["state_dir"] = state
        pool_dir = os.path.join(self.out, "pool")
        os.makedirs(pool_dir, exist_ok=True)
        cmd = [os.path.join(self.kit, "bin", "gpupool"), "up", "--config", "", "--state-dir", state,
               "--port", "0", "--telemetry-interval", "1", "--cdi-kind", CDI_KIND]
        if self.ctx["fake"]:
            # Stand-in /dev/nvidia0 and /dev/nvidiactl in a private mount namespace, so
            # the cgroup device rules can be checked without an NVIDIA driver.
            why = self.standin_possible()
            if why:
                pool["no_standin"] = "fake mode cannot make a stand-in /dev/nvidia0 here (%s), so " \
                                     "device isolation is not checked" % why
                cmd.append("--allow-unisolated-devices")
            else:
                # Its own directory, outside the state directory (removed recursively):
                # this one is only ever rmdir'ed.
                dev = tempfile.mkdtemp(prefix="gpupool-nodecheck-dev-", dir="/tmp")
                pool["standin_dev"] = dev
                cmd = ["sh", os.path.join(self.kit, "share", "standin-dev.sh"), dev] + cmd
        pool["command"] = cmd
        log = open(os.path.join(pool_dir, "pool.log"), "ab")
        self.pool_proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                          env=self.ctx["kit_env"], start_new_session=True)
        log.close()
        sock = os.path.join(state, "gpupool.sock")
        deadline = time.time() + min(POOL_START_S, max(5, self.left() - POOL_STOP_S))
        while True:
            if self.pool_proc.poll() is not None:
                pool["error"] = "gpupool up exited %s: %s" % (self.pool_proc.returncode, self.pool_log(800))
                return
            try:
                if os.path.exists(sock):
                    st, body = api(sock, "GET", "/v1/nodes", timeout=5)
                    up = [n for n in body.get("nodes", []) if n.get("state") == "up"] if st == 200 else []
                    if up and up[0].get("gpus"):
                        node = up[0]
                        pool.update({"socket": sock, "node": node["name"], "seconds": round(time.time() - started, 2),
                                     "gpus": [g["uuid"] for g in node["gpus"]], "pid": self.pool_proc.pid})
                        self.ctx["gpu_count"] = len(node["gpus"])
                        cpus = node.get("cpu_milli", 4000) / 1000.0
                        self.ctx["job_cpus"] = "1" if cpus >= 4 else "0.5"
                        break
            except (OSError, http.client.HTTPException, ValueError, AttributeError):
                pass
            if time.time() > deadline:
                pool["error"] = "the pool's node did not come up with its GPUs within %d s: %s" % (
                    POOL_START_S, self.pool_log(800))
                return
            time.sleep(0.1)

    def standin_possible(self):
        if not shutil.which("unshare") or not shutil.which("mount"):
            return "no unshare or mount"
        if os.path.exists("/dev/nvidia0"):
            return None
        rc, _, err = run(["unshare", "--mount", "--propagation", "private", "true"], timeout=10)
        return None if rc == 0 else "unshare --mount failed: %s" % err.strip()[:200]

    def pool_log(self, n):
        try:
            with open(os.path.join(self.out, "pool", "pool.log"), errors="replace") as f:
                return tail(f.read(), n)
        except OSError:
            return ""

    def cancel_jobs(self, wait_s=15):
        sock = self.pool.get("socket")
        if not sock or self.pool_proc is None or self.pool_proc.poll() is not None:
            return
        try:
            st, body = api(sock, "GET", "/v1/jobs?all=1&state=" + ACTIVE)
            ids = [j["id"] for j in body.get("jobs", [])] if st == 200 else []
            for jid in ids:
                api(sock, "POST", "/v1/jobs/%d/cancel" % jid)
            deadline = time.time() + wait_s
            while ids and time.time() < deadline:
                st, body = api(sock, "GET", "/v1/jobs?all=1&state=" + ACTIVE)
                if st != 200 or not body.get("jobs"):
                    break
                time.sleep(0.2)
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            pass

    def stop_pool(self):
        """Jobs cancelled, the pool stopped, then whatever outlived it killed: the job
        supervisors of this state directory and their jobs' cgroups; the CDI spec of the
        check's kind removed. Runs whatever state the pool is in."""
        if not self.pool:
            return
        stopped = time.time()
        self.cancel_jobs()
        notes = []
        p = self.pool_proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                notes.append("gpupool up ignored SIGTERM for 15 s: killed")
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        state = self.pool.get("state_dir")
        if state:
            notes += kill_leftovers(state)
            shutil.rmtree(state, ignore_errors=True)
        if self.pool.get("standin_dev"):
            try:
                os.rmdir(self.pool["standin_dev"])  # empty outside the namespace; never rmtree
            except OSError as e:
                notes.append("cannot remove %s: %s" % (self.pool["standin_dev"], e))
        spec = "/var/run/cdi/gpupool-%s.json" % re.sub(r"[^A-Za-z0-9._-]", "_", CDI_KIND)
        if os.path.exists(spec):
            try:
                os.unlink(spec)
                notes.append("removed the CDI spec %s left behind" % spec)
            except OSError as e:
                notes.append("cannot remove %s: %s" % (spec, e))
        self.pool["stop_seconds"] = round(time.time() - stopped, 2)
        self.pool["cleanup"] = notes

    # -- checks --
    def run_check(self, name):
        limit = LIMITS[name]
        reserve = POOL_STOP_S if self.pool.get("socket") or name in NEEDS_POOL else 5
        allowed = min(limit, self.left() - reserve)
        started = time.time()
        entry = {"name": name, "status": FAIL, "seconds": 0.0, "limit_s": limit, "fake": self.ctx["fake"]}
        if allowed < 3:
            entry.update({"status": SKIP, "details": {"summary": "not run: the run's %d s budget is spent"
                                                      % self.args.budget}})
            return entry
        if name in NEEDS_POOL and not self.pool:
            self.start_pool()
            self.ctx["pool"] = self.pool
            allowed = min(limit, self.left() - reserve)
        ctx_path = os.path.join(self.work, "context.json")
        result_path = os.path.join(self.work, name + ".result.json")
        write_json(ctx_path, self.ctx)
        if os.path.exists(result_path):
            os.unlink(result_path)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--context", ctx_path,
               "--result", result_path, "--out", self.out, "--kit", self.kit]
        err_path = os.path.join(self.work, name + ".stderr")
        with open(err_path, "wb") as err:
            child = subprocess.Popen(cmd, stdout=err, stderr=err, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
            timed_out = False
            try:
                child.wait(allowed)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(child)
            except BaseException:  # interrupted: the child (its own session) goes too
                kill_group(child)
                raise
        result = read_json(result_path)
        entry["seconds"] = round(time.time() - started, 2)
        if timed_out:
            entry["details"] = {"summary": "timed out: killed after %.0f s (its limit is %d s)" % (allowed, limit)}
        elif result is None:
            with open(err_path, errors="replace") as f:
                entry["details"] = {"summary": "the check died without a result (exit %s): %s" % (
                    child.returncode, tail(f.read(), 800))}
        else:
            entry["status"] = result["status"]
            entry["details"] = result["details"]
        if name in NEEDS_POOL:
            self.cancel_jobs()
        return entry

    def run(self):
        only = set(self.args.only.split(",")) if self.args.only else None
        try:
            self.detect()
            for name in CHECKS:
                if only and name not in only:
                    continue
                entry = self.run_check(name)
                self.results.append(entry)
                print("%-18s %-4s %6.1f s  %s" % (name, entry["status"].upper(), entry["seconds"],
                                                  entry["details"].get("summary", "")[:150]), flush=True)
        finally:
            self.stop_pool()
            self.write_report()
            shutil.rmtree(self.work, ignore_errors=True)
        return 1 if any(r["status"] == FAIL for r in self.results) else 0

    def host(self):
        h = {"hostname": socket.gethostname(), "kernel": platform.release(),
             "machine": platform.machine(), "glibc": " ".join(platform.libc_ver()),
             "euid": os.geteuid(), "python": sys.version.split()[0]}
        try:
            with open("/etc/os-release") as f:
                for line in f:
                    if line.startswith("PRETTY_NAME="):
                        h["os"] = line.split("=", 1)[1].strip().strip('"')
        except OSError:
            pass
        cg = "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else (
            "v1" if os.path.isdir("/sys/fs/cgroup/devices") else "none")
        h["cgroup"] = cg
        return h

    def write_report(self):
        c = self.ctx or {}
        counts = {s: sum(1 for r in self.results if r["status"] == s) for s in (PASS, FAIL, SKIP)}
        report = {
            "schema": "gpupool.node-check/v1",
            "mode": c.get("mode"),
            "fake": c.get("fake"),
            "started_at": datetime.datetime.fromtimestamp(self.started, datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(time.time() - self.started, 2),
            "budget_s": self.args.budget,
            "kit": read_json(os.path.join(self.kit, "kit.json"), {}),
            "host": self.host(),
            "probe": c.get("probe"),
            "torch": {"python": c.get("torch_python"), "info": c.get("torch"),
                      "reason": c.get("torch_reason") or None},
            "pool": self.pool or None,
            "counts": counts,
            "checks": self.results,
        }
        write_json(os.path.join(self.out, "report.json"), report)
        write(os.path.join(self.out, "report.md"), render_md(report))


def kill_group(p):
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def kill_leftovers(state):
    """The supervisors (`gpupool agent-shim --job-dir STATE/jobs/...`) of this state
    directory that outlived the pool, then the processes left in their jobs' cgroups, and
    the cgroups. Found by their exact state directory, never by a broad name."""
    notes = []
    shims = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"agent-shim" in b" ".join(argv[:3]) and any(a.startswith(state.encode() + b"/") for a in argv):
            shims.append(int(pid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in shims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + 5
        while time.time() < deadline and any(os.path.exists("/proc/%d" % p) for p in shims):
            time.sleep(0.1)
    if shims:
        notes.append("stopped %d job supervisor(s) that outlived the pool" % len(shims))
    dirs = []
    for top, _, files in os.walk(state):
        if "shim.json" in files:
            rec = read_json(os.path.join(top, "shim.json"), {})
            dirs += [x for x in rec.get("cgroup_dirs", []) if "/gpupool/job-" in x and ".." not in x]
    for cg in dirs:
        if not os.path.isdir(cg):
            continue
        try:
            with open(os.path.join(cg, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.time() + 5
        while True:
            try:
                os.rmdir(cg)
                notes.append("removed the job cgroup %s" % cg)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if time.time() > deadline:
                    notes.append("cannot remove the job cgroup %s: %s" % (cg, e))
                    break
                time.sleep(0.1)
    return notes


def render_md(r):
    lines = ["# gpupool node check: %s" % (r["host"].get("hostname")), ""]
    if r.get("fake"):
        lines += ["**FAKE MODE**: no usable NVIDIA GPU here (or `--mode fake`). Every result below "
                  "comes from the fake libnvidia-ml and fake nvidia-smi of the kit; it proves the "
                  "kit runs, not that a GPU works.", ""]
    kit = r.get("kit") or {}
    torch = r.get("torch") or {}
    lines += ["- mode: %s; %d pass, %d fail, %d skip; %.1f s (budget %d s)" % (
        r.get("mode"), r["counts"]["pass"], r["counts"]["fail"], r["counts"]["skip"], r["seconds"],
        r["budget_s"]),
        "- kit: %s (%s), built %s on %s" % (kit.get("version"), kit.get("commit"), kit.get("built_at"),
                                           kit.get("built_on")),
        "- host: %s, kernel %s, %s, cgroup %s" % (r["host"].get("os"), r["host"].get("kernel"),
                                                   r["host"].get("glibc"), r["host"].get("cgroup")),
        "- PyTorch: %s" % ("%s with %s" % (torch.get("python"), json.dumps(torch.get("info")))
                           if torch.get("python") else torch.get("reason")),
        "", "| check | status | seconds | summary |", "|---|---|---|---|"]
    for c in r["checks"]:
        s = c["details"].get("summary", "").replace("|", "\\|").replace("\n", " ")
        lines.append("| %s | %s%s | %.1f | %s |" % (c["name"], c["status"].upper(),
                                                    " (fake)" if c.get("fake") else "", c["seconds"], s))
    lines.append("")
    for c in r["checks"]:
        lines += ["## %s: %s" % (c["name"], c["status"].upper()), "", c["details"].get("summary", ""), ""]
        for k, v in c["details"].items():
            if k == "summary":
                continue
            text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
            if len(text) > 1200:
                text = text[:1200] + "..."
            lines.append("- %s: `%s`" % (k, text.replace("`", "'")))
        lines.append("")
    if r.get("pool"):
        lines += ["## pool", "", "```", json.dumps(r["pool"], indent=2), "```", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(prog="run.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for report.json, report.md and the captures")
    ap.add_argument("--kit", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("auto", "real", "fake"), default="auto",
                    help="real: the machine's driver and GPUs; fake: the kit's fake NVML; "
                         "auto (default): real when NVML shows a GPU")
    ap.add_argument("--python", help="a python3 that imports torch, for the jobs (default: python3 on PATH)")
    ap.add_argument("--only", help="comma list of checks to run (default: all): " + ",".join(CHECKS))
    ap.add_argument("--budget", type=int, default=DEFAULT_BUDGET_S,
                    help="seconds the whole run may take (default %d)" % DEFAULT_BUDGET_S)
    ap.add_argument("--burn-seconds", type=int, default=0,
                    help="length of the telemetry check's matrix-product loop (default 30; fake 3)")
    ap.add_argument("--work-seconds", type=int, default=0,
                    help="length of each pool job's work (default 5; fake 2)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--context", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run_child(args.child, args.context, args.result)
    if args.only:
        unknown = [c for c in args.only.split(",") if c not in CHECKS]
        if unknown:
            ap.error("--only: unknown check(s) %s; the checks are %s" % (",".join(unknown), ",".join(CHECKS)))
    if os.path.isdir(args.out) and os.listdir(args.out):
        ap.error("--out %s is not empty: give a new directory, so that no old capture is mistaken "
                 "for this run's" % args.out)
    o = Orchestrator(args)

    def stop(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        return o.run()
    except KeyboardInterrupt:
        print("node check: interrupted; the pool was stopped and the report written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
