#!/usr/bin/env python3
"""gpupool's default node health program (packaging/health-check/gpupool-health-check,
docs/health.md) against the kit's fake nvidia-smi (packaging/node-check/fake-nvidia-smi):
a healthy node passes; each bad field names its GPU in the agent's `gpu=INDEX bad REASON`
form; an nvidia-smi that cannot list the GPUs makes the node bad; no nvidia-smi passes
with a note.

Usage: default_check_test.py
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CHECK = os.path.join(ROOT, "packaging", "health-check", "gpupool-health-check")
FAKE_SMI = os.path.join(ROOT, "packaging", "node-check", "fake-nvidia-smi")
SCENARIO = os.path.join(ROOT, "packaging", "node-check", "fake-h100.json")


class DefaultHealthCheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gp-default-check-")
        self.bin = os.path.join(self.dir, "bin")
        os.mkdir(self.bin)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_check(self, devices=None, smi=True):
        env = {"PATH": self.bin + ":/usr/bin:/bin", "LC_ALL": "C"}
        if smi:
            shutil.copy(FAKE_SMI, os.path.join(self.bin, "nvidia-smi"))
            with open(SCENARIO) as f:
                scenario = json.load(f)
            base = scenario["devices"][0]
            scenario["devices"] = [dict(base, **(d or {}), uuid="GPU-%d" % i)
                                   for i, d in enumerate(devices or [{}])]
            path = os.path.join(self.dir, "scenario.json")
            with open(path, "w") as f:
                json.dump(scenario, f)
            env["FAKE_NVIDIA_SMI_SCENARIO"] = path
        return subprocess.run([CHECK], capture_output=True, text=True, env=env, timeout=60)

    def test_a_healthy_node_passes(self):
        r = self.run_check([{}, {}])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(" bad", r.stdout)
        self.assertIn("2 GPU(s) checked", r.stdout)

    def test_each_bad_field_names_its_gpu(self):
        r = self.run_check([{"ecc_uncorrected_volatile": 3}, {"remapped_rows_pending": True},
                            {"remapped_rows_failure": True, "hw_slowdown": True},
                            {"retired_pages_pending": True}])
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = sorted(r.stdout.strip().splitlines())
        self.assertEqual(lines, sorted([
            "gpu=0 bad uncorrected ECC errors since the driver loaded: 3",
            "gpu=1 bad a row remapping is pending: reset the GPU",
            "gpu=2 bad a row remapping failed: the GPU needs service",
            "gpu=2 bad the hardware slows its clocks down (HW slowdown)",
            "gpu=3 bad a page retirement is pending: reset the GPU",
        ]))

    def test_an_nvidia_smi_that_cannot_list_the_gpus_makes_the_node_bad(self):
        smi = os.path.join(self.bin, "nvidia-smi")
        with open(smi, "w") as f:
            f.write("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate "
                    "with the NVIDIA driver.'\nexit 9\n")
        os.chmod(smi, 0o755)
        r = self.run_check(smi=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("node bad nvidia-smi cannot list the GPUs: NVIDIA-SMI has failed", r.stdout)

    def test_no_nvidia_smi_passes_with_a_note(self):
        r = self.run_check(smi=False)
        self.assertEqual(r.returncode, 0)
        self.assertIn("no nvidia-smi", r.stdout)


if __name__ == "__main__":
    unittest.main()
