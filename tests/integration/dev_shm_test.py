#!/usr/bin/env python3
"""A process job's own /dev/shm (docs/security.md, "Shared memory and /dev/shm"), end to
end on a fake node:
  1. What job A writes to /dev/shm is not on the host's /dev/shm while it runs, another
     user's job B running beside it does not see it, `gpupool exec` into A does, and
     once A has ended it is gone: neither the host nor a later job C sees it.
  2. An agent run with --shared-dev-shm: jobs share the host's /dev/shm and are told so.

Needs root (mount namespaces; jobs of another user). Usage: dev_shm_test.py PATH_TO_GPUPOOL
"""
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "node-4gpu.json")
NOBODY = 65534
FINAL = pooltest.FINAL_STATES


def can_mount():
    r = subprocess.run(["unshare", "-m", "sh", "-c",
                        "mount --make-rslave / && mount -t tmpfs tmpfs /dev/shm"],
                       capture_output=True)
    return r.returncode == 0


class DevShmTest(unittest.TestCase):
    extra_args = ()

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (mount namespaces, jobs of another user)")
        if not can_mount():
            self.skipTest("no mount namespaces here")
        self.pool = pooltest.FakeNodePool(GPUPOOL, NODE, "gp-devshm-",
                                          extra_args=["--telemetry-interval", "0"] +
                                          list(self.extra_args))
        self.cli = self.pool.cli
        self.work = os.path.join(self.pool.dir, "work")  # nobody's jobs write here too
        os.mkdir(self.work)
        os.chmod(self.work, 0o777)
        self.file = "/dev/shm/gp-devshm-test-%d" % os.getpid()

    def tearDown(self):
        if pooltest.test_failed(self):
            sys.stderr.write(self.pool.server_log())
        self.pool.stop()
        if os.path.exists(self.file):
            os.remove(self.file)

    def submit(self, script, nobody=False):
        argv = ["submit", "-D", self.work, "--cpus", "0.1", "--mem", "256M", "--",
                "sh", "-c", script]
        if nobody:
            r = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                                "--clear-groups", GPUPOOL] + argv, capture_output=True,
                               text=True, env=self.pool.env, timeout=60, cwd=self.work)
        else:
            r = self.cli(*argv)
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.split()[-1])

    def ended(self, jid):
        j = pooltest.wait_job(self.pool.job, jid, FINAL, 30, log=self.pool.server_log)
        self.assertEqual(j["state"], "SUCCEEDED", j)
        return j

    def output(self, jid):
        r = self.cli("logs", str(jid))
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def see_script(self):
        return "echo $GPUPOOL_DEV_SHM; if [ -e %s ]; then echo seen; else echo unseen; fi" % (
            self.file)


class PrivateDevShmTest(DevShmTest):
    def test_a_jobs_dev_shm_is_its_own_and_goes_with_it(self):
        ready = os.path.join(self.work, "a-ready")
        a = self.submit("dd if=/dev/zero of=%s bs=1M count=8 2>/dev/null && chmod 644 %s && "
                        "touch %s && while [ ! -e %s/go-a ] && [ ! -e %s/go-all ]; do "
                        "sleep 0.05; done" % (self.file, self.file, ready, self.pool.out,
                                              self.pool.out))
        pooltest.wait_for("job A's file", lambda: os.path.exists(ready))
        self.assertFalse(os.path.exists(self.file), "job A's file is on the host's /dev/shm")
        # Another user's job beside it: its own /dev/shm, without A's file.
        b = self.submit(self.see_script(), nobody=True)
        self.ended(b)
        self.assertEqual(self.output(b), "private\nunseen\n")
        # gpupool exec into A enters A's mount namespace: A's file, 8 MiB of it.
        r = self.cli("exec", "--job", str(a), "--", "sh", "-c",
                     "stat -c %%s %s; echo $GPUPOOL_DEV_SHM" % self.file)
        self.assertEqual((r.returncode, r.stdout), (0, "%d\nprivate\n" % (8 << 20)), r.stderr)
        open(os.path.join(self.pool.out, "go-a"), "w").close()
        self.ended(a)
        self.assertFalse(os.path.exists(self.file))
        c = self.submit(self.see_script())
        self.ended(c)
        self.assertEqual(self.output(c), "private\nunseen\n")


class SharedDevShmTest(DevShmTest):
    extra_args = ("--shared-dev-shm",)

    def test_the_admins_opt_out_shares_dev_shm_and_says_so(self):
        a = self.submit("touch %s" % self.file)
        self.ended(a)
        self.assertTrue(os.path.exists(self.file))
        c = self.submit(self.see_script())
        self.ended(c)
        self.assertEqual(self.output(c), "shared\nseen\n")
        self.assertIn("process jobs share the host's /dev/shm (--shared-dev-shm)",
                      self.pool.server_log())


if __name__ == "__main__":
    unittest.main()
