#!/usr/bin/env python3
"""What a docs audit found in the words of submit, cancel and the API (docs/cli.md,
docs/api.md), on a real `gpupool up` with a fake 4-GPU node:

- a memory size needs its unit: `--gpu-mem 10` (and `#GPUPOOL --gpu-mem 10`, `--mem 4000`,
  `gpupool up --fake-mem 1048576`) was 10 bytes; it is refused, naming the option and what
  to write instead;
- POST /v1/jobs refuses a `gpu_memory_bytes` below 1 MiB, and one together with a
  `gpu_milli` (both size the share; the CLI refuses --gpu-share with --gpu-mem), 400
  naming the fields;
- a refusal of cancel, hold, release or checkpoint-done names the job once ("job 3: job 3
  has already ended" said it twice).

Usage: sizes_and_refusals_test.py PATH_TO_GPUPOOL NODE_JSON
Exit 77 (skipped) without root (the pool's jobs run as their users).
"""
import json
import os
import re
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1))
NODE = os.path.abspath(sys.argv.pop(1))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)


class SizesAndRefusalsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pool = pooltest.FakeNodePool(GPUPOOL, NODE, "gp-sizes-")

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def submit(self, *args):
        r = self.pool.cli("submit", "-D", self.pool.out, *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def post_job(self, request):
        conn = pooltest.UnixConnection(os.path.join(self.pool.dir, "gpupool.sock"))
        conn.request("POST", "/v1/jobs", json.dumps({"command": ["true"], "request": request}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        body = json.loads(r.read().decode())
        conn.close()
        return r.status, body

    def test_a_memory_size_without_its_unit_is_refused_naming_the_option(self):
        script = os.path.join(self.pool.out, "bare.sh")
        for flags, err in (
                (["--gpu-mem", "10"], "--gpu-mem 10: a size needs a unit (a bare number "
                                      "would be 10 bytes); write 10G or 10240M"),
                (["--mem", "4000"], "--mem 4000: a size needs a unit (a bare number would be "
                                    "4000 bytes); write 4000M or 4000G"),
                (["--gpu-mem", "512K"], "--gpu-mem 512K: '512K' is below the smallest size, "
                                        "1M; write e.g. 10G or 10240M")):
            r = self.pool.cli("submit", *flags, "--", "true")
            self.assertEqual((r.returncode, r.stderr), (2, "gpupool: %s\n" % err))
            # The same words as a script's directive: the same error, naming its line.
            with open(script, "w") as f:
                f.write("#!/bin/sh\n#GPUPOOL %s\ntrue\n" % " ".join(flags))
            os.chmod(script, 0o755)
            r = self.pool.cli("submit", script)
            self.assertEqual((r.returncode, r.stderr),
                             (2, "gpupool: %s:2: #GPUPOOL line: %s\n" % (script, err)))
        with open(script, "w") as f:
            f.write("#!/bin/sh\n#GPUPOOL --gpu-mem 10G --mem 4000M\ntrue\n")
        jid = self.submit(script)
        request = self.pool.job(jid)["request"]
        self.assertEqual((request["gpus"], request["gpu_memory_bytes"], request["memory_bytes"]),
                         (1, 10 << 30, 4000 << 20))

    def test_a_fake_nodes_memory_needs_its_unit_too(self):
        state = os.path.join(self.pool.dir, "fake-mem")
        try:
            r = subprocess.run([GPUPOOL, "up", "--state-dir", state, "--port", "0", "--fake",
                                NODE, "--fake-mem", "1048576"], capture_output=True, text=True,
                               timeout=20)
        except subprocess.TimeoutExpired:
            self.fail("gpupool up --fake-mem 1048576 started a pool")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--fake-mem 1048576: a size needs a unit (a bare number would be 1048576 "
                      "bytes); write 1M", r.stderr)

    def test_the_api_refuses_a_share_sized_twice_or_in_too_few_bytes(self):
        status, body = self.post_job({"gpus": 1, "gpu_memory_bytes": 10})
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"], "request.gpu_memory_bytes: 10 is below 1 MiB (1048576); "
                                        "the field counts bytes, e.g. 21474836480 for 20 GiB")
        status, body = self.post_job({"gpus": 1, "gpu_milli": 250, "gpu_memory_bytes": 10 << 30})
        self.assertEqual(status, 400, body)
        self.assertTrue(body["error"].startswith(
            "request.gpu_milli, request.gpu_memory_bytes: both size a share of one GPU; give "
            "one or the other"), body["error"])
        # As the CLI: one or the other.
        r = self.pool.cli("submit", "--gpu-share", "0.25", "--gpu-mem", "10G", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("give one or the other", r.stderr)
        status, body = self.post_job({"gpus": 1, "gpu_memory_bytes": 1 << 20})
        self.assertEqual(status, 201, body)

    def test_the_api_refuses_cpu_memory_and_shm_in_too_few_bytes(self):
        # As gpu_memory_bytes: 16 meant as 16 GiB is refused naming the field; 0 is the
        # default (no explicit request; podman's 64 MiB /dev/shm).
        status, body = self.post_job({"memory_bytes": 16})
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"], "request.memory_bytes: 16 is below 1 MiB (1048576); the "
                                        "field counts bytes, e.g. 17179869184 for 16 GiB (0 or "
                                        "absent: no explicit request)")
        conn = pooltest.UnixConnection(os.path.join(self.pool.dir, "gpupool.sock"))
        conn.request("POST", "/v1/jobs", json.dumps({"command": ["true"], "image": "busybox",
                                                     "shm_bytes": 64}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        body = json.loads(r.read().decode())
        conn.close()
        self.assertEqual(r.status, 400, body)
        self.assertEqual(body["error"], "shm_bytes: 64 is below 1 MiB (1048576); the field "
                                        "counts bytes, e.g. 1073741824 for 1 GiB (0 or absent: "
                                        "podman's 64 MiB)")
        for request in ({"memory_bytes": 0}, {"memory_bytes": 1 << 20}):
            status, body = self.post_job(request)
            self.assertEqual(status, 201, body)

    def test_a_refusal_names_the_job_once(self):
        jid = self.submit("--", "true")
        pooltest.wait_job(self.pool.job, jid, ("SUCCEEDED",), 30, log=self.pool.server_log)
        for args, err in ((["cancel"], "job %d has already ended (SUCCEEDED)"),
                          (["hold"], "job %d has ended (SUCCEEDED); only pending jobs are held"),
                          (["release"], "job %d has ended (SUCCEEDED); only pending jobs are "
                                        "released"),
                          (["checkpoint-done"], "job %d is SUCCEEDED and not being preempted; "
                                                "checkpoint-done ends the grace period of a "
                                                "preempted job")):
            r = self.pool.cli(*args, str(jid))
            self.assertEqual(r.stderr, "gpupool: %s\n" % (err % jid))
        r = self.pool.cli("cancel", "9999")
        self.assertEqual((r.returncode, r.stderr), (3, "gpupool: no job 9999\n"))
        r = self.pool.cli("submit", "-D", self.pool.out, "--array", "0-1", "--", "true")
        arr = int(re.search(r"array job (\d+)", r.stdout).group(1))
        pooltest.wait_for("array %d's end" % arr, lambda: all(
            self.pool.job("%d_%d" % (arr, i))["state"] == "SUCCEEDED" for i in (0, 1)))
        r = self.pool.cli("cancel", str(arr), "%d_1" % arr)
        self.assertEqual(r.stderr,
                         "gpupool: array %d has already ended: none of its 2 elements is queued "
                         "or running\ngpupool: job %d_1 has already ended (SUCCEEDED)\n"
                         % (arr, arr))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (the pool's jobs run as their users)")
        sys.exit(77)
    unittest.main()
