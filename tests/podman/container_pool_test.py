#!/usr/bin/env python3
"""End to end: container jobs and environment checks through a real `gpupool up`.

A fake 2-GPU H100 node whose driver is 550.54.15 (CUDA 12.4), stand-in device nodes
(mknod with /dev/null's numbers), and two images built here from busybox-static and
imported into a private podman store (--root/--runroot under a temp dir, vfs driver):

  localhost/gpupool-itest-cu124:1  CUDA runtime 12.4 and sm_90 SASS  -> runs
  localhost/gpupool-itest-cu130:1  CUDA runtime 13.0                 -> needs driver >= 580

  localhost/gpupool-itest-glibc:1  glibc, ldconfig and a dlopen probe, as a stock CUDA
                                   image has them (no CUDA)

Checks: a container job sees exactly its GPU's device node plus the control nodes and
its variables, runs as the submitting user, gets its working directory and a read-only
mount; the CUDA 13 image is refused at submit with the driver message and by `env check`;
named environments (add, list, submit --env, immutability, removal refused while used);
cancel stops the container and leaves nothing behind in podman. The node's driver
libraries are not on this machine (as with the example nodes), so the agent mounts
stand-ins, and a job finds libcuda.so.1 by SONAME (issue 15 A.1).

Usage: container_pool_test.py PATH/TO/gpupool [PATH/TO/dlopen-probe]. Exit 77 = skipped
(ctest SKIP_RETURN_CODE).
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
PROBE = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else None
# The stand-in nvidia-cuda-mps-control (tests/fakelib/mps): the pool's GPUs are then in
# MPS mode, which only shares notice (whole-GPU jobs are told "exclusive").
MPS_CONTROL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else None
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
FIXTURES = os.path.join(HERE, "..", "fixtures", "envcheck")
UUIDS = ["GPU-c0c0c0c0-1111-2222-3333-00000000000%d" % i for i in range(2)]
# Where the example nodes' driver is; a machine that has a driver there gets an odd
# directory instead, so the node's libraries are never this machine's.
FAKE_LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
if os.path.exists(FAKE_LIBCUDA):
    FAKE_LIBCUDA = "/usr/lib/gpupool-itest-no-driver/libcuda.so.550.54.15"


def is_static(path):
    r = subprocess.run(["ldd", path], capture_output=True, text=True)
    return "=>" not in r.stdout


def static_ldconfig():
    for p in ("/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.access(p, os.X_OK) and is_static(p):
            return p
    return None


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (mknod, rootful podman, jobs as other users)"
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return "%s is not installed: run scripts/install-deps.sh" % tool
    bb = shutil.which("busybox")
    if bb is None or not is_static(bb):
        return "a static busybox is needed to build the test images (busybox-static)"
    if PROBE is None or not os.path.exists(PROBE):
        return "the dlopen probe (tests/podman/stand_in_driver) is not built"
    if static_ldconfig() is None:
        return "no static ldconfig on this host to put in the glibc test image"
    if not os.path.exists(os.path.join(FIXTURES, "sm90.so")):
        return "tests/fixtures/envcheck/sm90.so is missing"
    return None


class Env:
    """Temp dir, stand-in devices, private podman store, images, node file, a pool."""

    def __init__(self):
        self.dir = pooltest.make_test_dir("gp-ctr-")
        self.kind = "gpupool-itest-%d.example/gpu" % os.getpid()
        self.podman_args = ["--root", os.path.join(self.dir, "storage"),
                            "--runroot", os.path.join(self.dir, "run"),
                            "--storage-driver", "vfs"]
        self.dev = os.path.join(self.dir, "dev")
        os.makedirs(self.dev)
        st = os.stat("/dev/null")
        for n in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
            os.mknod(os.path.join(self.dev, n), 0o666 | 0o020000, st.st_rdev)
        lib = os.path.join(self.dir, "lib")
        os.makedirs(lib)
        self.lib = os.path.join(lib, "libnvidia-ml.so.550.54.15")
        with open(self.lib, "w") as f:
            f.write("stand-in driver library\n")
        self.node = os.path.join(self.dir, "node.json")
        gpus = []
        for i, uuid in enumerate(UUIDS):
            gpus.append({"vendor": "nvidia", "index": i, "name": "NVIDIA H100 80GB HBM3",
                         "uuid": uuid, "pci_bus_id": "0000:%02x:00.0" % (0x18 + i),
                         "memory_total_bytes": 85899345920, "compute_capability": "9.0",
                         "minor_number": i, "device_nodes": ["/dev/nvidia%d" % i]})
        with open(self.node, "w") as f:
            json.dump({"schema": "gpupool.node/v1", "hostname": "ctest",
                       "drivers": {"nvidia": {
                           "version": "550.54.15", "runtime_version": "12.4",
                           "libraries": [self.lib, FAKE_LIBCUDA],
                           "control_nodes": ["/dev/nvidiactl", "/dev/nvidia-uvm",
                                             "/dev/nvidia-uvm-tools"]}},
                       "gpus": gpus}, f)
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.data)
        with open(os.path.join(self.data, "hello.txt"), "w") as f:
            f.write("data for the job\n")
        os.chmod(self.data, 0o755)
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work)
        os.chown(self.work, 65534, 65534)
        self.image("localhost/gpupool-itest-cu124:1", {"usr/lib/libcudart.so.12.4.127": b"",
                                                       "app/kernels.so": None})
        self.image("localhost/gpupool-itest-cu130:1", {"usr/lib/libcudart.so.13.0.48": b""})
        self.glibc_image("localhost/gpupool-itest-glibc:1")
        self.pool = None

    def podman(self, *args, check=True):
        r = subprocess.run(["podman"] + self.podman_args + list(args), capture_output=True,
                           text=True)
        if check and r.returncode != 0:
            raise RuntimeError("podman %s: %s" % (" ".join(args), r.stderr))
        return r

    def image(self, ref, extra):
        tar_path = os.path.join(self.dir, "rootfs.tar")
        with tarfile.open(tar_path, "w") as tar:
            def add_dir(name):
                ti = tarfile.TarInfo(name)
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                tar.addfile(ti)
            for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "usr", "usr/lib", "app"):
                add_dir(d)
            tar.add(shutil.which("busybox"), "bin/busybox")
            for tool in ("sh", "ls", "env", "cat", "id", "sleep", "pwd", "touch", "echo",
                         "grep", "readlink"):
                ti = tarfile.TarInfo("bin/" + tool)
                ti.type = tarfile.SYMTYPE
                ti.linkname = "busybox"
                tar.addfile(ti)
            for name, content in extra.items():
                if content is None:
                    tar.add(os.path.join(FIXTURES, "sm90.so"), name)
                else:
                    ti = tarfile.TarInfo(name)
                    ti.size = len(content)
                    tar.addfile(ti)
        self.podman("import", tar_path, ref)
        os.unlink(tar_path)

    def glibc_image(self, ref):
        """busybox, the probe with its C library and loader, a static ldconfig, and an
        /etc/ld.so.conf that includes /etc/ld.so.conf.d, as a stock Ubuntu image has."""
        root = os.path.join(self.dir, "glibc-rootfs")
        for d in ("bin", "sbin", "dev", "proc", "sys", "tmp", "usr/local/bin",
                  "etc/ld.so.conf.d"):
            os.makedirs(os.path.join(root, d))
        shutil.copy(shutil.which("busybox"), os.path.join(root, "bin/busybox"))
        for tool in ("sh", "cat", "grep", "id", "ls"):
            os.symlink("busybox", os.path.join(root, "bin", tool))
        shutil.copy(static_ldconfig(), os.path.join(root, "sbin/ldconfig"))
        shutil.copy(PROBE, os.path.join(root, "usr/local/bin/dlopen-probe"))
        ldd = subprocess.run(["ldd", PROBE], capture_output=True, text=True, check=True).stdout
        for word in ldd.split():
            if word.startswith("/"):
                os.makedirs(os.path.dirname(root + word), exist_ok=True)
                shutil.copy(word, root + word)  # follows links: the file at that name
        with open(os.path.join(root, "etc/ld.so.conf"), "w") as f:
            f.write("include /etc/ld.so.conf.d/*.conf\n")
        subprocess.run([static_ldconfig(), "-r", root], check=True)
        tar_path = os.path.join(self.dir, "glibc-rootfs.tar")
        subprocess.run(["tar", "-C", root, "-cf", tar_path, "."], check=True)
        self.podman("import", tar_path, ref)
        os.unlink(tar_path)
        shutil.rmtree(root)

    def start(self):
        cmd = [GPUPOOL, "up", "--state-dir", os.path.join(self.dir, "state"), "--port", "0",
               "--fake", self.node, "--cdi-kind", self.kind, "--dev-root", self.dev]
        cmd += ["--podman-arg=" + a for a in self.podman_args]
        if MPS_CONTROL:
            cmd += ["--gpu-enforcement", "mps", "--mps-control", MPS_CONTROL]
        os.makedirs(os.path.join(self.dir, "state"))
        os.chmod(os.path.join(self.dir, "state"), 0o755)
        self.sock = os.path.join(self.dir, "state", "gpupool.sock")
        self.log_path = os.path.join(self.dir, "up.log")
        with open(self.log_path, "ab") as log:
            self.pool = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            r = self.cli("nodes", "--json", check=False)
            up = [n["name"] for n in json.loads(r.stdout)["nodes"] if n["state"] == "up"] \
                if r.returncode == 0 else []
            if up:
                self.node_name = up[0]  # the agent's node name (the host name by default)
                return
            if self.pool.poll() is not None:
                raise RuntimeError("gpupool up exited:\n" + self.log())
            time.sleep(0.1)
        raise RuntimeError("the pool did not come up:\n" + self.log())

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]

    def cli(self, *args, user=None, check=True):
        cmd = [GPUPOOL] + list(args)
        env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.sock)
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=self.work)
        if check and r.returncode != 0:
            raise AssertionError("%s failed (%d): %s%s" % (" ".join(args), r.returncode,
                                                          r.stdout, r.stderr))
        return r

    def job(self, jid):
        return json.loads(self.cli("show", str(jid), "--json").stdout)["job"]

    def wait(self, jid, states, timeout=60):
        return pooltest.wait_job(self.job, jid, states, timeout, poll=0.2, log=self.log)

    def stop(self):
        pooltest.stop_processes([self.pool], timeout=15)
        pooltest.kill_leftovers(self.dir)
        for c in self.podman("ps", "-a", "-q", check=False).stdout.split():
            self.podman("rm", "-f", c, check=False)
        self.podman("rmi", "-a", "-f", check=False)
        subprocess.run(["rm", "-f", "/var/run/cdi/gpupool-" + self.kind.replace("/", "-")
                        .replace(".", "-") + ".json"], check=False)
        pooltest.remove_dir(self.dir)


def submitted_id(r):
    for word in r.stdout.split():
        if word.isdigit():
            return int(word)
    raise AssertionError("no job id in: " + r.stdout)


class ContainerPoolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.env = Env()
        try:
            cls.env.start()
        except Exception:
            cls.env.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()

    def test_container_job_sees_exactly_its_gpu(self):
        e = self.env
        r = e.cli("submit", "--gpus", "1", "--cpus", "0.1", "--image",
                  "localhost/gpupool-itest-cu124:1", "--mount", e.data + ":/data:ro",
                  "--", "sh", "-c",
                  "ls /dev; echo ENV; env; echo ID $(id -u):$(id -g); echo PWD $(pwd); "
                  "cat /data/hello.txt; touch /data/x 2>/dev/null && echo DATA-WRITABLE; "
                  "echo made > out.txt", user=65534)
        jid = submitted_id(r)
        j = e.wait(jid, pooltest.FINAL_STATES)
        out = e.cli("logs", str(jid), user=65534).stdout
        self.assertEqual(j["state"], "SUCCEEDED", (j, out, e.log()))
        lines = out.splitlines()
        granted = j["placement"][0]["gpu_indices"][0]
        self.assertIn("nvidia%d" % granted, lines)
        self.assertNotIn("nvidia%d" % (1 - granted), lines)
        for ctl in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
            self.assertIn(ctl, lines)
        self.assertIn("CUDA_VISIBLE_DEVICES=" + UUIDS[granted], lines)
        self.assertIn("GPUPOOL_JOB_ID=%d" % jid, lines)
        self.assertIn("ID 65534:65534", lines)
        self.assertIn("PWD " + e.work, lines)
        self.assertIn("data for the job", lines)
        self.assertNotIn("DATA-WRITABLE", lines)
        with open(os.path.join(e.work, "out.txt")) as f:
            self.assertEqual(f.read(), "made\n")
        self.assertEqual(e.job(jid)["needs"]["cuda"], "12.4")

    def test_container_share_on_an_mps_gpu_is_a_client_of_its_daemon(self):
        """A container share on a GPU in MPS mode (docs/sharing.md) gets the daemon's pipe
        folder at its node path, the share's MPS limits, and the host's IPC namespace; the
        daemon starts for it and quits after it."""
        if not MPS_CONTROL:
            self.skipTest("no stand-in nvidia-cuda-mps-control given")
        e = self.env
        r = e.cli("submit", "--gpu-share", "0.25", "--cpus", "0.1", "--image",
                  "localhost/gpupool-itest-cu124:1", "--", "sh", "-c",
                  "env | grep -E '^(CUDA_MPS|GPUPOOL_GPU)'; echo ipc=$(readlink /proc/self/ns/ipc); "
                  "touch $CUDA_MPS_PIPE_DIRECTORY/probe && echo PIPE-WRITABLE", user=65534)
        jid = submitted_id(r)
        j = e.wait(jid, pooltest.FINAL_STATES)
        self.assertEqual(j["state"], "SUCCEEDED", (j, e.log()))
        lines = e.cli("logs", str(jid), user=65534).stdout.splitlines()
        uuid = j["placement"][0]["gpu_uuids"][0]
        pipe = os.path.join(self.env.dir, "state", "agent", "mps", uuid, "pipe")
        self.assertIn("GPUPOOL_GPU_ENFORCEMENT=mps", lines)
        self.assertIn("CUDA_MPS_PIPE_DIRECTORY=" + pipe, lines)
        self.assertIn("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", lines)
        self.assertIn("ipc=" + os.readlink("/proc/self/ns/ipc"), lines)
        self.assertIn("PIPE-WRITABLE", lines)
        # The daemon went with its last client.
        pooltest.wait_for("the MPS daemon to quit", lambda: not os.path.exists(pipe))

    def test_container_job_runs_its_script_copy_and_exports_only_when_asked(self):
        """A submitted script's copy runs in the container (mounted from the run directory);
        -o is created as the user; the submitting shell's variables go in only with
        --export (docs/containers.md)."""
        e = self.env
        script = os.path.join(e.work, "cjob.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho script in container FOO=[$FOO_FROM_HOST] $(id -u)\n")
        os.chmod(script, 0o755)
        os.environ["FOO_FROM_HOST"] = "bar"
        try:
            ids = [submitted_id(e.cli("submit", "--gpus", "1", "--cpus", "0.1", "--image",
                                      "localhost/gpupool-itest-cu124:1", "-o", "c-%j.out",
                                      *extra, "cjob.sh", user=65534))
                   for extra in ([], ["--export=FOO_FROM_HOST"])]
        finally:
            del os.environ["FOO_FROM_HOST"]
        os.unlink(script)  # the copy runs
        for jid, foo in zip(ids, ("", "bar")):
            j = e.wait(jid, pooltest.FINAL_STATES)
            out = os.path.join(e.work, "c-%d.out" % jid)
            self.assertEqual(j["state"], "SUCCEEDED", (j, e.log()))
            with open(out) as f:
                self.assertEqual(f.read(), "script in container FOO=[%s] 65534\n" % foo)
            self.assertEqual(os.stat(out).st_uid, 65534)
            self.assertEqual(j["tasks"][0]["stdout_path"], out)

    def test_exec_into_a_container_job_runs_beside_it(self):
        """`gpupool exec` into a running container job: the command runs in a container of
        its own (named after its session, gpupool-job-<job>-<attempt>-exec<id>), beside the
        task's, with its GPU; the task runs on."""
        e = self.env
        r = e.cli("submit", "--gpus", "1", "--cpus", "0.1", "--image",
                  "localhost/gpupool-itest-cu124:1", "--", "sh", "-c",
                  "echo task-up; sleep 60", user=65534)
        jid = submitted_id(r)
        e.wait(jid, ["RUNNING"])
        x = e.cli("exec", "--job", str(jid), "--", "sh", "-c", "echo in-exec $CUDA_VISIBLE_DEVICES",
                  user=65534, check=False)
        names = e.podman("ps", "-a", "--format", "{{.Names}}", check=False).stdout
        e.cli("cancel", str(jid), user=65534)
        j = e.wait(jid, pooltest.FINAL_STATES)
        self.assertEqual(x.returncode, 0, (x.stdout, x.stderr, e.log()))
        granted = j["placement"][0]["gpu_indices"][0]
        self.assertEqual(x.stdout.strip(), "in-exec " + UUIDS[granted])
        self.assertIn("gpupool-job-%d-1" % jid, names.split())
        self.assertEqual(j["state"], "CANCELLED", j)

    def test_cancel_signal_reaches_the_container_and_batch_only_its_main_process(self):
        """gpupool cancel --signal USR1 (scancel --signal) reaches every process in a
        container job, as it does a process job's; with -b (--batch) only the main
        process (under --init, catatonit's child; before, every signal went to PID 1
        alone and a process the main one started never got it)."""
        e = self.env
        for f in ("sig-main", "sig-child", "sig-ready"):
            if os.path.exists(os.path.join(e.work, f)):
                os.unlink(os.path.join(e.work, f))
        child = ("trap 'echo usr1 >> sig-child' USR1; touch sig-ready; "
                 "while :; do sleep 0.1; done")
        r = e.cli("submit", "--gpus", "1", "--cpus", "0.1", "--image",
                  "localhost/gpupool-itest-cu124:1", "--", "sh", "-c",
                  "trap 'echo usr1 >> sig-main' USR1; sh -c \"%s\" & "
                  "while :; do sleep 0.1; done" % child, user=65534)
        jid = submitted_id(r)
        e.wait(jid, ["RUNNING"])

        def lines(name):
            try:
                with open(os.path.join(e.work, name)) as f:
                    return f.read().splitlines()
            except FileNotFoundError:
                return []
        try:
            pooltest.wait_for("the job's child to trap USR1",
                              lambda: os.path.exists(os.path.join(e.work, "sig-ready")))
            b = e.cli("cancel", "--signal", "USR1", "-b", str(jid), user=65534)
            self.assertEqual(b.stdout, "Signal USR1 sent to job %d (1 task)\n" % jid)
            pooltest.wait_for("the batch-only USR1 to reach the main process",
                              lambda: lines("sig-main") == ["usr1"])
            a = e.cli("cancel", "--signal", "USR1", str(jid), user=65534)
            self.assertEqual(a.stdout, "Signal USR1 sent to job %d (1 task)\n" % jid)
            pooltest.wait_for("USR1 to reach every process of the container",
                              lambda: len(lines("sig-main")) == 2 and lines("sig-child"))
            # -b reached the main process only: the child has the second signal alone.
            self.assertEqual(lines("sig-child"), ["usr1"])
            self.assertEqual(e.job(jid)["state"], "RUNNING")
        finally:
            e.cli("cancel", str(jid), user=65534)
        e.wait(jid, pooltest.FINAL_STATES)

    def test_fake_node_gpu_job_finds_stand_in_driver_by_soname(self):
        """Issue 15 A.1: a fake node (--fake, --dev-root) whose driver libraries are not on
        this machine. Before, every GPU container job failed with "command 'sh' not found
        in image" (runc could not mount the missing library); now the agent mounts
        stand-ins with the driver's SONAMEs, and its hook links and caches them."""
        e = self.env
        r = e.cli("submit", "--gpus", "1", "--cpus", "0.1", "--image",
                  "localhost/gpupool-itest-glibc:1", "--", "sh", "-c",
                  "ldconfig -p; dlopen-probe libcuda.so.1 libnvidia-ml.so.1", user=65534)
        jid = submitted_id(r)
        j = e.wait(jid, pooltest.FINAL_STATES)
        out = e.cli("logs", str(jid), user=65534).stdout
        self.assertEqual(j["state"], "SUCCEEDED", (j, out, e.log()))
        libdir = os.path.dirname(FAKE_LIBCUDA)
        self.assertRegex(out, r"libcuda\.so\.1 \(libc6[^)]*\) => %s/libcuda\.so\.1\n"
                         % libdir.replace(".", r"\."))
        self.assertIn("dlopen libcuda.so.1: ok", out.splitlines())
        self.assertIn("dlopen libnvidia-ml.so.1: ok", out.splitlines())
        self.assertIn("stand-in driver libraries for the fake node", e.log())

    def test_image_needing_a_newer_driver_is_refused_before_launch(self):
        e = self.env
        r = e.cli("submit", "--gpus", "1", "--image", "localhost/gpupool-itest-cu130:1",
                  "--", "true", check=False)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("needs CUDA 13.0 -> driver >= 580", r.stderr)
        self.assertIn("node %s has 550.54.15" % e.node_name, r.stderr)
        c = e.cli("env", "check", "localhost/gpupool-itest-cu130:1", check=False)
        self.assertEqual(c.returncode, 1, c.stdout + c.stderr)
        self.assertIn("NO: node %s: needs CUDA 13.0 -> driver >= 580" % e.node_name, c.stdout)
        ok = e.cli("env", "check", "localhost/gpupool-itest-cu124:1")
        self.assertIn("OK: node %s can run" % e.node_name, ok.stdout)
        queue = e.cli("queue", "--json").stdout
        self.assertNotIn("cu130", queue)  # nothing was queued

    def test_named_environments(self):
        e = self.env
        e.cli("env", "add", "itest:1", "--image", "localhost/gpupool-itest-cu124:1")
        dup = e.cli("env", "add", "itest:1", "--image", "localhost/gpupool-itest-cu130:1",
                    check=False)
        self.assertNotEqual(dup.returncode, 0)
        self.assertIn("immutable", dup.stderr)
        new = e.cli("env", "add", "itest:2", "--image", "localhost/gpupool-itest-cu130:1")
        self.assertIn("13.0", new.stdout)
        listing = e.cli("env", "list").stdout
        self.assertIn("itest:1", listing)
        self.assertIn("itest:2", listing)
        refused = e.cli("submit", "--gpus", "1", "--env", "itest:2", "--", "true", check=False)
        self.assertIn("driver >= 580", refused.stderr)
        r = e.cli("submit", "--gpus", "1", "--cpus", "0.1", "--env", "itest:1", "--",
                  "sleep", "300")
        jid = submitted_id(r)
        e.wait(jid, ("RUNNING",))
        busy = e.cli("env", "rm", "itest:1", check=False)
        self.assertNotEqual(busy.returncode, 0)
        self.assertIn("used by 1 queued or running job (%d)" % jid, busy.stderr)
        e.cli("cancel", str(jid))
        j = e.wait(jid, ("CANCELLED",), timeout=60)
        self.assertEqual(j["state"], "CANCELLED")
        # The container is gone, not left running under conmon.
        deadline = time.time() + 20
        while time.time() < deadline and e.podman("ps", "-a", "-q").stdout.strip():
            time.sleep(0.2)
        self.assertEqual(e.podman("ps", "-a", "-q").stdout.strip(), "")
        e.cli("env", "rm", "itest:1")
        e.cli("env", "rm", "itest:2")
        self.assertNotIn("itest:1", e.cli("env", "list").stdout)


if __name__ == "__main__":
    why = skip_reason()
    if why:
        print("SKIP: " + why)
        sys.exit(77)
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
