#!/usr/bin/env python3
"""GPU shares held by NVML's per-cgroup memory limits, end to end (issue 28 item 3,
docs/sharing.md "Through NVML"): a real `gpupool up` whose node is discovered through the
fake libnvidia-ml (tests/fakelib/nvml, one GPU of scenario memory_limits.json: two H200s
under an R615 driver, the second refusing the limits), with `--gpu-enforcement dmem` and
no dmem region. Checked: the GPU states enforcement "dmem" and the start message says
NVML holds it; a `--gpu-mem` share on the first GPU runs with soft and hard limit set on
its own cgroup where the job cgroups are cgroup v2 (else, on a cgroup v1 host, it fails
closed saying NVML's limits need cgroup v2), and one on the second never starts, saying
why; a library without the call (the fake's normal build, a driver before R615) leaves
`--gpu-enforcement dmem` nothing to hold, so the agent refuses to start; `auto` holds
the GPU through NVML on a cgroup v2 host and leaves it unenforced, saying why, on a
cgroup v1 host (where every share would fail closed).
(agent_launcher_test's NvmlShareTest checks the set limit on a real cgroup v2 tree.)

Usage: nvml_memory_pool_test.py PATH_TO_GPUPOOL FAKE_NVML_MEMORY_LIMITS FAKE_NVML SCENARIO
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
FAKE_NVML = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
FAKE_NVML_OLD = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
SCENARIO = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
from pooltest import wait_for  # noqa: E402
GPU0 = "GPU-c2000000-0000-4000-8000-000000000000"
GPU1 = "GPU-c2000000-0000-4000-8000-000000000001"


def cgroup_v2_root():
    """Where the pool's job cgroups go ("/sys/fs/cgroup") if that is cgroup v2, else None."""
    return "/sys/fs/cgroup" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else None


class NvmlMemoryPoolTest(unittest.TestCase, pooltest.PoolCli):
    gpupool = GPUPOOL

    def setUp(self):
        self.open_pool_dir("gp-nvmlmem-")
        self.record = os.path.join(self.dir, "limits")

    def tearDown(self):
        self.close_pool_dir()

    def up(self, library, device=None, mode="dmem"):
        """`gpupool up` on the scenario's GPUs (only GPU `device` when given)."""
        scenario = SCENARIO
        if device is not None:
            with open(SCENARIO) as f:
                s = json.load(f)
            s["devices"] = s["devices"][device:device + 1]
            scenario = os.path.join(self.dir, "scenario.json")
            with open(scenario, "w") as f:
                json.dump(s, f)
        cmd = [GPUPOOL, "up", "--state-dir", self.dir, "--port", "0", "--config", "",
               "--gpu-enforcement", mode, "--dmem-capacity", os.path.join(self.dir, "none"),
               "--allow-unisolated-devices", "--telemetry-interval", "0"]
        env = dict(os.environ, GPUPOOL_NVML_LIBRARY=library, FAKE_NVML_SCENARIO=scenario,
                   FAKE_NVML_MEMORY_LIMITS=self.record)
        return cmd, env

    def start(self, device, mode="dmem"):
        cmd, env = self.up(FAKE_NVML, device, mode)
        with open(self.log, "ab") as log:
            self.pool = subprocess.Popen(cmd, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        wait_for("the pool", lambda: " up " in self.cli("nodes").stdout)
        node = json.loads(self.cli("nodes", "--json").stdout)["nodes"][0]
        if mode == "auto" and cgroup_v2_root() is None:
            # Every share would fail closed on this cgroup v1 host: auto does not use NVML.
            self.assertEqual([g.get("enforcement") for g in node["gpus"]], ["none"])
            wait_for("the start message", lambda: "GPU shares:" in self.server_log())
            self.assertIn("GPU shares: not enforced (no nvidia-cuda-mps-control; NVML's "
                          "per-cgroup memory limits need cgroup v2 at /sys/fs/cgroup)",
                          self.server_log())
            return
        self.assertEqual([g.get("enforcement") for g in node["gpus"]], ["dmem"])
        wait_for("the start message", lambda: "GPU shares:" in self.server_log())
        self.assertIn("GPU shares: dmem (NVML's per-cgroup memory limits) on 1 of 1 GPUs ("
                      + FAKE_NVML + ")", self.server_log())

    def share(self, script):
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, "--gpu-mem", "2G", "--",
                     "sh", "-c", script)
        self.assertEqual(r.returncode, 0, r.stderr)
        jid = int(r.stdout.split()[-1])
        return pooltest.wait_job(self.job, jid, ("FAILED", "RUNNING"), 30, log=self.server_log)

    def test_a_share_runs_capped_on_its_own_cgroup(self):
        self.start(0)
        cgroup_file = os.path.join(self.dir, "cgroup")
        j = self.share("grep '^0::' /proc/self/cgroup > %s.tmp; mv %s.tmp %s; sleep 30" % (
            cgroup_file, cgroup_file, cgroup_file))
        v2 = cgroup_v2_root()
        if v2 is None:  # a cgroup v1 host: the cap cannot be set, so the share never runs
            self.assertEqual(j["state"], "FAILED", j)
            self.assertIn("B of GPU %s, NVML's per-cgroup memory limits) could not be set" % GPU0,
                          j["reason"])
            self.assertIn("NVML's per-cgroup limits need cgroup v2 here", j["reason"])
            self.assertFalse(os.path.exists(self.record))
            return
        self.assertEqual(j["state"], "RUNNING", j)
        wait_for("the job's cgroup", lambda: os.path.exists(cgroup_file))
        with open(cgroup_file) as f:
            path = f.read().split("::", 1)[1].strip()
        self.assertIn("/gpupool/job-%d-" % j["id"], path)
        with open(self.record) as f:
            self.assertEqual(f.read(), "%s %s%s %d %d\n" % (GPU0, v2, path, 2 << 30, 2 << 30))

    def test_auto_holds_shares_through_nvml_only_where_job_cgroups_are_v2(self):
        self.start(0, mode="auto")

    def test_a_share_whose_limit_is_refused_never_starts(self):
        self.start(1)
        ran = os.path.join(self.dir, "ran")
        j = self.share("touch %s" % ran)
        self.assertEqual(j["state"], "FAILED", j)
        self.assertIn("2147483648 B of GPU %s, NVML's per-cgroup memory limits) could not be set"
                      % GPU1, j["reason"])
        self.assertIn("not started", j["reason"])
        if cgroup_v2_root() is not None:
            self.assertIn("nvmlDeviceSetMemoryLimits_v1: Insufficient Permissions", j["reason"])
        self.assertFalse(os.path.exists(ran))

    def test_dmem_required_where_nvml_lacks_the_call_refuses_to_start(self):
        cmd, env = self.up(FAKE_NVML_OLD)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("nor NVML's per-cgroup memory limits (nvmlDeviceSetMemoryLimits_v1",
                      r.stderr + r.stdout)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("nvml_memory_pool_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
