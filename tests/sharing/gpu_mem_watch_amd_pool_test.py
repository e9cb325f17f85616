#!/usr/bin/env python3
"""The agent's GPU memory watch on an AMD GPU end to end (docs/sharing.md, "The GPU memory
watch" and "AMD GPUs": no MIG or MPS there, so the watch is what holds a share to its
memory): a real `gpupool up` whose one MI300X is discovered through the fake
librocm_smi64.so (tests/fakelib/rocm_smi), loaded by the agent's real dlopen code, its
shares not enforced (`--gpu-enforcement none`), telemetry every second. Two `--gpu-mem 2G`
shares run; the fake's scenario then lists their real processes on the GPU as KFD would
(rsmi_compute_process_info_get, rsmi_compute_process_gpus_get,
rsmi_compute_process_info_by_device_get): the first at 4 GiB, the second at 2.5 GiB
(within the default slack of 1 GiB). The first is killed and FAILED, its reason naming
the GPU, its share and the slack; the second, seen in the same round, runs on.

Usage: gpu_mem_watch_amd_pool_test.py PATH_TO_GPUPOOL FAKE_ROCM_SMI
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
FAKE_ROCM_SMI = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
from pooltest import wait_for  # noqa: E402
GIB = 1 << 30


class GpuMemWatchAmdPoolTest(unittest.TestCase, pooltest.PoolCli):
    gpupool = GPUPOOL

    def setUp(self):
        self.open_pool_dir("gp-memwatch-amd-")
        self.scenario = os.path.join(self.dir, "rocm_smi.json")
        self.set_processes([])

    def tearDown(self):
        self.close_pool_dir()

    def set_processes(self, procs):
        """The fake's scenario: one MI300X (device 0) and its processes, [(pid, bytes)],
        written beside and renamed into place (the fake never reads half a file)."""
        scenario = {
            "driver_version": "6.8.5",
            "devices": [{"name": "AMD Instinct MI300X", "bdfid": 0xc100,
                         "unique_id": 0x1000000000000001, "vram_total": 192 * GIB,
                         "vram_used": GIB, "busy_percent": 5, "render_minor": 128}],
            "processes": [{"pid": pid, "devices": [0], "vram": [used]} for pid, used in procs],
        }
        tmp = self.scenario + ".tmp"
        with open(tmp, "w") as f:
            json.dump(scenario, f)
        os.rename(tmp, self.scenario)

    def start(self):
        cmd = [GPUPOOL, "up", "--state-dir", self.dir, "--port", "0", "--config", "",
               "--gpu-enforcement", "none", "--allow-unisolated-devices",
               "--telemetry-interval", "1"]
        # An empty sysfs root: ROCm SMI is asked even where the host has no DRM devices,
        # and the sysfs backend finds no GPU of its own.
        sysfs = os.path.join(self.dir, "sys")
        os.makedirs(os.path.join(sysfs, "bus", "pci", "devices"))
        env = dict(os.environ, GPUPOOL_ROCM_SMI_LIBRARY=FAKE_ROCM_SMI,
                   GPUPOOL_FAKE_ROCM_SMI_SCENARIO=self.scenario, GPUPOOL_SYSFS_ROOT=sysfs,
                   GPUPOOL_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
        with open(self.log, "ab") as log:
            self.pool = subprocess.Popen(cmd, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        wait_for("the pool", lambda: " up " in self.cli("nodes").stdout)
        node = json.loads(self.cli("nodes", "--json").stdout)["nodes"][0]
        amd = [g for g in node["gpus"] if g.get("vendor") == "amd"]
        self.assertEqual(len(amd), 1, node["gpus"])
        self.assertEqual(amd[0].get("enforcement"), "none")
        return amd[0]

    def test_an_amd_share_over_its_memory_and_the_slack_is_killed_and_fails(self):
        gpu = self.start()
        over, over_pid = self.running_share("over")
        within, within_pid = self.running_share("within")
        with open("/proc/%d/cgroup" % over_pid) as f:
            if "/gpupool/job-%d-" % over not in f.read():
                self.skipTest("the pool's jobs run in no gpupool cgroup on this host, so "
                              "their processes cannot be told apart")
        self.set_processes([(over_pid, 4 * GIB), (within_pid, 2 * GIB + GIB // 2)])
        j = pooltest.wait_job(self.job, over, pooltest.FINAL_STATES, 30, log=self.server_log)
        self.assertEqual(j["state"], "FAILED", j)
        self.assertEqual(
            j["reason"],
            "its processes used 4096 MiB of GPU %d (%s)'s memory, more than its share's "
            "2048 MiB and the node's slack of 1024 MiB: stopped by the node's GPU memory "
            "watch (the GPU's enforcement: none) (ended by SIGKILL)" % (gpu["index"],
                                                                       gpu["uuid"]))
        self.assertEqual(j.get("signal"), 9, j)
        # The round that stopped it saw the other: within its memory and slack.
        self.assertEqual(self.job(within)["state"], "RUNNING")
        self.assertIn("GPU memory watch", self.server_log())


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("gpu_mem_watch_amd_pool_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
