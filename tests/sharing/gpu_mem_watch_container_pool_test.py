#!/usr/bin/env python3
"""The agent's GPU memory watch sees container shares (docs/sharing.md, "The GPU memory
watch"): a real `gpupool up` whose one GPU is discovered through the fake libnvidia-ml,
its shares not enforced (`--gpu-enforcement none`), telemetry every second, podman with a
private store (--root/--runroot under the test's directory, vfs) holding a busybox image
imported here. A `--gpu-mem 2G --image` share runs; its container's process (its host
pid, from `podman inspect`) runs below the job's gpupool cgroup, and when the fake's
telemetry says it uses 4 GiB the watch kills the share, which FAILS saying why. In
podman's own cgroup the watch would not have seen it.

Usage: gpu_mem_watch_container_pool_test.py PATH_TO_GPUPOOL FAKE_NVML SCENARIO
Exit 77 (skipped) without root, podman, runc or a static busybox.
"""
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_mem_watch_pool_test as watch  # noqa: E402  (takes its three arguments)
import pooltest  # noqa: E402  (tests/testlib, on the path through gpu_mem_watch_pool_test)
from pooltest import wait_for  # noqa: E402

GIB = watch.GIB
BUSYBOX = "/bin/busybox" if os.path.exists("/bin/busybox") else "/usr/bin/busybox"


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (rootful podman)"
    if shutil.which("podman") is None:
        return "podman is not installed"
    if shutil.which("runc") is None:
        return "runc is not installed"
    if not os.path.exists(BUSYBOX):
        return "busybox is not installed (apt-get install busybox-static)"
    r = subprocess.run(["ldd", BUSYBOX], capture_output=True, text=True)
    if "=>" in r.stdout:
        return "busybox is dynamically linked; install busybox-static"
    return None


class GpuMemWatchContainerPoolTest(watch.GpuMemWatchPoolTest):
    def setUp(self):
        super().setUp()
        self.podman_args = ["--root", os.path.join(self.dir, "storage"),
                            "--runroot", os.path.join(self.dir, "run"),
                            "--storage-driver", "vfs"]
        rootfs = os.path.join(self.dir, "rootfs")
        for d in ("bin", "proc", "sys", "dev", "etc", "tmp"):
            os.makedirs(os.path.join(rootfs, d))
        shutil.copy(BUSYBOX, os.path.join(rootfs, "bin", "busybox"))
        for tool in ("sh", "sleep", "cat"):
            os.symlink("busybox", os.path.join(rootfs, "bin", tool))
        tar = os.path.join(self.dir, "rootfs.tar")
        subprocess.run(["tar", "-C", rootfs, "-cf", tar, "."], check=True)
        # Stand-in device nodes (/dev/null's numbers) for the node's CDI spec.
        self.dev = os.path.join(self.dir, "dev")
        os.makedirs(self.dev)
        st = os.stat("/dev/null")
        for n in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
            os.mknod(os.path.join(self.dev, n), 0o666 | 0o020000, st.st_rdev)
        self.image = "localhost/gpupool-memwatch-%d:1" % os.getpid()
        self.podman("import", "--quiet", tar, self.image)

    def tearDown(self):
        try:
            self.podman("rm", "--all", "--force", "--time", "0", check=False)
            self.podman("rmi", "--all", "--force", check=False)
        finally:
            super().tearDown()

    def podman(self, *args, check=True):
        r = subprocess.run(["podman"] + self.podman_args + list(args), capture_output=True,
                           text=True, timeout=120)
        if check and r.returncode != 0:
            raise RuntimeError("podman %s: %s" % (" ".join(args), r.stderr))
        return r

    def up_command(self, *extra):
        kind = "gpupool-memwatch-%d.example/gpu" % os.getpid()
        return super().up_command(*(["--podman-arg=" + a for a in self.podman_args] +
                                    ["--cdi-kind", kind, "--dev-root", self.dev] +
                                    list(extra)))

    def container_pid(self, jid):
        """The host pid of job JID's running container."""
        def running():
            r = self.podman("ps", "--filter", "status=running", "--format", "{{.Names}}",
                            check=False)
            names = [n for n in r.stdout.split() if n.startswith("gpupool-job-%d-" % jid)]
            return names[0] if names else None
        wait_for("job %d's container" % jid, running)
        r = self.podman("inspect", "--format", "{{.State.Pid}}", running())
        return int(r.stdout.strip())

    def test_a_container_share_over_its_memory_is_killed_and_fails(self):
        self.start()
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, "--gpu-mem", "2G",
                     "--image", self.image, "--", "sleep", "300")
        self.assertEqual(r.returncode, 0, r.stderr)
        jid = int(r.stdout.split()[-1])
        pooltest.wait_job(self.job, jid, ("RUNNING",), 60, log=self.server_log)
        pid = self.container_pid(jid)
        with open("/proc/%d/cgroup" % pid) as f:
            cgroups = f.read()
        self.assertIn("/gpupool/job-%d-" % jid, cgroups)
        self.set_processes([(pid, 4 * GIB)])
        j = pooltest.wait_job(self.job, jid, pooltest.FINAL_STATES, 30, log=self.server_log)
        self.assertEqual(j["state"], "FAILED", j)
        self.assertIn("its processes used 4096 MiB of GPU 0", j["reason"])
        self.assertIn("stopped by the node's GPU memory watch", j["reason"])

    # The base class's own cases run in gpu_mem_watch_pool_test.
    test_a_share_over_its_memory_and_the_slack_is_killed_and_fails_saying_why = None
    test_a_bad_slack_is_refused_naming_the_flag = None


if __name__ == "__main__":
    why = skip_reason()
    if why:
        print("gpu_mem_watch_container_pool_test: " + why)
        sys.exit(77)
    unittest.main()
