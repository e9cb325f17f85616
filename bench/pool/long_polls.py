#!/usr/bin/env python3
"""Agents' long polls held by a real `gpupool server` (issue 31: no thread per waiting
agent). python3 stdlib only.

  sudo python3 bench/pool/long_polls.py [--gpupool BIN] [--polls 5000] [--rounds 2]
      [--out FILE]

Starts `gpupool server` (SQLite store, node timeout an hour so that a poll may wait its
full 60 s), registers --polls nodes without GPUs through the agent protocol (root on the
Unix socket), then opens one connection per node and sends each an agent's long poll
(GET /v1/agent/work?node=N&wait_ms=60000), all at once, and leaves them waiting. It
reports the server's threads and RSS (from /proc/PID/status) idle, with the polls
waiting, and after the clients all hung up; how many polls were held (not answered within
the settling time) and what the others were answered. It does so --rounds times: a
waiter that outlived its client would show as RSS that grows from round to round.
"""
import argparse
import json
import os
import resource
import select
import socket
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


def status_of(pid):
    """The server's threads, RSS (MiB) and open descriptors now."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "Threads":
                out["threads"] = int(value)
            elif key == "VmRSS":
                out["rss_mib"] = round(int(value.split()[0]) / 1024.0, 1)
    out["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    return out


def settle(pid, seconds=3.0):
    """Waits until the server's thread count has not moved for `seconds`."""
    last, since = None, time.time()
    deadline = time.time() + 60
    while time.time() < deadline:
        now = status_of(pid)["threads"]
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= seconds:
            break
        time.sleep(0.2)
    return status_of(pid)


def early_answers(conns):
    """Reads what the server answered already; returns {status: count}."""
    codes = {}
    p = select.poll()
    by_fd = {c.fileno(): c for c in conns}
    for fd in by_fd:
        p.register(fd, select.POLLIN)
    ready = [by_fd[fd] for fd, _ in p.poll(0)]
    for c in ready:
        try:
            head = c.recv(64).decode("latin-1")
        except OSError:
            head = ""
        code = head.split(" ")[1] if head.startswith("HTTP/") else "closed"
        codes[code] = codes.get(code, 0) + 1
    return codes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpupool", default=os.path.join(ROOT, "build", "release", "gpupool"))
    ap.add_argument("--polls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--wait-ms", type=int, default=60000, help="each poll's wait_ms")
    ap.add_argument("--pause", type=float, default=0, help="seconds between rounds")
    ap.add_argument("--out")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("long_polls.py: run as root (it registers nodes on the Unix socket)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if not 1 <= a.polls <= (hard - 200) // 2:
        ap.error("--polls 1..%d (the open-files limit, %d, counts both ends)"
                 % ((hard - 200) // 2, hard))
    d = pooltest.make_test_dir("gp-polls-")
    sock = os.path.join(d, "gpupool.sock")
    log = open(os.path.join(d, "server.log"), "ab")
    proc = subprocess.Popen([a.gpupool, "server", "--config", "", "--state-dir", d, "--port", "0",
                             "--node-timeout", "3600"], stdout=log, stderr=log,
                            start_new_session=True)
    conns = []
    try:
        deadline = time.time() + 30
        while not os.path.exists(sock):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("gpupool server did not start (see %s/server.log)" % d)
            time.sleep(0.05)
        for n in range(a.polls):
            name = "n%05d" % n
            st, body = call(sock, "POST", "/v1/agent/register", {
                "protocol": "1.3", "node": name,
                "info": {"schema": "gpupool.node/v1", "hostname": name, "gpus": []},
                "cpu_milli": 128000, "memory_mib": 1024 * 1024, "running": []})
            if st != 200:
                raise RuntimeError("registering %s answered %d: %s" % (name, st, body[:300]))
        idle = settle(proc.pid)
        rounds = []
        for r in range(a.rounds):  # a second round shows what the first left behind
            if r > 0:
                time.sleep(a.pause)
            t0 = time.time()
            for n in range(a.polls):
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.connect(sock)
                c.sendall(("GET /v1/agent/work?node=n%05d&wait_ms=%d HTTP/1.1\r\n"
                           "Host: x\r\nConnection: close\r\n\r\n" % (n, a.wait_ms)).encode())
                conns.append(c)
            send_s = time.time() - t0
            waiting = settle(proc.pid)
            answered = early_answers(conns)
            for c in conns:
                c.close()
            conns = []
            rounds.append({"held": a.polls - sum(answered.values()), "answered_early": answered,
                           "send_s": round(send_s, 2), "waiting": waiting,
                           "after_hangup": settle(proc.pid)})
        out = {"polls": a.polls, "idle": idle, "rounds": rounds}
        print(json.dumps(out, indent=1))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        for c in conns:
            c.close()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
