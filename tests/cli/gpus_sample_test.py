#!/usr/bin/env python3
"""`gpupool gpus --sample N` (issue 26): the GPUs' telemetry as the agent samples it, one
JSON line per round, here through the real NVML backend and sampler on the fake
libnvidia-ml (tests/fakelib/nvml): the figures, an Xid event drained once it is due, each
process with the pool job whose cgroup it runs in (read under GPUPOOL_PROC_ROOT), how long
each round took; and the refusals (a machine format, a node without GPUs).

Usage: gpus_sample_test.py PATH_TO_GPUPOOL PATH_TO_FAKE_LIBNVIDIA_ML
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1))
FAKE_NVML = os.path.abspath(sys.argv.pop(1))
UUID = "GPU-5a3e0000-0000-4000-8000-000000000001"


class GpusSampleTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gp-sample-")
        self.scenario = os.path.join(self.dir, "scenario.json")
        self.write(self.scenario, {
            "driver_version": "580.95.05", "cuda_version": 13000,
            "devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": UUID, "bus_id": "00000000:1B:00.0",
                         "memory_total": 85520809984, "memory_used": 1 << 30,
                         "compute_capability": [9, 0], "minor": 0, "utilization_gpu": 10,
                         "power_mw": 71000, "temperature": 31, "ecc_total": 0,
                         "xid_events": [{"xid": 79, "after_samples": 1}]}]})
        self.telemetry = os.path.join(self.dir, "telemetry.json")
        self.write(self.telemetry, {"devices": {"0": {
            "utilization_gpu": 77, "memory_used": 5 << 30, "power_mw": 512500,
            "processes": [{"pid": 4242, "used_memory": 2 << 30, "sm_util": 60},
                          {"pid": 4343, "used_memory": 1 << 30, "sm_util": 17}]}}})
        # /proc as the agent reads it: 4242 runs in job 42's cgroup (v2), 4343 in none.
        self.proc = os.path.join(self.dir, "proc")
        os.makedirs(os.path.join(self.proc, "4242"))
        os.makedirs(os.path.join(self.proc, "4343"))
        with open(os.path.join(self.proc, "4242", "cgroup"), "w") as f:
            f.write("0::/gpupool/job-42-1-777\n")
        with open(os.path.join(self.proc, "4343", "cgroup"), "w") as f:
            f.write("0::/user.slice/user-1000.slice\n")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def write(path, obj):
        with open(path, "w") as f:
            json.dump(obj, f)

    def run_gpupool(self, *args, scenario=None):
        env = dict(os.environ, GPUPOOL_NVML_LIBRARY=FAKE_NVML, GPUPOOL_PROC_ROOT=self.proc,
                   FAKE_NVML_SCENARIO=scenario or self.scenario, FAKE_NVML_TELEMETRY=self.telemetry)
        return subprocess.run([GPUPOOL, "gpus", "--backend", "nvml"] + list(args), env=env,
                              capture_output=True, text=True, timeout=60)

    def test_rounds_figures_xid_and_processes_with_their_jobs(self):
        r = self.run_gpupool("--sample", "3", "--sample-interval", "0.05")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual([l["round"] for l in lines], [0, 1, 2])
        for l in lines:
            self.assertEqual(l["sampler"], "nvml")
            self.assertNotIn("error", l)
            self.assertLess(l["took_ms"], 1000)
            self.assertEqual(len(l["samples"]), 1)
            s = l["samples"][0]
            self.assertEqual((s["index"], s["uuid"]), (0, UUID))
            self.assertEqual(s["util_pct"], 77)
            self.assertEqual(s["mem_used_mib"], 5 * 1024)
            self.assertEqual(s["mem_total_mib"], 85520809984 >> 20)
            self.assertEqual(s["power_w"], 512.5)
            self.assertEqual(s["at_ms"], l["at_ms"])
            procs = {p["pid"]: p for p in s["processes"]}
            self.assertEqual(procs[4242], {"pid": 4242, "job_id": 42, "used_mib": 2048, "util_pct": 60})
            self.assertEqual(procs[4343], {"pid": 4343, "used_mib": 1024, "util_pct": 17})  # no job
        # The Xid event comes due after one sample, is drained once, and stays the last.
        xids = [(l["samples"][0]["xid_errors"], l["samples"][0]["xid_count"]) for l in lines]
        self.assertEqual(xids, [(0, 0), (79, 1), (79, 1)])
        # Rounds are --sample-interval apart on the wall clock.
        self.assertGreaterEqual(lines[2]["at_ms"] - lines[0]["at_ms"], 90)

    def test_refusals(self):
        r = self.run_gpupool("--sample", "2", "--format", "gres")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--sample prints JSON lines and cannot be combined with --format gres", r.stderr)
        self.assertEqual(r.stdout, "")
        r = self.run_gpupool("--sample", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--sample", r.stderr)
        # No GPU: nothing to sample, said plainly.
        empty = os.path.join(self.dir, "none.json")
        self.write(empty, {"driver_version": "580.95.05", "cuda_version": 13000, "devices": []})
        r = self.run_gpupool("--sample", "1", scenario=empty)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no telemetry: the node has no GPUs to sample", r.stderr)
        self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
