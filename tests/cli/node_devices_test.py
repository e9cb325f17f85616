#!/usr/bin/env python3
"""Two GPUs on one device node or minor number would each be granted that device: two jobs
on one GPU (finding 9 of the fifth red-team round). A node file saying so is refused as a
duplicate uuid or bus id is (`up --fake`: exit 2 naming both GPUs and the field); real
discovery that reports it (here the NVML backend on the fake libnvidia-ml) is listed by
`gpupool gpus` with a note, and `gpupool agent` refuses to start on it (exit 1, naming
the GPUs), instead of registering GPUs the controller refuses.

Usage: node_devices_test.py PATH_TO_GPUPOOL PATH_TO_FAKE_LIBNVIDIA_ML NODE_JSON
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1))
FAKE_NVML = os.path.abspath(sys.argv.pop(1))
NODE = os.path.abspath(sys.argv.pop(1))


class NodeDevicesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gp-node-devices-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, name, obj):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(obj, f)
        return path

    def test_a_node_file_with_one_device_for_two_gpus_is_refused(self):
        with open(NODE) as f:
            node = json.load(f)
        same_node = copy.deepcopy(node)
        same_node["gpus"][1]["device_nodes"] = ["/dev/nvidia0"]
        same_minor = copy.deepcopy(node)
        same_minor["gpus"][2]["minor_number"] = 0
        for name, bad, says in (
                ("dup-dev.json", same_node,
                 "gpus[1].device_nodes: /dev/nvidia0 is already a device node of gpus[0]"),
                ("dup-minor.json", same_minor,
                 "gpus[2].minor_number: nvidia minor number 0 is already that of gpus[0]")):
            with self.subTest(file=name):
                path = self.write(name, bad)
                r = subprocess.run([GPUPOOL, "up", "--config", "", "--port", "0", "--state-dir",
                                    os.path.join(self.dir, "state"), "--fake", path],
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("--fake " + path, r.stderr)
                self.assertIn(says, r.stderr)
                self.assertIn("every GPU needs its own device", r.stderr)

    def test_discovery_of_two_gpus_on_one_minor_number_is_flagged_and_no_agent_starts(self):
        devices = [{"name": "NVIDIA H100 80GB HBM3",
                    "uuid": "GPU-5a3e0000-0000-4000-8000-00000000000%d" % i,
                    "bus_id": "00000000:%02X:00.0" % (0x1B + i), "memory_total": 85520809984,
                    "compute_capability": [9, 0], "minor": 0} for i in range(2)]
        scenario = self.write("scenario.json", {"driver_version": "580.95.05",
                                                "cuda_version": 13000, "devices": devices})
        sysfs = os.path.join(self.dir, "sys")
        os.makedirs(sysfs)
        env = dict(os.environ, GPUPOOL_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_SCENARIO=scenario,
                   GPUPOOL_SYSFS_ROOT=sysfs)
        says = "gpus[1].minor_number: nvidia minor number 0 is already that of gpus[0]"
        r = subprocess.run([GPUPOOL, "gpus", "--backend", "nvml", "--json"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(json.loads(r.stdout)["gpus"]), 2)
        self.assertIn("[discovery] " + says, r.stderr)
        r = subprocess.run([GPUPOOL, "agent", "--config", "", "--controller",
                            "unix:" + os.path.join(self.dir, "none.sock"), "--state-dir",
                            os.path.join(self.dir, "agent")], env=env,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("GPU discovery reported GPUs that cannot all be given out: " + says,
                      r.stderr)
        self.assertIn("the agent does not start", r.stderr)


if __name__ == "__main__":
    unittest.main()
