#!/usr/bin/env python3
"""Attacks through job fields, the state directory and waiting requests (issue 12, items
1, 4, 7 and 10's variable names), each run as an unprivileged local user against a real
`gpupool up`. Every test asserts the refusal, its message, and that nothing changed.

Usage: test_jobs_and_files.py PATH_TO_GPUPOOL
"""
import os
import signal
import stat
import subprocess
import threading
import time
import unittest

import seclib


class ImageFieldTest(seclib.PoolTestCase):
    """Item 1: the image reference reached `podman run` as an argument, so a value that
    starts with '-' was a podman option (--user=0:0 ran the job as root)."""

    def test_cli_image_that_is_a_podman_flag_is_refused(self):
        e = self.env
        before = len(e.jobs())
        for image in ("--user=0:0", "--privileged", "-v/:/host"):
            r = e.cli(e.alice, "submit", "--image=" + image, "--workdir", "/tmp", "--", "id")
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn("image", r.stderr)
            self.assertIn("starts with '-'", r.stderr)
        self.assertEqual(len(e.jobs()), before, "a job was created")

    def test_api_image_that_is_a_podman_flag_is_refused(self):
        e = self.env
        before = len(e.jobs())
        for image in ("--user=0:0", "--privileged", "UPPER CASE", "img\n--privileged"):
            st, body = e.submit(e.bob, {"command": ["id"], "image": image})
            self.assertEqual(st, 400, body)
            self.assertIn("image", body["error"])
        self.assertEqual(len(e.jobs()), before, "a job was created")

    def test_variable_names_are_checked_at_submit(self):
        e = self.env
        before = len(e.jobs())
        for name in ("A=B", "", "1X", "A B"):
            st, body = e.submit(e.bob, {"command": ["true"], "env": {name: "v"}})
            self.assertEqual(st, 400, body)
            self.assertIn("env.", body["error"])
            self.assertIn("variable name", body["error"])
        self.assertEqual(len(e.jobs()), before, "a job was created")


class StateFilesTest(unittest.TestCase):
    """Item 4: gpupool.db and its WAL were 0644 in a 0755 directory, so any user read
    every job's variables (secrets), commands and the token hashes."""

    def test_job_data_is_private_even_in_a_store_made_world_readable(self):
        e = seclib.Env()
        try:
            # A store left by an older gpupool: a 0755 directory and a 0644 database.
            os.makedirs(e.state)
            os.chmod(e.state, 0o755)
            with open(os.path.join(e.state, "gpupool.db"), "wb"):
                pass
            os.chmod(os.path.join(e.state, "gpupool.db"), 0o644)
            e.start()
            st, body = e.submit(e.alice, {"command": ["sh", "-c", "echo $SECRET"],
                                          "env": {"SECRET": "hunter2-alice"}})
            self.assertEqual(st, 201, body)
            e.wait(body["job"]["id"], ("SUCCEEDED",))
            mode = stat.S_IMODE(os.stat(e.state).st_mode)
            self.assertEqual(mode, 0o711, oct(mode))
            # Every file: not readable by others (the socket is the one way in).
            found = []
            for root, dirs, files in os.walk(e.state):
                for d in dirs:
                    m = stat.S_IMODE(os.lstat(os.path.join(root, d)).st_mode)
                    self.assertEqual(m & 0o066, 0, "%s/%s is %o" % (root, d, m))
                for f in files:
                    p = os.path.join(root, f)
                    st_ = os.lstat(p)
                    if stat.S_ISSOCK(st_.st_mode):
                        continue
                    found.append(f)
                    self.assertEqual(stat.S_IMODE(st_.st_mode) & 0o077, 0,
                                     "%s is %o" % (p, stat.S_IMODE(st_.st_mode)))
            self.assertIn("gpupool.db", found)
            self.assertIn("gpupool.db-wal", found)
            # Bob tries to read the store and to list the state directory.
            probe = ("import os,sys\n"
                     "for p in sys.argv[1:]:\n"
                     "    try:\n"
                     "        (os.listdir(p) if os.path.isdir(p) else open(p,'rb').read(1))\n"
                     "        print('READ', p)\n"
                     "    except OSError as x:\n"
                     "        print('DENIED', p, x.errno)\n")
            paths = [e.state, os.path.join(e.state, "gpupool.db"),
                     os.path.join(e.state, "gpupool.db-wal")]
            r = subprocess.run(seclib.as_user_argv(e.bob, [seclib.USER_PYTHON, "-c", probe]
                                                   + paths), capture_output=True, text=True)
            self.assertNotIn("READ", r.stdout, r.stdout + r.stderr)
            self.assertEqual(r.stdout.count("DENIED"), 3, r.stdout + r.stderr)
            # ...while the socket still lets him in.
            self.assertEqual(e.api(e.bob, "GET", "/v1/whoami")[0], 200)
        finally:
            e.stop()


class WaitingRequestsTest(unittest.TestCase):
    """Item 7: log reads with wait_ms, long polls and inspections each held a thread for
    up to 60 s with no per-user cap, and kept the pool from stopping."""

    def test_one_user_cannot_hold_more_than_his_share_of_waiting_requests(self):
        e = seclib.Env()
        try:
            e.start()
            st, body = e.submit(e.bob, {"command": ["sleep", "60"]})
            self.assertEqual(st, 201, body)
            bob_job = body["job"]["id"]
            st, body = e.submit(e.alice, {"command": ["sleep", "60"]})
            alice_job = body["job"]["id"]
            e.wait(bob_job, ("RUNNING",))
            e.wait(alice_job, ("RUNNING",))
            # Bob opens 24 log follows at once, each waiting up to 4 s for output.
            path = "/v1/jobs/%d/logs?wait_ms=4000" % bob_job
            procs = [subprocess.Popen(
                seclib.as_user_argv(e.bob, [seclib.USER_PYTHON, e.lib, "--call",
                                            seclib.json.dumps({
                                                "sock": e.sock, "method": "GET", "path": path,
                                                "body": None, "headers": None, "raw": None,
                                                "timeout": 30})]),
                stdout=subprocess.PIPE, text=True) for _ in range(24)]
            time.sleep(1.0)  # let them arrive (they wait 4 s)
            # Alice is not held up by Bob's bound.
            st, _, _ = e.api(e.alice, "GET", "/v1/jobs/%d/logs?wait_ms=500" % alice_job)
            self.assertEqual(st, 200)
            statuses = []
            for p in procs:
                out, _ = p.communicate(timeout=30)
                statuses.append(seclib.json.loads(out)["status"])
            self.assertEqual(statuses.count(200), 16, statuses)
            self.assertEqual(statuses.count(429), 8, statuses)
            st, body, _ = e.api(e.bob, "GET", path.replace("4000", "0"))
            self.assertEqual(st, 200, body)  # the slots came back
        finally:
            e.stop()

    def test_a_waiting_log_follow_does_not_hold_up_shutdown(self):
        e = seclib.Env()
        try:
            e.start()
            st, body = e.submit(e.bob, {"command": ["sleep", "120"]})
            jid = body["job"]["id"]
            e.wait(jid, ("RUNNING",))
            result = {}

            def follow():
                try:
                    result["st"] = e.api(e.bob, "GET", "/v1/jobs/%d/logs?wait_ms=60000" % jid,
                                         timeout=90)[0]
                except Exception as x:  # the connection may just close
                    result["err"] = str(x)
            t = threading.Thread(target=follow)
            t.start()
            time.sleep(1.0)
            t0 = time.time()
            e.server.send_signal(signal.SIGTERM)
            e.server.wait(timeout=60)
            took = time.time() - t0
            t.join(timeout=60)
            self.assertLess(took, 15, "the server took %.1f s to stop" % took)
        finally:
            e.stop()


if __name__ == "__main__":
    seclib.main()
