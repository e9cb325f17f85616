#!/usr/bin/env python3
"""Integration tests of the running pool: a real `gpupool up` / `server` / `agent` on a
fake 4-GPU node, real processes, the REST API over the Unix socket and TCP.

Usage: pool_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
Prints one line per test and a closing "N passed, N failed, N skipped" line.
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
NODE = os.path.join(HERE, "node-4gpu.json")
UUIDS = ["GPU-00000000-1111-2222-3333-00000000000%d" % i for i in range(4)]



def call(sock, method, path, body=None, raw=None, headers=None, timeout=30):
    conn = pooltest.UnixConnection(sock, timeout)
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    conn.request(method, path, body=data, headers=headers or {})
    r = conn.getresponse()
    payload = r.read()
    hdrs = dict(r.getheaders())
    conn.close()
    try:
        parsed = json.loads(payload) if payload and "json" in hdrs.get("Content-Type", "") else payload
    except ValueError:
        parsed = payload
    return r.status, parsed, hdrs


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Pool:
    """One `gpupool up` (or server + agent) under a temporary state directory."""

    def __init__(self, split=False, node_timeout=30, port=0):
        self.dir = pooltest.make_test_dir("gp-")
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.split = split
        self.node_timeout = node_timeout
        self.port = port
        self.server = None
        self.agent = None

    def start_server(self):
        cmd = [GPUPOOL, "server" if self.split else "up", "--state-dir", self.dir,
               "--port", str(self.port), "--node-timeout", str(self.node_timeout)]
        if not self.split:
            cmd += ["--fake", NODE]
        with open(os.path.join(self.dir, "server.log"), "ab") as log:
            self.server = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        self._wait_for_socket()

    def start_agent(self, token):
        cmd = [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--token", token,
               "--state-dir", self.dir, "--fake", NODE, "--node-name", "itest"]
        with open(os.path.join(self.dir, "agent.log"), "ab") as log:
            self.agent = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)

    def _wait_for_socket(self):
        deadline = time.time() + 20
        while time.time() < deadline:
            if os.path.exists(self.sock):
                try:
                    if call(self.sock, "GET", "/v1/whoami")[0] == 200:
                        return
                except OSError:
                    pass
            if self.server.poll() is not None:
                raise RuntimeError("server exited: " + self.log())
            time.sleep(0.05)
        raise RuntimeError("server did not come up: " + self.log())

    def wait_node(self):
        deadline = time.time() + 20
        while time.time() < deadline:
            st, body, _ = call(self.sock, "GET", "/v1/nodes")
            if st == 200 and any(n["state"] == "up" for n in body["nodes"]):
                return
            time.sleep(0.05)
        raise RuntimeError("no node registered: " + self.log())

    def log(self):
        out = ""
        for f in ("server.log", "agent.log"):
            p = os.path.join(self.dir, f)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    out += f.read()[-3000:]
        return out

    def kill9(self, which):
        proc = self.server if which == "server" else self.agent
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self):
        pooltest.stop_processes([self.agent, self.server])
        pooltest.kill_leftovers(self.dir)
        pooltest.remove_dir(self.dir)

    # --- API helpers ---
    def submit(self, command, **kw):
        body = {"command": command, "workdir": kw.pop("workdir", "/tmp")}
        req = {}
        for k in ("gpus", "gpu_milli", "cpu_milli", "tasks", "gpu_models"):
            if k in kw:
                req[k] = kw.pop(k)
        if req:
            body["request"] = req
        body.update(kw)
        st, resp, _ = call(self.sock, "POST", "/v1/jobs", body)
        if st != 201:
            raise AssertionError("submit failed: %s %s" % (st, resp))
        return resp["job"]["id"]

    def job(self, jid):
        st, resp, _ = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        assert st == 200, (st, resp)
        return resp["job"]

    def wait_state(self, jid, states, timeout=20):
        return pooltest.wait_job(self.job, jid, states, timeout, poll=0.05, log=self.log)

    def logs(self, jid, stream="stdout"):
        st, body, _ = call(self.sock, "GET", "/v1/jobs/%d/logs?stream=%s" % (jid, stream))
        assert st == 200, (st, body)
        return body.decode() if isinstance(body, bytes) else str(body)


FINAL = pooltest.FINAL_STATES


class PoolTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("the pool integration tests run jobs as other users and need root")
        self.pool = Pool()
        self.pool.start_server()
        self.pool.wait_node()

    def tearDown(self):
        self.pool.stop()

    def env_of(self, jid):
        env = {}
        for line in self.pool.logs(jid).splitlines():
            k, _, v = line.partition("=")
            env[k] = v
        return env

    def test_job_sees_exactly_its_gpus(self):
        jid = self.pool.submit(["sh", "-c", "env | grep -E '^(CUDA|NVIDIA|GPUPOOL)_' | sort"], gpus=2)
        j = self.pool.wait_state(jid, FINAL)
        self.assertEqual(j["state"], "SUCCEEDED", j)
        env = self.env_of(jid)
        got = env["CUDA_VISIBLE_DEVICES"].split(",")
        self.assertEqual(sorted(got), sorted(j["placement"][0]["gpu_uuids"]))
        self.assertEqual(len(got), 2)
        self.assertTrue(set(got) <= set(UUIDS))
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], env["CUDA_VISIBLE_DEVICES"])
        self.assertEqual(env["GPUPOOL_JOB_ID"], str(jid))

    def test_two_jobs_share_one_gpu(self):
        # Fill three GPUs so the two halves must share the last one.
        # Small CPU requests: the test machine may have fewer cores than the fake node GPUs.
        fill = [self.pool.submit(["sleep", "30"], gpus=1, cpu_milli=100) for _ in range(3)]
        for f in fill:
            self.pool.wait_state(f, ("RUNNING",))
        cmd = ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES $GPUPOOL_GPU_MILLI; sleep 2"]
        a = self.pool.submit(cmd, gpus=1, gpu_milli=500, cpu_milli=100)
        b = self.pool.submit(cmd, gpus=1, gpu_milli=500, cpu_milli=100)
        ja = self.pool.wait_state(a, ("RUNNING",) + FINAL)
        jb = self.pool.wait_state(b, ("RUNNING",) + FINAL)
        self.assertEqual(ja["placement"][0]["gpu_uuids"], jb["placement"][0]["gpu_uuids"])
        ja = self.pool.wait_state(a, FINAL)
        jb = self.pool.wait_state(b, FINAL)
        self.assertEqual((ja["state"], jb["state"]), ("SUCCEEDED", "SUCCEEDED"))
        # They overlapped in time: both shares on one GPU at once.
        self.assertLess(max(ja["start_time_us"], jb["start_time_us"]),
                        min(ja["end_time_us"], jb["end_time_us"]))
        self.assertEqual(self.pool.logs(a).split(), [ja["placement"][0]["gpu_uuids"][0], "500"])

    def test_cancel_stops_a_running_job(self):
        jid = self.pool.submit(["sleep", "100"], gpus=1)
        self.pool.wait_state(jid, ("RUNNING",))
        st, body, _ = call(self.pool.sock, "POST", "/v1/jobs/%d/cancel" % jid)
        self.assertEqual(st, 200, body)
        j = self.pool.wait_state(jid, FINAL, timeout=15)
        self.assertEqual(j["state"], "CANCELLED")
        st, body, _ = call(self.pool.sock, "POST", "/v1/jobs/%d/cancel" % jid)
        self.assertEqual(st, 409, body)

    def test_time_limit(self):
        jid = self.pool.submit(["sleep", "100"], gpus=1, time_limit_s=1)
        j = self.pool.wait_state(jid, FINAL, timeout=20)
        self.assertEqual(j["state"], "TIMEOUT", j)

    def test_failures_are_reported_with_reasons(self):
        bad_exit = self.pool.submit(["sh", "-c", "exit 3"])
        no_cmd = self.pool.submit(["/nonexistent/command-xyz"])
        no_dir = self.pool.submit(["true"], workdir="/nonexistent/dir-xyz")
        j = self.pool.wait_state(bad_exit, FINAL)
        self.assertEqual((j["state"], j["exit_code"]), ("FAILED", 3))
        j = self.pool.wait_state(no_cmd, FINAL)
        self.assertEqual(j["state"], "FAILED")
        self.assertIn("not found", j["reason"])
        j = self.pool.wait_state(no_dir, FINAL)
        self.assertEqual(j["state"], "FAILED")
        self.assertIn("/nonexistent/dir-xyz", j["reason"])

    def test_other_users(self):
        mine = self.pool.submit(["sleep", "30"])
        self.pool.wait_state(mine, ("RUNNING",))
        # A child process that becomes `nobody` talks to the same socket.
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                os.setgid(65534)
                os.setuid(65534)
                out = {}
                out["see"] = call(self.pool.sock, "GET", "/v1/jobs/%d" % mine)[0]
                out["cancel"] = call(self.pool.sock, "POST", "/v1/jobs/%d/cancel" % mine)[0]
                out["list"] = len(call(self.pool.sock, "GET", "/v1/jobs")[1]["jobs"])
                out["tokens"] = call(self.pool.sock, "POST", "/v1/tokens", {"user": "x"})[0]
                st, body, _ = call(self.pool.sock, "POST", "/v1/jobs",
                                   {"command": ["sh", "-c", "id -u"], "workdir": "/tmp"})
                out["submit"] = st
                out["id"] = body["job"]["id"] if st == 201 else 0
                os.write(w, json.dumps(out).encode())
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        out = json.loads(os.read(r, 65536))
        self.assertEqual(out["see"], 403)
        self.assertEqual(out["cancel"], 403)
        self.assertEqual(out["list"], 0)
        self.assertEqual(out["tokens"], 403)
        self.assertEqual(out["submit"], 201)
        self.assertEqual(self.pool.job(mine)["state"], "RUNNING")
        j = self.pool.wait_state(out["id"], FINAL)
        self.assertEqual(j["user"], "nobody")
        self.assertEqual(j["state"], "SUCCEEDED", j)
        self.assertEqual(self.pool.logs(out["id"]).strip(), "65534")
        st = os.stat(j["stdout_path"])
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (65534, 0o600))

    def test_bad_api_input_changes_nothing(self):
        before = len(call(self.pool.sock, "GET", "/v1/jobs?all=1")[1]["jobs"])
        cases = [
            ("malformed", b"{\"command\": [", 400),
            ("negative", json.dumps({"command": ["true"], "request": {"gpus": -1}}).encode(), 400),
            ("absurd", json.dumps({"command": ["true"], "request": {"gpus": 100000}}).encode(), 400),
            ("too big for the pool", json.dumps({"command": ["true"], "request": {"gpus": 64}}).encode(), 409),
            ("unknown field", json.dumps({"command": ["true"], "colour": "red"}).encode(), 400),
            ("server field", json.dumps({"command": ["true"], "state": "RUNNING"}).encode(), 400),
            ("wrong type", json.dumps({"command": "true"}).encode(), 400),
            ("not an object", b"[1, 2]", 400),
            ("10 MB", b"{\"command\": [\"" + b"x" * (10 << 20) + b"\"]}", 413),
        ]
        for name, raw, want in cases:
            st, body, _ = call(self.pool.sock, "POST", "/v1/jobs", raw=raw,
                               headers={"Content-Type": "application/json"})
            self.assertEqual(st, want, "%s: %s" % (name, body))
            if isinstance(body, dict):
                self.assertTrue(body.get("error"), name)
        self.assertEqual(call(self.pool.sock, "GET", "/v1/jobs/999999")[0], 404)
        self.assertEqual(call(self.pool.sock, "GET", "/v1/jobs?limit=abc")[0], 400)
        self.assertEqual(call(self.pool.sock, "DELETE", "/v1/jobs")[0], 400)
        after = len(call(self.pool.sock, "GET", "/v1/jobs?all=1")[1]["jobs"])
        self.assertEqual(before, after)

    def cli(self, *args):
        env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.pool.sock)
        return subprocess.run([GPUPOOL] + list(args), env=env, capture_output=True, text=True,
                              timeout=60)

    # Issue 25.6: the ids `gpupool queue` prints for an array's elements (ARRAY_INDEX) work
    # in every command that takes a job id, and cancelling the array after its first
    # element ended cancels the rest.
    def test_array_elements_by_the_ids_queue_prints(self):
        script = "echo element $GPUPOOL_ARRAY_TASK_ID; [ $GPUPOOL_ARRAY_TASK_ID = 0 ] || sleep 60"
        arr = self.pool.submit(["sh", "-c", script], gpus=1, cpu_milli=100, array="0-5%3")

        def elements():
            jobs = call(self.pool.sock, "GET", "/v1/jobs?state=PENDING,ASSIGNED,RUNNING,"
                        "SUCCEEDED,CANCELLED,FAILED")[1]["jobs"]
            return {j["array_index"]: j for j in jobs if j.get("array_id") == arr}

        # Element 0 ends, which lets element 3 start: 1-3 run, 4 and 5 wait.
        self.assertEqual(self.pool.wait_state(arr, FINAL)["state"], "SUCCEEDED")
        self.pool.wait_state(elements()[3]["id"], ("RUNNING",))
        queue = self.cli("queue")
        self.assertEqual(queue.returncode, 0, queue.stderr)
        for shown in ("%d_1" % arr, "%d_3" % arr, "%d_[4-5%%3]" % arr):
            self.assertIn(shown, queue.stdout)

        r = self.cli("show", "%d_0" % arr)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("element 0 of array %d" % arr, r.stdout)
        self.assertIn(": SUCCEEDED", r.stdout)
        r = self.cli("logs", "%d_0" % arr)
        self.assertEqual((r.returncode, r.stdout), (0, "element 0\n"), r.stderr)
        r = self.cli("exec", "--job", "%d_2" % arr, "--", "sh", "-c", "echo $GPUPOOL_ARRAY_TASK_ID")
        self.assertEqual((r.returncode, r.stdout), (0, "2\n"), r.stderr)
        r = self.cli("hold", "%d_[4-5]" % arr)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "Held job %d_4\nHeld job %d_5\n" % (arr, arr))
        self.assertEqual(elements()[5]["held_by"], "root")
        r = self.cli("release", "%d_5" % arr)
        self.assertEqual((r.returncode, r.stdout), (0, "Released job %d_5\n" % arr), r.stderr)
        # An element the array does not have: not found, naming it and what it has.
        r = self.cli("logs", "%d_9" % arr)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertEqual(r.stderr, "gpupool: array %d has no element 9 (it was submitted with "
                         "--array 0-5%%3)\n" % arr)

        r = self.cli("cancel", str(arr))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "Cancelled array %d: 2 queued and 3 running elements (the "
                         "running ones are being stopped; 1 had already ended)\n" % arr)
        for e in elements().values():
            self.pool.wait_state(e["id"], FINAL)
        self.assertEqual({i: e["state"] for i, e in elements().items()},
                         {0: "SUCCEEDED", 1: "CANCELLED", 2: "CANCELLED", 3: "CANCELLED",
                          4: "CANCELLED", 5: "CANCELLED"})
        r = self.cli("cancel", str(arr))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("array %d has already ended: none of its 6 elements is queued or running"
                      % arr, r.stderr)

    def test_usage_counts_gpu_hours(self):
        jid = self.pool.submit(["sleep", "1"], gpus=2)
        self.pool.wait_state(jid, FINAL)
        st, body, _ = call(self.pool.sock, "GET", "/v1/usage")
        self.assertEqual(st, 200, body)
        row = [r for r in body["rows"] if r["key"] == "root"][0]
        # 2 GPUs for about one second.
        self.assertGreater(row["gpu_hours"], 1.5 / 3600)
        self.assertLess(row["gpu_hours"], 10.0 / 3600)


class RecoveryTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        self.pool = None

    def tearDown(self):
        if self.pool:
            self.pool.stop()

    def test_controller_kill9_keeps_jobs_and_starts_nothing_twice(self):
        self.pool = Pool()
        self.pool.start_server()
        self.pool.wait_node()
        marker = os.path.join(self.pool.dir, "starts")
        jid = self.pool.submit(["sh", "-c", "echo x >> %s; sleep 3" % marker], gpus=1)
        self.pool.wait_state(jid, ("RUNNING",))
        self.pool.kill9("server")  # controller and local agent die; the job does not
        time.sleep(0.5)
        self.pool.start_server()
        j = self.pool.wait_state(jid, FINAL, timeout=30)
        self.assertEqual(j["state"], "SUCCEEDED", j)
        with open(marker) as f:
            self.assertEqual(f.read().count("x"), 1)

    def _split_pool(self, node_timeout=30):
        self.pool = Pool(split=True, node_timeout=node_timeout)
        self.pool.start_server()
        st, body, _ = call(self.pool.sock, "POST", "/v1/tokens", {"user": "itest", "kind": "node"})
        self.assertEqual(st, 201, body)
        self.token = body["token"]
        self.pool.start_agent(self.token)
        self.pool.wait_node()

    def test_agent_restart_readopts_running_jobs(self):
        self._split_pool()
        jid = self.pool.submit(["sleep", "3"], gpus=1)
        self.pool.wait_state(jid, ("RUNNING",))
        self.pool.kill9("agent")
        self.pool.start_agent(self.token)
        j = self.pool.wait_state(jid, FINAL, timeout=30)
        self.assertEqual(j["state"], "SUCCEEDED", j)

    def test_agent_restart_after_job_supervisor_died_reports_lost(self):
        self._split_pool()
        jid = self.pool.submit(["sleep", "60"], gpus=1)
        self.pool.wait_state(jid, ("RUNNING",))
        self.pool.kill9("agent")
        subprocess.run(["pkill", "-9", "-f", "agent-shim --job-dir " + self.pool.dir], check=False)
        self.pool.start_agent(self.token)
        j = self.pool.wait_state(jid, FINAL, timeout=30)
        self.assertEqual(j["state"], "LOST", j)
        self.assertTrue(j["reason"])

    def test_logs_come_from_the_node_and_survive_a_silent_agent(self):
        self._split_pool()
        jid = self.pool.submit(["sh", "-c", "echo out-line; echo err-line >&2"], gpus=1)
        j = self.pool.wait_state(jid, FINAL)
        self.assertEqual(j["state"], "SUCCEEDED", j)
        path = "/v1/jobs/%d/logs?stream=" % jid
        st, body, h = call(self.pool.sock, "GET", path + "stdout")
        self.assertEqual((st, body), (200, b"out-line\n"))
        self.assertEqual(h.get("X-Gpupool-Log-Source"), "node itest", h)
        self.assertEqual(h.get("X-Gpupool-Eof"), "1", h)
        st, body, h = call(self.pool.sock, "GET", path + "stderr&offset=4")
        self.assertEqual((st, body), (200, b"line\n"))
        self.assertEqual(h.get("X-Gpupool-Next-Offset"), "9", h)
        self.assertEqual(h.get("X-Gpupool-Log-Source"), "node itest", h)
        # The agent goes silent while its node still counts as up: the read waits for it
        # (5 s), then falls back to this machine's disk, where a one-machine pool has them.
        self.pool.kill9("agent")
        t0 = time.time()
        st, body, h = call(self.pool.sock, "GET", path + "stdout")
        self.assertEqual((st, body), (200, b"out-line\n"))
        self.assertEqual(h.get("X-Gpupool-Log-Source"), "local", h)
        self.assertGreaterEqual(time.time() - t0, 4.5)

    def test_silent_node_loses_jobs_and_requeues(self):
        self._split_pool(node_timeout=2)
        plain = self.pool.submit(["sleep", "60"], gpus=1)
        again = self.pool.submit(["sleep", "60"], gpus=1, requeue=True)
        self.pool.wait_state(plain, ("RUNNING",))
        self.pool.wait_state(again, ("RUNNING",))
        self.pool.kill9("agent")
        j = self.pool.wait_state(plain, ("LOST",), timeout=30)
        self.assertIn("stopped responding", j["reason"])
        j = self.pool.wait_state(again, ("PENDING",), timeout=30)
        self.assertIn("requeued", j["reason"])
        # The lost attempt stays charged (its tasks ran until the node was declared lost,
        # over 2 s): in the job, and in the usage while the job waits.
        runs = j.get("earlier_attempts", [])
        self.assertEqual(len(runs), 1, j)
        self.assertEqual((runs[0]["attempt"], runs[0]["ended_by"]), (1, "lost"), j)
        self.assertIn("stopped responding", runs[0]["reason"])
        self.assertGreater(runs[0]["gpu_hours"], 1.5 / 3600, j)
        st, body, _ = call(self.pool.sock, "GET", "/v1/usage?by=user")
        self.assertEqual(st, 200, body)
        row = [r for r in body["rows"] if r["key"] == j["user"]][0]
        self.assertEqual(row["jobs"], 2, body)  # the LOST job and the waiting one
        self.assertGreater(row["gpu_hours"], runs[0]["gpu_hours"] + 1.5 / 3600, body)
        env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.pool.sock)
        show = subprocess.run([GPUPOOL, "show", str(again)], env=env, capture_output=True,
                              text=True, timeout=60)
        self.assertRegex(show.stdout, r"Attempt 1: .*GPU-hours; lost: node .* stopped responding",
                         show.stdout + show.stderr)

    def test_a_lost_jobs_real_end_reported_late_is_recorded_and_charged(self):
        # adv4 findings 1 and 2 (docs/health.md, "An end reported late"): the agent dies,
        # its jobs are declared lost, their processes go on and exit 0; the agent returns.
        self._split_pool(node_timeout=2)
        plain = self.pool.submit(["sh", "-c", "sleep 6; echo finished-ok"], gpus=1)
        again = self.pool.submit(["sh", "-c", "sleep 6; echo finished-ok"], gpus=1,
                                 requeue=True)
        self.pool.wait_state(plain, ("RUNNING",))
        self.pool.wait_state(again, ("RUNNING",))
        self.pool.kill9("agent")
        lost = self.pool.wait_state(plain, ("LOST",), timeout=30)
        self.pool.wait_state(again, ("PENDING",), timeout=30)
        time.sleep(7)  # both processes have exited 0 by now
        self.pool.start_agent(self.token)
        # The requeued job is not run again: its lost attempt succeeded.
        j = self.pool.wait_state(again, FINAL, timeout=30)
        self.assertEqual(j["state"], "SUCCEEDED", j)
        self.assertEqual(j["attempt"], 1, j)
        self.assertIn("attempt 1 on node itest succeeded", j["reason"])
        run = j["earlier_attempts"][0]
        self.assertIn("exited with code 0", run["late_reason"])
        self.assertGreater(run["gpu_hours"], 5.5 / 3600, j)  # to its real end, not the loss
        # The LOST job stays LOST; its record says the process succeeded, and when.
        deadline = time.time() + 20
        while time.time() < deadline and "late_end_time_us" not in self.pool.job(plain):
            time.sleep(0.1)
        late = self.pool.job(plain)
        self.assertEqual(late["state"], "LOST", late)
        self.assertEqual(late.get("late_exit_code"), 0, late)
        self.assertGreater(late["late_end_time_us"] - late["start_time_us"], 5_500_000, late)
        self.assertEqual(late["end_time_us"], lost["end_time_us"], late)
        st, body, _ = call(self.pool.sock, "GET", "/v1/usage?by=user")
        self.assertEqual(st, 200, body)
        row = [r for r in body["rows"] if r["key"] == late["user"]][0]
        self.assertGreater(row["gpu_hours"], 11 / 3600, body)  # both charged to their real end
        env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.pool.sock)
        show = subprocess.run([GPUPOOL, "show", str(plain)], env=env, capture_output=True,
                              text=True, timeout=60)
        self.assertRegex(show.stdout, r"Late end: .*exited with code 0, reported after the loss",
                         show.stdout + show.stderr)


class StopTest(unittest.TestCase):
    # Issue 15 A.5: "Ctrl-C on `up` takes 7-11 s and prints nothing".
    def test_ctrl_c_stops_up_at_once_and_says_so(self):
        if os.geteuid() != 0:
            self.skipTest("runs jobs as other users and needs root")
        pool = Pool()
        try:
            pool.start_server()
            pool.wait_node()
            job = pool.submit(["sleep", "30"], gpus=1)
            pool.wait_state(job, ("RUNNING",))
            t0 = time.time()
            pool.server.send_signal(signal.SIGINT)
            pool.server.wait(20)
            elapsed = time.time() - t0
            self.assertLess(elapsed, 5, pool.log())
            self.assertIn("gpupool: stopping (running jobs keep running", pool.log())
        finally:
            pool.stop()


class TokenTest(unittest.TestCase):
    def test_tcp_needs_a_token(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        port = free_port()
        pool = Pool(port=port)
        try:
            pool.start_server()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/v1/jobs")
            self.assertEqual(conn.getresponse().status, 401)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/v1/jobs", headers={"Authorization": "Bearer gpt_wrong"})
            self.assertEqual(conn.getresponse().status, 401)  # unknown token (docs/api.md)
            st, body, _ = call(pool.sock, "POST", "/v1/tokens", {"user": "nobody"})
            self.assertEqual(st, 201, body)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/v1/whoami", headers={"Authorization": "Bearer " + body["token"]})
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(r.read())["user"], "nobody")
        finally:
            pool.stop()


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    sys.exit(1 if failed else 0)
