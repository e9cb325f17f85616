#!/usr/bin/env python3
"""The agent's GPU memory watch end to end (docs/sharing.md, "The GPU memory watch"): a
real `gpupool up` whose one GPU is discovered through the fake libnvidia-ml
(tests/fakelib/nvml), its shares not enforced (`--gpu-enforcement none`), telemetry every
second. Three `--gpu-mem 2G` shares run; the fake's telemetry file then says, for their
real processes, that the first uses 4 GiB, the second 2.5 GiB (within the default slack
of 1 GiB) and the third 1 GiB. The first is killed and FAILED, its reason naming the
memory, its share and the slack, its task's kill cause gpu_mem_watch; the other two, seen
in the same round, run on. A bad `--gpu-mem-slack` is refused naming the flag.

Usage: gpu_mem_watch_pool_test.py PATH_TO_GPUPOOL FAKE_NVML SCENARIO
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
FAKE_NVML = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
SCENARIO = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else ""
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
from pooltest import wait_for  # noqa: E402
GPU0 = "GPU-c2000000-0000-4000-8000-000000000000"
GIB = 1 << 30


class GpuMemWatchPoolTest(unittest.TestCase, pooltest.PoolCli):
    gpupool = GPUPOOL

    def setUp(self):
        self.open_pool_dir("gp-memwatch-")
        with open(SCENARIO) as f:
            s = json.load(f)
        s["devices"] = s["devices"][:1]  # the first H200 only
        self.scenario = os.path.join(self.dir, "scenario.json")
        with open(self.scenario, "w") as f:
            json.dump(s, f)
        self.telemetry = os.path.join(self.dir, "telemetry.json")
        self.set_processes([])

    def tearDown(self):
        self.close_pool_dir()

    def set_processes(self, procs):
        """The fake's telemetry file: GPU 0's processes, [(pid, bytes)], written whole."""
        tmp = self.telemetry + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"devices": {"0": {"processes": [
                {"pid": pid, "used_memory": used, "sm_util": 10} for pid, used in procs]}}}, f)
        os.rename(tmp, self.telemetry)

    def up_command(self, *extra):
        cmd = [GPUPOOL, "up", "--state-dir", self.dir, "--port", "0", "--config", "",
               "--gpu-enforcement", "none", "--allow-unisolated-devices",
               "--telemetry-interval", "1"] + list(extra)
        env = dict(os.environ, GPUPOOL_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_SCENARIO=self.scenario,
                   FAKE_NVML_TELEMETRY=self.telemetry)
        return cmd, env

    def start(self):
        cmd, env = self.up_command()
        with open(self.log, "ab") as log:
            self.pool = subprocess.Popen(cmd, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        wait_for("the pool", lambda: " up " in self.cli("nodes").stdout)
        node = json.loads(self.cli("nodes", "--json").stdout)["nodes"][0]
        self.assertEqual([g.get("enforcement") for g in node["gpus"]], ["none"])

    def test_a_share_over_its_memory_and_the_slack_is_killed_and_fails_saying_why(self):
        self.start()
        over, over_pid = self.running_share("over")
        within, within_pid = self.running_share("within")
        under, under_pid = self.running_share("under")
        with open("/proc/%d/cgroup" % over_pid) as f:
            if "/gpupool/job-%d-" % over not in f.read():
                self.skipTest("the pool's jobs run in no gpupool cgroup on this host, so "
                              "their processes cannot be told apart")
        self.set_processes([(over_pid, 4 * GIB), (within_pid, 2 * GIB + GIB // 2),
                            (under_pid, GIB)])
        j = pooltest.wait_job(self.job, over, pooltest.FINAL_STATES, 30, log=self.server_log)
        self.assertEqual(j["state"], "FAILED", j)
        self.assertEqual(
            j["reason"],
            "its processes used 4096 MiB of GPU 0 (%s)'s memory, more than its share's "
            "2048 MiB and the node's slack of 1024 MiB: stopped by the node's GPU memory "
            "watch (the GPU's enforcement: none) (ended by SIGKILL)" % GPU0)
        self.assertEqual(j.get("signal"), 9, j)
        # Why, as fields of its task (not words to parse): the cause and the words for it
        # without the signal.
        self.assertEqual(j["tasks"][0].get("kill_cause"), "gpu_mem_watch", j)
        self.assertEqual(
            j["tasks"][0].get("kill_detail"),
            "its processes used 4096 MiB of GPU 0 (%s)'s memory, more than its share's "
            "2048 MiB and the node's slack of 1024 MiB: stopped by the node's GPU memory "
            "watch (the GPU's enforcement: none)" % GPU0)
        # The round that stopped it saw the other two: within their memory and slack.
        self.assertEqual(self.job(within)["state"], "RUNNING")
        self.assertEqual(self.job(under)["state"], "RUNNING")
        shown = self.cli("show", str(over)).stdout
        self.assertIn("stopped by the node's GPU memory watch", shown)
        self.assertIn("  Kill cause: gpu_mem_watch\n", shown)
        self.assertIn("GPU memory watch", self.server_log())

    def test_a_bad_slack_is_refused_naming_the_flag(self):
        for value, said in (("lots", "--gpu-mem-slack lots: "),
                            ("1024", "--gpu-mem-slack 1024: a size needs a unit")):
            cmd, env = self.up_command("--gpu-mem-slack", value)
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(said, r.stderr + r.stdout)
            self.assertIn("(or off: no GPU memory watch)", r.stderr + r.stdout)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("gpu_mem_watch_pool_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
