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
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

from nodecheck_lib import (ACTIVE, FAIL, PASS, SKIP, api, CheckError, Context, kit_env, now_iso,
                           read_json, run, set_fake_telemetry, Skip, tail, write, write_json)
from nodecheck_checks import CHECK_FUNCS

CHECKS = ["discovery", "real-driver-tests", "xid", "telemetry", "pool-job", "isolation",
          "enforcement", "health", "nvml-memory-limit", "gpu-mem-watch"]
NEEDS_POOL = {"telemetry", "pool-job", "isolation", "enforcement", "health"}
# Seconds each check may take before it is killed. The run's budget caps the whole: a
# check gets at most what is left of it (less the pool's stop), so a run never passes 8
# minutes even when every check hangs.
LIMITS = {"discovery": 40, "real-driver-tests": 60, "xid": 30, "telemetry": 110,
          "pool-job": 120, "isolation": 50, "enforcement": 60, "health": 60,
          "nvml-memory-limit": 90, "gpu-mem-watch": 75}
POOL_START_S = 30
POOL_STOP_S = 30
DEFAULT_BUDGET_S = 450
CDI_KIND = "gpupool-nodecheck.local/gpu"


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
                    # The path as given, links kept: a virtual environment's python is a
                    # link whose own folder (pyvenv.cfg) makes its packages importable;
                    # the file it points to would run without them.
                    return os.path.abspath(py), "", json.loads(out.strip().splitlines()[-1])
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
