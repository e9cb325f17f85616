#!/usr/bin/python3
"""Dashboard first paint with 10,000 jobs in the store (issue 17 item 5's target: < 1 s).

  dashboard_paint.py [--gpupool BIN] [--jobs 10000] [--runs 5] [--out FILE]

Starts `gpupool up --fake bench/pool/node-8gpu.json --port PORT`, fills the 8 GPUs with
long `sleep` jobs, queues --jobs one-GPU jobs through POST /v1/jobs on the Unix socket (so
every one is a real, pending job in the store and in the controller), makes an admin
token, signs a headless Chromium (Selenium, Debian's chromium and chromium-driver) in to
the dashboard, and loads the queue page --runs times as fresh navigations, reading the
Performance API of each: first-contentful-paint, and the `queue-rendered` mark the page
sets once its table of jobs is in the DOM. Three views: every state (the default view,
newest 100), `state=PENDING` (served from the controller's memory) and page 51 of every
state (offset 5,000). Prints medians and maxima; --out writes the raw numbers as JSON.

Needs root (`gpupool up` runs the sleep jobs as their submitter) and /usr/bin/python3
with python3-selenium (scripts/install-deps.sh).
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "testlib"))
from pooltest import UnixConnection  # noqa: E402


def call(sock, method, path, body=None):
    conn = UnixConnection(sock, timeout=60)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"} if body is not None else {})
        r = conn.getresponse()
        payload = r.read()
    finally:
        conn.close()
    return r.status, json.loads(payload) if payload else None


def submit_many(sock, body, n, threads=4):
    """POSTs n copies of `body` from a few threads."""
    left = [n]
    errors = []
    lock = threading.Lock()

    def run():
        while True:
            with lock:
                if left[0] == 0 or errors:
                    return
                left[0] -= 1
            status, answer = call(sock, "POST", "/v1/jobs", body)
            if status != 201:
                with lock:
                    errors.append("submit answered %s: %s" % (status, str(answer)[:300]))

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError(errors[0])


def find_gpupool():
    for c in (os.path.join(ROOT, "build", "release", "gpupool"), shutil.which("gpupool")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpupool", default=find_gpupool())
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("dashboard_paint: needs root (gpupool up runs jobs as their submitter)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    state = tempfile.mkdtemp(prefix="gp-paint-", dir="/tmp")
    os.chmod(state, 0o755)
    sock = os.path.join(state, "gpupool.sock")
    port = free_port()
    env = dict(os.environ, GPUPOOL_SERVER="unix:" + sock)
    log = open(os.path.join(state, "up.log"), "ab")
    pool = subprocess.Popen([a.gpupool, "up", "--state-dir", state, "--port", str(port),
                             "--fake", os.path.join(HERE, "node-8gpu.json"),
                             # --jobs of one user: past the default bound of 10,000
                             "--max-queued-per-user", "1000000000"],
                            stdout=log, stderr=log, start_new_session=True)
    driver = None
    profile = tempfile.mkdtemp(prefix="gp-paint-chromium-")
    try:
        deadline = time.time() + 30
        while True:
            try:
                status, nodes = call(sock, "GET", "/v1/nodes")
                if status == 200 and any(n["state"] == "up" for n in nodes["nodes"]):
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("the pool did not come up")
            time.sleep(0.1)
        body = {"command": ["sleep", "3600"], "workdir": state, "request": {"gpus": 1}}
        submit_many(sock, body, 8, threads=1)
        t0 = time.time()
        submit_many(sock, dict(body, command=["true"]), a.jobs)
        fill_s = time.time() - t0
        print("queued %d jobs in %.1f s" % (a.jobs, fill_s), flush=True)
        token = subprocess.run([a.gpupool, "token", "create", "--user", "root"], env=env,
                               capture_output=True, text=True, check=True).stdout.strip()

        opts = webdriver.ChromeOptions()
        opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                    "--user-data-dir=" + profile, "--window-size=1400,1000",
                    "--disable-dev-shm-usage", "--no-first-run"):
            opts.add_argument(arg)
        driver = webdriver.Chrome(
            service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
            options=opts)
        base = "http://127.0.0.1:%d" % port
        driver.get(base + "/")
        signed = driver.execute_async_script(
            "const done = arguments[1];"
            "fetch('/ui/login', {method: 'POST', headers: {'Content-Type': 'application/json'},"
            " body: JSON.stringify({token: arguments[0]})}).then(r => done(r.status));", token)
        if signed != 200:
            raise RuntimeError("sign-in answered %s" % signed)

        # "#/queue" alone shows the active jobs (issue 30); every state is ?state=all.
        views = (("all states", "#/queue?state=all"), ("state=PENDING", "#/queue?state=PENDING"),
                 ("page 51 (offset 5000)", "#/queue?state=all&page=50"))
        results = {}
        for name, route in views:
            fcp, queue, rows = [], [], 0
            for i in range(a.runs):
                driver.get("about:blank")
                driver.get("%s/?run=%d%s" % (base, i, route))
                deadline = time.time() + 30
                while not driver.execute_script(
                        "return performance.getEntriesByName('queue-rendered').length"):
                    if time.time() > deadline:
                        raise RuntimeError("the queue never rendered (%s)" % name)
                    time.sleep(0.01)
                m = driver.execute_script(
                    "return [performance.getEntriesByName('first-contentful-paint')[0]?.startTime,"
                    " performance.getEntriesByName('queue-rendered')[0].startTime,"
                    " document.querySelectorAll('#queue-table tbody tr').length]")
                fcp.append(m[0])
                queue.append(m[1])
                rows = m[2]
            results[name] = {"first_contentful_paint_ms": fcp, "queue_rendered_ms": queue,
                             "rows": rows}
        print("\n%d jobs in the store; %d loads of each view in headless Chromium" %
              (a.jobs + 8, a.runs))
        print("%-24s %8s %8s %12s %12s" % ("view", "rows", "FCP p50", "table p50", "table max"))
        for name, r in results.items():
            print("%-24s %8d %6.0f ms %9.0f ms %9.0f ms" % (
                name, r["rows"], statistics.median(r["first_contentful_paint_ms"]),
                statistics.median(r["queue_rendered_ms"]), max(r["queue_rendered_ms"])))
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"jobs": a.jobs + 8, "runs": a.runs, "fill_s": fill_s,
                           "views": results}, f, indent=1)
    finally:
        if driver is not None:
            driver.quit()
        pool.terminate()
        try:
            pool.wait(15)
        except subprocess.TimeoutExpired:
            pool.kill()
            pool.wait()
        subprocess.run(["pkill", "-KILL", "-f", "agent-shim --job-dir " + state], check=False)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
