#!/usr/bin/env python3
"""Interactive sessions (issue 15 B.6): how a `gpupool run --pty` terminal feels, measured
side by side with the same command on a local pseudo-terminal, in one run.

    sudo python3 bench/pool/interactive.py [--keys 200] [--mib 64] [--gpupool BIN]

  keystroke echo: one byte written to the user's terminal until its echo comes back
      (through the client, the controller, the agent and the remote terminal's line
      discipline, and back); p50/p90/p99 over --keys keys, typed one at a time.
  throughput: --mib MiB piped through `gpupool run -- cat` (no terminal) and back.
Both against a local baseline: the same command on a pseudo-terminal of this process,
and `cat` between two pipes. Prints one JSON object. Needs root (the agent runs jobs as
their users).
"""
import argparse
import json
import os
import pty
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE = os.path.join(ROOT, "tests", "integration", "node-4gpu.json")


def find_gpupool(flag):
    for c in ([flag] if flag else []) + [os.path.join(ROOT, "build", "release", "gpupool"),
                                          shutil.which("gpupool") or ""]:
        if c and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit("interactive: no gpupool binary (build it, or pass --gpupool)")


def read_until(fd, want, timeout=30):
    seen = b""
    deadline = time.time() + timeout
    while want not in seen:
        left = deadline - time.time()
        if left <= 0:
            raise RuntimeError("%r never came; saw %r" % (want, seen[-200:]))
        r, _, _ = select.select([fd], [], [], left)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError("EOF before %r" % want)
            seen += chunk
    return seen


def echo_latencies(argv, env, keys):
    """Starts argv on a new pseudo-terminal; types `keys` bytes one at a time and times
    each echo. The command must print READY first and echo what it is given."""
    pid, master = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    try:
        read_until(master, b"READY")
        times = []
        for i in range(keys):
            c = bytes([ord("a") + i % 26])
            t0 = time.perf_counter()
            os.write(master, c)
            read_until(master, c, timeout=10)
            times.append((time.perf_counter() - t0) * 1000)
        return times
    finally:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(master)


def throughput(argv, env, mib):
    data = os.urandom(1 << 20) * mib
    t0 = time.perf_counter()
    r = subprocess.run(argv, input=data, capture_output=True, env=env, timeout=600)
    took = time.perf_counter() - t0
    if r.returncode != 0 or r.stdout != data:
        raise RuntimeError("throughput run failed: rc %d, %d bytes back; %s" %
                           (r.returncode, len(r.stdout), r.stderr[-500:]))
    return mib / took


def summary(ms):
    ms = sorted(ms)
    pick = lambda q: round(ms[min(len(ms) - 1, int(q * len(ms)))], 2)
    return {"p50_ms": pick(0.5), "p90_ms": pick(0.9), "p99_ms": pick(0.99),
            "mean_ms": round(statistics.mean(ms), 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--gpupool")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("interactive: needs root (the agent runs jobs as their users)")
    g = find_gpupool(args.gpupool)
    d = tempfile.mkdtemp(prefix="gp-ibench-", dir="/tmp")
    os.chmod(d, 0o755)
    env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(d, "gpupool.sock"))
    log = open(os.path.join(d, "server.log"), "ab")
    server = subprocess.Popen([g, "up", "--state-dir", d, "--port", "0", "--fake", NODE],
                              stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.time() + 30
        while " up " not in subprocess.run([g, "nodes"], capture_output=True, text=True,
                                           env=env).stdout:
            if time.time() > deadline:
                sys.exit("interactive: the pool did not come up")
            time.sleep(0.1)
        # `stty -icanon` so each key is echoed (and read) at once, as in an editor.
        shell = "stty -icanon; echo READY; cat > /dev/null"
        local = echo_latencies(["sh", "-c", shell], env, args.keys)
        pool = echo_latencies([g, "run", "--pty", "-q", "--", "sh", "-c", shell], env, args.keys)
        local_mibs = throughput(["cat"], env, args.mib)
        pool_mibs = throughput([g, "run", "-q", "--", "cat"], env, args.mib)
        out = {
            "keys": args.keys,
            "echo_local_pty": summary(local),
            "echo_gpupool_run_pty": summary(pool),
            "throughput_mib": args.mib,
            "throughput_local_cat_mib_s": round(local_mibs, 1),
            "throughput_gpupool_run_cat_mib_s": round(pool_mibs, 1),
            "cpus": os.cpu_count(),
        }
        print(json.dumps(out, indent=2))
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
        subprocess.run(["pkill", "-9", "-f", "agent-shim --job-dir " + d], check=False)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
