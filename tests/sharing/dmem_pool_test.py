#!/usr/bin/env python3
"""GPU shares under the kernel's dmem controller, end to end as far as this machine goes
(issue 28 item 3, docs/sharing.md): a real `gpupool up` on a fake 4-GPU node with
`--gpu-enforcement dmem` and a fake dmem.capacity that lists the VRAM of GPUs 0 and 2
(by their PCI slots). Checked: those two GPUs state enforcement "dmem" and the others
"none"; `--enforce memory` shares wait on such a mixed node and go to one whose GPUs all
use dmem; a share on a dmem GPU never starts
without its cap: this machine's cgroups cannot take a dmem limit (no cgroup v2 dmem
controller), so the job fails closed, saying why, instead of running unenforced; a node
whose dmem.capacity lists none of its GPUs refuses `--gpu-enforcement dmem` at start.
(The limit's files are checked against a fake cgroup tree by agent_launcher_unit_test's
DmemTest.)

Usage: dmem_pool_test.py PATH_TO_GPUPOOL
Exit 77 (skipped) without root (the pool's jobs run as root here).
"""
import json
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
from pooltest import wait_for  # noqa: E402
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")


class DmemPoolTest(unittest.TestCase, pooltest.PoolCli):
    gpupool = GPUPOOL

    def setUp(self):
        self.open_pool_dir("gp-dmem-")
        with open(NODE) as f:
            self.slots = [g["pci_bus_id"] for g in json.load(f)["gpus"]]
        self.capacity = os.path.join(self.dir, "dmem.capacity")

    def tearDown(self):
        self.close_pool_dir()

    def up(self, capacity):
        return [GPUPOOL, "up", "--state-dir", self.dir, "--port", "0", "--config", "", "--fake",
                NODE, "--gpu-enforcement", "dmem", "--dmem-capacity", capacity]

    def submit(self, *args):
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, *args)  # output files there
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def start(self, slots):
        with open(self.capacity, "w") as f:
            for i, slot in enumerate(slots):  # any case; other regions of a GPU are not VRAM
                f.write("drm/%s/vram0 42949672960\ndrm/%s/gtt 1024\n" % (
                    slot.upper() if i % 2 else slot, slot))
        with open(self.log, "ab") as log:
            self.pool = subprocess.Popen(self.up(self.capacity), stdout=log, stderr=log,
                                         start_new_session=True)
        wait_for("the pool", lambda: " up " in self.cli("nodes").stdout)
        return json.loads(self.cli("nodes", "--json").stdout)["nodes"][0]

    def test_shares_on_dmem_gpus_never_run_without_their_cap(self):
        node = self.start([self.slots[0], self.slots[2]])
        self.assertEqual([g.get("enforcement") for g in node["gpus"]],
                         ["dmem", "none", "dmem", "none"])
        self.assertIn("dmem", self.cli("node", "show", node["name"]).stdout)
        # A node only some of whose GPUs enforce memory takes no --enforce memory share.
        enforced = self.submit("--enforce", "memory", "--gpu-mem", "2G", "--", "sleep", "30")
        wait_for("its reason", lambda: "--enforce memory" in
                 self.job(enforced).get("pending_reason", ""))
        self.cli("cancel", str(enforced))
        # A share may land anywhere, but on a dmem GPU it runs only with its cap: the cap
        # is the GPU's mode, not the job's wish. This machine cannot set one (no cgroup v2
        # dmem controller), so there the share fails closed, saying why.
        shares = [self.submit("--gpu-share", "0.5", "--", "sleep", "30") for _ in range(8)]
        for s in shares:
            j = pooltest.wait_job(self.job, s, ("FAILED", "RUNNING"), 30, log=self.server_log)
            on_dmem = j["placement"][0]["gpu_indices"][0] in (0, 2)
            self.assertEqual(j["state"], "FAILED" if on_dmem else "RUNNING", j)
            if on_dmem:
                self.assertIn("the kernel's dmem controller) could not be set", j["reason"])
                self.assertIn("not started", j["reason"])
            self.cli("cancel", str(s))

    def test_enforce_memory_shares_go_to_a_node_whose_gpus_all_use_dmem(self):
        node = self.start(self.slots)
        self.assertEqual({g.get("enforcement") for g in node["gpus"]}, {"dmem"})
        share = self.submit("--enforce", "memory", "--gpu-mem", "2G", "--", "sleep", "30")
        done = pooltest.wait_job(self.job, share, ("FAILED", "RUNNING"), 30, log=self.server_log)
        self.assertEqual(done["state"], "FAILED", done)  # placed; no cap possible here
        self.assertIn("dmem", done["reason"])

    def test_dmem_required_where_no_gpu_has_a_region_refuses_to_start(self):
        empty = os.path.join(self.dir, "empty.capacity")
        with open(empty, "w") as f:
            f.write("drm/0000:99:00.0/vram0 1024\n")
        r = subprocess.run(self.up(empty), capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--gpu-enforcement dmem: no GPU of this node has a VRAM region in " + empty,
                      r.stderr + r.stdout)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("dmem_pool_test: needs root (the pool's jobs run as root here)")
        sys.exit(77)
    unittest.main()
