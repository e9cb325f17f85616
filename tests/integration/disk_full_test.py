#!/usr/bin/env python3
"""A node whose disk fills up (docs/health.md): the pool must neither lose a job that
ended while the disk was full, nor fail the jobs sent to that node.

A server, and an agent ("full") whose state directory is a small tmpfs the test fills
with a file; later a second agent ("spare") on an ordinary directory.
  1. A job running on "full" ends while its disk is full: it is not recorded LOST; once
     the file is removed it is SUCCEEDED, with the end time it really had.
  2. A job sent to "full" while its disk is full is not FAILED: it goes back to the
     queue, "full" is drained naming the job and "No space left on device", and the job
     runs on "spare". An admin's resume brings "full" back once the disk has room.
     (Here "full" runs without the disk watch, whose drain would come first.)
  3. With the disk watch (--disk-check-interval 1, the default level: 5% of 4 MiB), a
     disk that fills up drains "full" before any job is sent there ("disk pressure: ..."),
     jobs run on "spare" meanwhile, and "full" returns to service by itself once the
     disk has room again; the same when the filesystem is remounted read-only and back.
  4. The server's store on the full tmpfs (its disk watch off): a submission is refused
     (500, saying the disk is full) and the server logs it; a job that ends meanwhile
     stays RUNNING until its end can be stored, through a kill -9 and restart of the
     server on the full disk, and is then SUCCEEDED with its real end time.
  5. With the store's disk watch, a store disk short of room refuses new jobs (429,
     naming what is short) before it is full, so that a job's end is still recorded at
     once; once there is room again, jobs are taken.

Needs root (tmpfs mounts, jobs as the submitting user); skipped with a message where
the tmpfs cannot be mounted.

Usage: disk_full_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
"""
import os
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE = os.path.join(HERE, "node-4gpu.json")
call = pooltest.call


def read(path):
    with open(path) as f:
        return f.read()


class DiskFullTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (a tmpfs mount, jobs as the submitting user)")
        self.dir = pooltest.make_test_dir("gp-diskfull-")
        self.fs = os.path.join(self.dir, "fullfs")
        os.mkdir(self.fs)
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs",
                                self.fs], capture_output=True, text=True)
        if mount.returncode != 0:
            pooltest.remove_dir(self.dir)
            self.skipTest("cannot mount a tmpfs here: " + mount.stderr.strip())
        self.procs = []
        self.addCleanup(self.clean_up)  # also when the rest of setUp fails

    def start_server(self, state_dir, *flags):
        self.sock = os.path.join(state_dir, "gpupool.sock")
        self.server = self.spawn([GPUPOOL, "server", "--state-dir", state_dir, "--port", "0"]
                                 + list(flags), "server.log")
        pooltest.wait_for("the server", self.server_up, timeout=20)

    def clean_up(self):
        if pooltest.test_failed(self):
            sys.stderr.write(pooltest.log_tails(self.dir, ("server.log", "full.log",
                                                           "spare.log"), 6000))
        pooltest.stop_processes(self.procs)
        for state in (os.path.join(self.fs, "agent"), os.path.join(self.dir, "spare")):
            pooltest.kill_leftovers(state)
        subprocess.run(["umount", "-l", self.fs], check=False)
        pooltest.remove_dir(self.dir)

    def spawn(self, cmd, logname):
        return pooltest.spawn_logged(cmd, os.path.join(self.dir, logname), self.procs)

    def server_up(self):
        try:
            return call(self.sock, "GET", "/v1/whoami")[0] == 200
        except OSError:
            return False

    def start_agent(self, name, state_dir, *flags):
        st, body = call(self.sock, "POST", "/v1/tokens", {"user": name, "kind": "node"})
        self.assertEqual(st, 201, body)
        self.spawn([GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--token", body["token"],
                    "--state-dir", state_dir, "--fake", NODE, "--node-name", name,
                    "--telemetry-interval", "0"] + list(flags), name + ".log")
        pooltest.wait_for("node %s up" % name, lambda: self.node(name).get("state") == "up")

    def node(self, name):
        st, body = call(self.sock, "GET", "/v1/nodes")
        self.assertEqual(st, 200, body)
        return next((n for n in body["nodes"] if n["name"] == name), {})

    def job(self, jid):
        st, body = call(self.sock, "GET", "/v1/jobs/%d" % jid)
        self.assertEqual(st, 200, body)
        return body["job"]

    def submit(self, command):
        st, body = call(self.sock, "POST", "/v1/jobs",
                        {"command": command, "workdir": self.dir, "request": {"gpus": 1}})
        self.assertEqual(st, 201, body)
        return body["job"]["id"]

    def gated_job(self):
        """Submits a job that runs until told to end and waits for it to run. Returns its
        id and a function that ends it and returns when it ended (microseconds, its own
        clock's word)."""
        gate = os.path.join(self.dir, "gate")
        os.mkfifo(gate)
        ended = os.path.join(self.dir, "ended")
        jid = self.submit(["sh", "-c", "read x < %s; date +%%s%%N > %s" % (gate, ended)])
        pooltest.wait_job(self.job, jid, ("RUNNING",), 30)

        def end_it():
            with open(gate, "w") as g:
                g.write("go\n")
            pooltest.wait_for("the job's end", lambda: os.path.exists(ended) and
                              os.path.getsize(ended) > 0)
            with open(ended) as f:
                return int(f.read().strip()) // 1000
        return jid, end_it

    def fill(self):
        """Fills the tmpfs: writes until the kernel says it is full. Unbuffered: a buffered
        file's close would try the rest of its buffer again and fail the same way."""
        fd = os.open(os.path.join(self.fs, "filler"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError:
            pass
        finally:
            os.close(fd)

    def test_a_full_disk_neither_loses_nor_fails_jobs(self):
        self.start_server(self.dir)
        self.start_agent("full", os.path.join(self.fs, "agent"), "--disk-min-free", "off")
        first, end_it = self.gated_job()
        self.fill()
        ended_us = end_it()
        # 2. A job sent to the full node goes back to the queue and the node is drained.
        second = self.submit(["true"])
        drained = pooltest.wait_for(
            "node full drained", lambda: self.node("full").get("drain_reason"))
        self.assertIn("could not start job %d" % second, drained)
        self.assertIn("No space left on device", drained)
        # Meanwhile the first job's supervisor could not write its status. Before the fix it
        # gave up at once, and the agent, which watches it on a pidfd, reported the job
        # LOST at once: long before the round trip of the second job above.
        self.assertEqual(self.job(first)["state"], "RUNNING")
        j = pooltest.wait_job(self.job, second, ("PENDING",), 30)
        self.assertIn("No space left on device", j["reason"])
        self.assertEqual(j.get("launch_failures"), 1)
        self.start_agent("spare", os.path.join(self.dir, "spare"))
        j = pooltest.wait_job(self.job, second, ("SUCCEEDED",), 60)
        self.assertEqual(j["placement"][0]["node"], "spare")
        self.assertEqual(j["attempt"], 2)

        # 1, continued: the disk has room again; the first job ended as it really did.
        os.remove(os.path.join(self.fs, "filler"))
        j = pooltest.wait_job(self.job, first, ("SUCCEEDED",), 60)
        self.assertEqual(j["exit_code"], 0)
        self.assertLessEqual(abs(j["end_time_us"] - ended_us), 2_000_000, j)
        st, body = call(self.sock, "POST", "/v1/nodes/full/resume", {})
        self.assertEqual(st, 200, body)
        self.assertEqual(self.node("full")["state"], "up")

    def test_disk_pressure_drains_the_node_until_it_has_room(self):
        self.start_server(self.dir)
        self.start_agent("full", os.path.join(self.fs, "agent"), "--disk-check-interval", "1")
        self.start_agent("spare", os.path.join(self.dir, "spare"))
        filled = time.monotonic()
        self.fill()
        drained = pooltest.wait_for(
            "node full drained", lambda: self.node("full").get("drain_reason"), timeout=20)
        drained_s = time.monotonic() - filled
        self.assertTrue(drained.startswith("disk pressure: "), drained)
        self.assertRegex(drained, r"agent has \d+(\.\d)? (B|KiB) free of 4 MiB, below the "
                         r"agent's --disk-min-free of 205 KiB \(the default")
        self.assertEqual(self.node("spare").get("state"), "up")
        self.assertTrue(self.node("full")["disk"]["pressure"])
        st, metrics = call(self.sock, "GET", "/metrics")
        self.assertEqual(st, 200, metrics)
        self.assertIn(b'gpupool_node_disk_pressure{Hostname="full"} 1\n', metrics)
        self.assertIn(b'gpupool_node_disk_pressure{Hostname="spare"} 0\n', metrics)
        # Meanwhile jobs run on "spare", and none was ever sent to "full".
        for _ in range(3):
            j = pooltest.wait_job(self.job, self.submit(["true"]), ("SUCCEEDED",), 60)
            self.assertEqual(j["placement"][0]["node"], "spare")
            self.assertEqual(j["attempt"], 1)
            self.assertFalse(j.get("launch_failures"))
        # The node's lease (docs/health.md) is renewed all the same: on the full disk its
        # line is overwritten in place, else its supervisors would stop --requeue jobs.
        lease = os.path.join(self.fs, "agent", "agent", "node_lease")
        first = read(lease)
        pooltest.wait_for("the lease renewed on the full disk", lambda: read(lease) != first,
                          timeout=30)
        removed = time.monotonic()
        os.remove(os.path.join(self.fs, "filler"))
        pooltest.wait_for("node full back in service",
                          lambda: self.node("full").get("state") == "up", timeout=20)
        self.assertFalse(self.node("full").get("drain_reason"))
        back_s = time.monotonic() - removed
        # A filesystem remounted read-only (as ext4 does after errors) is pressure too.
        subprocess.run(["mount", "-o", "remount,ro", self.fs], check=True)
        drained = pooltest.wait_for(
            "node full drained", lambda: self.node("full").get("drain_reason"), timeout=20)
        self.assertRegex(drained, r"^disk pressure: .*/agent is on a read-only filesystem")
        subprocess.run(["mount", "-o", "remount,rw", self.fs], check=True)
        pooltest.wait_for("node full back in service",
                          lambda: self.node("full").get("state") == "up", timeout=20)
        sys.stderr.write("disk watch: drained %.2f s after the fill, back in service %.2f s "
                         "after the file was removed\n" % (drained_s, back_s))

    def test_the_controllers_full_disk_loses_no_job_and_is_logged(self):
        """The server's store on the full disk: what cannot be written is refused, saying
        why, and logged by the server; a restart on the full disk comes up; once there is
        room, every job ends as it really did. (Without the store's disk watch, whose
        refusals would come first: the next test.)"""
        self.start_server(os.path.join(self.fs, "server"), "--disk-min-free", "off")
        self.start_agent("spare", os.path.join(self.dir, "spare"))
        first, end_it = self.gated_job()
        self.fill()
        st, body = call(self.sock, "POST", "/v1/jobs",
                        {"command": ["true"], "workdir": self.dir, "request": {"gpus": 1}})
        self.assertEqual(st, 500, body)
        self.assertIn("disk that holds the pool's database is full", body["error"])
        ended_us = end_it()
        log = os.path.join(self.dir, "server.log")
        # The agent's report of that end cannot be stored: the server's log says so (it
        # said nothing before: a 500 was only the caller's news).
        pooltest.wait_for("the server's log of its failing writes", lambda: "API POST "
                          "/v1/agent/events: 500 sqlite: database or disk is full" in read(log))
        self.assertIn("API POST /v1/jobs: 500 sqlite: database or disk is full", read(log))
        self.assertEqual(self.job(first)["state"], "RUNNING")
        # kill -9 and a restart on the full disk: it comes up with what it had stored.
        self.server.kill()
        self.server.wait()
        self.start_server(os.path.join(self.fs, "server"), "--disk-min-free", "off")
        self.assertEqual(self.job(first)["state"], "RUNNING")
        os.remove(os.path.join(self.fs, "filler"))
        j = pooltest.wait_job(self.job, first, ("SUCCEEDED",), 60)
        self.assertLessEqual(abs(j["end_time_us"] - ended_us), 2_000_000, j)
        second = pooltest.wait_job(self.job, self.submit(["true"]), ("SUCCEEDED",), 60)
        self.assertEqual(second["attempt"], 1)

    def test_the_store_disk_watch_refuses_new_jobs_and_keeps_room_for_the_rest(self):
        """With the store's disk watch (--disk-check-interval 1, the default level: 5% of
        the 4 MiB tmpfs), a store disk short of room refuses new jobs, naming what is
        short, while a running job's end is still recorded at once (the room was kept for
        it); once there is room again, jobs are taken."""
        self.start_server(os.path.join(self.fs, "server"), "--disk-check-interval", "1")
        self.start_agent("spare", os.path.join(self.dir, "spare"))
        first, end_it = self.gated_job()
        self.fill()
        filler = os.path.join(self.fs, "filler")
        os.truncate(filler, os.path.getsize(filler) - 150 * 1024)  # below the level
        log = os.path.join(self.dir, "server.log")
        pooltest.wait_for("the server's log of the pressure",
                          lambda: "the store's disk is short of room" in read(log))
        st, body = call(self.sock, "POST", "/v1/jobs",
                        {"command": ["true"], "workdir": self.dir, "request": {"gpus": 1}})
        self.assertEqual(st, 429, body)  # as a bound on the queue: try again later
        self.assertIn("the disk that holds the pool's database is short of room", body["error"])
        self.assertIn("below the server's --disk-min-free", body["error"])
        cli = subprocess.run([GPUPOOL, "submit", "--server", "unix:" + self.sock, "--gpus", "1",
                              "--", "true"], capture_output=True, text=True, cwd=self.dir)
        self.assertNotEqual(cli.returncode, 0, cli.stdout)
        self.assertIn("short of room", cli.stderr)
        # The job in the pool ends as it did, without waiting for room.
        ended_us = end_it()
        j = pooltest.wait_job(self.job, first, ("SUCCEEDED",), 30)
        self.assertLessEqual(abs(j["end_time_us"] - ended_us), 2_000_000, j)
        os.remove(filler)
        pooltest.wait_for("the server's log of the room's return",
                          lambda: "the store's disk has room again" in read(log))
        second = pooltest.wait_job(self.job, self.submit(["true"]), ("SUCCEEDED",), 60)
        self.assertEqual(second["attempt"], 1)


if __name__ == "__main__":
    unittest.main()
