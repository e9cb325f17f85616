#!/usr/bin/env python3
"""What one queued job costs the controller (issue 25 item 7, queue flooding): bytes in the
SQLite store and controller RSS per job, for array elements with a realistic submitting
environment (40 variables, as a login shell on a GPU cluster has: a 2,041-byte
submission).

    python3 bench/pool/job_bytes.py [--jobs 10000] [--array 1000] [--env-bytes N]
                                    [--kinds arrays,single] [--gpupool BIN]

Starts `gpupool server` (no agents: every job stays queued), submits --jobs elements as
arrays of --array over the Unix socket, reads the server's VmRSS, restarts it and reads
its VmRSS once it has loaded the queue, stops it, VACUUMs the database and divides its
size (less the size of an empty one) by the number of jobs. Also submits --jobs single
jobs (each its own spec) into a second fresh server, for the per-job figure of jobs that
share nothing. --env-bytes adds variables of up to 60,000 bytes to the environment, about
N bytes in all (a 0.9 MB environment: --env-bytes 900000). A submission the server
refuses (a bound: HTTP 413 or 429) ends the run; the row says after how many jobs and why.
"""
import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gang_start  # noqa: E402  (find_gpupool)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "testlib"))
from pooltest import UnixConnection  # noqa: E402  (tests/testlib)


def realistic_env():
    """40 variables, the kind `env` shows in a login shell with CUDA and conda set up."""
    home = "/home/alice"
    conda = home + "/miniconda3/envs/train"
    env = {
        "HOME": home, "USER": "alice", "LOGNAME": "alice", "SHELL": "/bin/bash",
        "LANG": "en_US.UTF-8", "LC_ALL": "en_US.UTF-8", "LC_CTYPE": "en_US.UTF-8",
        "TERM": "xterm-256color", "PWD": home + "/projects/llm-finetune",
        "HOSTNAME": "login01.cluster.example.org",
        "PATH": ":".join([conda + "/bin", home + "/miniconda3/condabin", "/usr/local/cuda-12.4/bin",
                          home + "/.local/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                          "/usr/bin", "/sbin", "/bin"]),
        "LD_LIBRARY_PATH": ":".join(["/usr/local/cuda-12.4/lib64",
                                     "/usr/local/cuda-12.4/extras/CUPTI/lib64",
                                     conda + "/lib", "/usr/lib/x86_64-linux-gnu"]),
        "CUDA_HOME": "/usr/local/cuda-12.4", "CUDA_PATH": "/usr/local/cuda-12.4",
        "CONDA_PREFIX": conda, "CONDA_DEFAULT_ENV": "train", "CONDA_SHLVL": "2",
        "CONDA_EXE": home + "/miniconda3/bin/conda",
        "CONDA_PYTHON_EXE": home + "/miniconda3/bin/python",
        "CONDA_PREFIX_1": home + "/miniconda3",
        "PYTHONPATH": home + "/projects/llm-finetune/src:" + home + "/projects/common",
        "HF_HOME": "/scratch/alice/hf", "TRANSFORMERS_CACHE": "/scratch/alice/hf/transformers",
        "TORCH_HOME": "/scratch/alice/torch", "WANDB_PROJECT": "llm-finetune",
        "WANDB_ENTITY": "alice-lab", "WANDB_DIR": "/scratch/alice/wandb",
        "OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "8", "NCCL_DEBUG": "WARN",
        "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "ib0",
        "SSH_CONNECTION": "10.1.2.3 52344 10.1.0.10 22", "SSH_CLIENT": "10.1.2.3 52344 22",
        "SSH_TTY": "/dev/pts/3", "EDITOR": "vim",
        "LESSOPEN": "| /usr/bin/lesspipe %s",
        "LS_COLORS": "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:"
                     "cd=40;33;01:or=40;31;01:mi=00:su=37;41:sg=30;43:ca=00:tw=30;42:ow=34;42:"
                     "st=37;44:ex=01;32:*.tar=01;31:*.tgz=01;31:*.zip=01;31:*.gz=01;31:"
                     "*.bz2=01;31:*.xz=01;31:*.zst=01;31:*.jpg=01;35:*.png=01;35:*.mp4=01;35",
        "XDG_RUNTIME_DIR": "/run/user/1000", "XDG_SESSION_ID": "4711",
    }
    assert len(env) == 40, len(env)
    return env


def request(sock, method, path, body=None):
    c = UnixConnection(sock, timeout=120)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def vacuumed_size(db):
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.execute("VACUUM")
    c.close()
    return os.path.getsize(db)


def padded_env(env_bytes):
    """realistic_env() and PAD0, PAD1, ... of up to 60,000 bytes, about env_bytes in all."""
    env = realistic_env()
    left = env_bytes - sum(len(k) + len(v) + 2 for k, v in env.items())
    i = 0
    while left > 0:
        n = min(60000, left)
        env["PAD%d" % i] = "x" * n
        left -= n + len("PAD%d" % i) + 2
        i += 1
    return env


def run(g, jobs, array, single, env_bytes=0):
    d = tempfile.mkdtemp(prefix="gp-bytes-", dir="/tmp")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "gpupool.sock")
    log = open(os.path.join(d, "server.log"), "ab")
    env = dict(os.environ, GPUPOOL_SERVER="unix:" + sock)

    def start():
        p = subprocess.Popen([g, "server", "--state-dir", d, "--port", "0", "--config", ""],
                             stdout=log, stderr=log, start_new_session=True)
        while subprocess.run([g, "whoami"], env=env, capture_output=True).returncode:
            time.sleep(0.05)
        return p

    server = start()
    try:
        db = os.path.join(d, "gpupool.db")
        empty = vacuumed_size(db)
        rss0 = rss_kib(server.pid)
        spec = {"command": ["python3", "train.py", "--config", "configs/sweep.yaml"],
                "workdir": "/home/alice/projects/llm-finetune",
                "env": padded_env(env_bytes) if env_bytes else realistic_env(),
                "request": {"gpus": 1}}
        body_bytes = len(json.dumps(spec))
        t0 = time.time()
        made = 0
        refused = None
        while made < jobs:
            n = 1 if single else min(array, jobs - made)
            body = dict(spec)
            if single:
                body["env"] = dict(spec["env"], RUN_SEED=str(made))  # a spec of its own
            else:
                body["array"] = "0-%d" % (n - 1)
            st, data = request(sock, "POST", "/v1/jobs", body)
            if st in (413, 429):  # a bound: what the server held up to it is the figure
                refused = "HTTP %d after %d jobs: %s" % (
                    st, made, json.loads(data).get("error", "")[:200])
                break
            if st != 201:
                sys.exit("submit: HTTP %d %s" % (st, data[:300]))
            made += n
        submit_s = time.time() - t0
        rss1 = rss_kib(server.pid)
        server.terminate()
        server.wait(30)
        server = start()  # what it holds once it has loaded the queue from the store
        rss2 = rss_kib(server.pid)
        server.terminate()
        server.wait(30)
        size = vacuumed_size(db)
        row = {"kind": "single jobs" if single else "arrays of %d" % array, "jobs": made,
               "submission_body_bytes": body_bytes, "submit_s": round(submit_s, 1),
               "db_bytes_vacuumed": size,
               "bytes_per_job": round((size - empty) / made) if made else None,
               "rss_before_kib": rss0, "rss_after_kib": rss1, "rss_restarted_kib": rss2,
               "rss_bytes_per_job": round((rss1 - rss0) * 1024 / made) if made else None}
        if refused:
            row["refused"] = refused
        return row
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--array", type=int, default=1000)
    ap.add_argument("--env-bytes", type=int, default=0,
                    help="pad the environment to about this many bytes")
    ap.add_argument("--kinds", default="arrays,single",
                    help="which runs: arrays, single or both (comma list)")
    ap.add_argument("--gpupool")
    a = ap.parse_args()
    g = gang_start.find_gpupool(a.gpupool)
    kinds = a.kinds.split(",")
    rows = [run(g, a.jobs, a.array, single, a.env_bytes)
            for single in (False, True) if ("single" if single else "arrays") in kinds]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
