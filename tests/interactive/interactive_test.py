#!/usr/bin/env python3
"""Interactive jobs end to end (docs/cli.md, "Interactive jobs"): a real `gpupool up` on a
fake 4-GPU node, and `gpupool run`, `gpupool alloc` and `gpupool exec --pty/-i` as a
user runs them, on pipes and on a real pseudo-terminal (Python's pty module stands in for
the user's terminal emulator): stdin, stdout and stderr, the exit status, the window size
and its changes, ^C reaching the job, ^C while waiting, and a terminal that goes away.

Usage: interactive_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
"""
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
CLIENT_TIMEOUT_S = 2  # the server's --exec-client-timeout


class Pool:
    def __init__(self, kill_wait=None):
        self.dir = pooltest.make_test_dir("gp-it-")
        self.sock = os.path.join(self.dir, "gpupool.sock")
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.sock)
        self.env.pop("GPUPOOL_JOB_ID", None)
        log = open(os.path.join(self.dir, "server.log"), "ab")
        extra = ["--kill-wait", kill_wait] if kill_wait else []
        self.proc = subprocess.Popen(
            [GPUPOOL, "up", "--state-dir", self.dir, "--port", "0", "--fake", NODE,
             "--exec-client-timeout", str(CLIENT_TIMEOUT_S)] + extra,
            stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            r = self.cli("nodes")
            if r.returncode == 0 and " up " in r.stdout:
                return
            time.sleep(0.1)
        raise AssertionError("the pool did not come up:\n" + self.log())

    def cli(self, *args, stdin=None, timeout=60):
        return subprocess.run([GPUPOOL] + list(args), input=stdin, capture_output=True,
                              text=True, env=self.env, timeout=timeout, cwd=self.dir)

    def job(self, jid):
        r = self.cli("show", str(jid), "--json")
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        return j.get("job", j)

    def wait(self, jid, states, timeout=30):
        return pooltest.wait_job(self.job, jid, states, timeout, log=self.log)

    def log(self):
        try:
            with open(os.path.join(self.dir, "server.log"), errors="replace") as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    def stop(self):
        pooltest.stop_processes([self.proc])
        pooltest.kill_leftovers(self.dir)
        pooltest.remove_dir(self.dir)


class Terminal:
    """`gpupool ARGS` on a new pseudo-terminal of rows x cols, as a terminal emulator
    would start it: the client's session leader, stdin, stdout and stderr."""

    def __init__(self, pool, args, rows=24, cols=80, env=None):
        self.master, slave = pty.openpty()
        self.resize(rows, cols, fd=slave)
        self.proc = subprocess.Popen([GPUPOOL] + args, stdin=slave, stdout=slave, stderr=slave,
                                     env=env or pool.env, start_new_session=True,
                                     preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.seen = b""

    def resize(self, rows, cols, fd=None):
        fcntl.ioctl(self.master if fd is None else fd, termios.TIOCSWINSZ,
                    struct.pack("HHHH", rows, cols, 0, 0))

    def write(self, data):
        os.write(self.master, data)

    def expect(self, text, timeout=30):
        """Reads until `text` (bytes) was printed; returns everything seen so far."""
        deadline = time.time() + timeout
        while text not in self.seen:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("%r never came; the terminal showed %r" % (text, self.seen))
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: the client is gone
                    chunk = b""
                if not chunk:
                    raise AssertionError("the client ended before %r; it showed %r" %
                                         (text, self.seen))
                self.seen += chunk
        return self.seen

    def finish(self, timeout=30):
        """Waits for the client to exit, reading what is left; returns its exit code."""
        deadline = time.time() + timeout
        while self.proc.poll() is None and time.time() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:
                    pass
        if self.proc.poll() is None:
            self.proc.kill()
            raise AssertionError("the client did not exit; it showed %r" % self.seen)
        return self.proc.returncode

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            os.close(self.master)
        except OSError:
            pass


def job_id_of(text):
    """The id in gpupool's 'gpupool: job N submitted' line."""
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "gpupool:" and words[1] == "job" and \
                words[3] == "submitted":
            return int(words[2])
    raise AssertionError("no 'job N submitted' line in %r" % text)


class InteractiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pool = Pool()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def test_run_relays_stdin_stdout_stderr_and_the_exit_code(self):
        r = self.pool.cli("run", "--gpus", "1", "--", "sh", "-c",
                          'read a; echo "got $a"; echo "gpus $CUDA_VISIBLE_DEVICES" >&2; '
                          'cat; exit 3', stdin="hello\nrest of input\n")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertEqual(r.stdout, "got hello\nrest of input\n")
        self.assertIn("gpus GPU-", r.stderr)
        job = self.pool.wait(job_id_of(r.stderr), pooltest.FINAL_STATES)
        self.assertEqual(job["state"], "FAILED")
        self.assertEqual(job["exit_code"], 3)
        self.assertEqual(job["reason"], "the command exited with code 3")
        # Binary input arrives byte for byte; a command that succeeds makes a job that does.
        data = bytes(range(256)) * 64
        b = subprocess.run([GPUPOOL, "run", "-q", "--", "sha256sum"], input=data,
                           capture_output=True, env=self.pool.env, timeout=60)
        self.assertEqual(b.returncode, 0, b.stderr)
        import hashlib
        self.assertEqual(b.stdout.split()[0].decode(), hashlib.sha256(data).hexdigest())

    def test_pty_has_the_window_size_follows_resizes_and_takes_ctrl_c(self):
        t = Terminal(self.pool, ["run", "--pty", "--gpus", "1", "--", "sh", "-c",
                                 'stty size; tty; trap "stty size" WINCH; '
                                 'trap "echo caught INT; exit 42" INT; echo ready; '
                                 'while :; do sleep 0.1; done'], rows=33, cols=77)
        try:
            seen = t.expect(b"ready")
            self.assertIn(b"33 77", seen)
            self.assertIn(b"/dev/pts/", seen)
            t.resize(40, 100)  # the kernel tells the client (SIGWINCH); it tells the job
            t.expect(b"40 100")
            t.write(b"\x03")  # ^C: a byte through the raw terminal, SIGINT over there
            t.expect(b"caught INT")
            self.assertEqual(t.finish(), 42)
        finally:
            t.close()
        job = self.pool.wait(job_id_of(t.seen.decode(errors="replace")), pooltest.FINAL_STATES)
        self.assertEqual(job["exit_code"], 42)
        self.assertTrue(job.get("pty"))

    def test_the_terminals_type_and_language_reach_run_and_exec_pty(self):
        # Whatever --export says (NONE here), so that clear, top and vi work over there.
        env = dict(self.pool.env, TERM="xterm-256color", LANG="C.UTF-8", LC_CTYPE="C.UTF-8")
        t = Terminal(self.pool, ["run", "--pty", "--export=NONE", "--", "sh", "-c",
                                 'echo "T=$TERM L=$LANG C=$LC_CTYPE H=$HOME"'], env=env)
        try:
            t.expect(b"T=xterm-256color L=C.UTF-8 C=C.UTF-8 H=")
            self.assertEqual(t.finish(), 0)
        finally:
            t.close()
        s = self.pool.cli("submit", "--export=NONE", "--", "sleep", "30")
        jid = int(s.stdout.split()[-1])
        try:
            self.pool.wait(jid, ("RUNNING",))
            t = Terminal(self.pool, ["exec", "--pty", "--job", str(jid), "--", "sh", "-c",
                                     'echo "T=$TERM L=$LANG"'], env=dict(env, TERM="vt220"))
            try:
                t.expect(b"T=vt220 L=C.UTF-8")
                self.assertEqual(t.finish(), 0)
            finally:
                t.close()
        finally:
            self.pool.cli("cancel", str(jid))
            self.pool.wait(jid, pooltest.FINAL_STATES)

    def test_interactive_shell_on_a_pty(self):
        t = Terminal(self.pool, ["run", "--pty", "--", "sh", "-i"])
        try:
            t.expect(b"runs on")
            t.write(b"echo $((6*7)) from $GPUPOOL_JOB_ID\n")
            t.expect(b"42 from ")
            t.write(b"exit 0\n")
            self.assertEqual(t.finish(), 0)
        finally:
            t.close()

    def test_a_terminal_that_goes_away_ends_the_job(self):
        # The client killed outright: the controller hears nothing from it and hangs up.
        t = Terminal(self.pool, ["run", "--pty", "--", "sh", "-c", "echo ready; sleep 1000"])
        try:
            t.expect(b"ready")
            jid = job_id_of(t.seen.decode(errors="replace"))
            t.proc.kill()
            t.proc.wait()
            start = time.time()
            job = self.pool.wait(jid, pooltest.FINAL_STATES, timeout=CLIENT_TIMEOUT_S + 20)
            self.assertEqual(job["state"], "FAILED", job)
            self.assertIn("its terminal went away", job["reason"])
            self.assertEqual(job.get("signal"), signal.SIGHUP, job)
            print("  detached client: job ended %.1f s after the kill" % (time.time() - start))
        finally:
            t.close()
        # The terminal itself closed (the window shut): the client is hung up at once and
        # stops the session.
        t = Terminal(self.pool, ["run", "--pty", "--", "sh", "-c", "echo ready; sleep 1000"])
        try:
            t.expect(b"ready")
            jid = job_id_of(t.seen.decode(errors="replace"))
            os.close(t.master)
            self.assertNotEqual(t.proc.wait(30), 0)
            job = self.pool.wait(jid, pooltest.FINAL_STATES, timeout=20)
            self.assertEqual(job["state"], "FAILED", job)
            self.assertIn("stopped by", job["reason"])
        finally:
            t.close()

    def test_a_run_stopped_by_its_time_limit_or_a_cancel_says_so(self):
        # Red team 5, finding 6: at its time limit the job was TIMEOUT (signal 15) but the
        # client exited 137 and said nothing; a cancelled run job ended FAILED ("the
        # command was ended by SIGTERM"), not CANCELLED as a batch job or an alloc does.
        r = self.pool.cli("run", "-t", "0:02", "--", "sleep", "60")
        jid = job_id_of(r.stderr)
        self.assertEqual(r.returncode, 128 + signal.SIGTERM, r.stderr)
        self.assertIn("gpupool: job %d reached its time limit of 2 s" % jid, r.stderr)
        self.assertEqual(self.pool.wait(jid, pooltest.FINAL_STATES)["state"], "TIMEOUT")
        p = subprocess.Popen([GPUPOOL, "run", "--", "sh", "-c", "echo ready; sleep 60"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.pool.env)
        try:
            jid = job_id_of(p.stderr.readline())  # "job N submitted"
            self.assertEqual(p.stdout.readline(), "ready\n")
            c = self.pool.cli("cancel", str(jid))
            self.assertEqual(c.returncode, 0, c.stderr)
            _, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        self.assertIn("gpupool: job %d cancelled by " % jid, err)
        job = self.pool.wait(jid, pooltest.FINAL_STATES)
        self.assertEqual(job["state"], "CANCELLED", job)
        self.assertTrue(job["reason"].startswith("cancelled by "), job)

    def test_a_run_at_its_time_limit_gets_sigterm_and_the_grace(self):
        # The run's command got SIGKILL at once at the time limit (its held task ended on
        # its SIGTERM, and the task's cgroups went with it) where a batch job gets
        # SIGTERM, then SIGKILL after the 10 s grace: a command that cleans up on SIGTERM
        # must have the time to.
        mark = os.path.join(self.pool.dir, "run-term-mark")
        script = ('trap "echo TERM > %s; exit 3" TERM; echo ready; '
                  'while :; do sleep 0.1; done' % mark)
        r = self.pool.cli("run", "-t", "0:02", "--", "sh", "-c", script)
        jid = job_id_of(r.stderr)
        self.assertIn("ready", r.stdout)
        self.assertTrue(os.path.exists(mark), "the command saw no SIGTERM: " + r.stderr)
        with open(mark) as f:
            self.assertEqual(f.read(), "TERM\n")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertEqual(self.pool.wait(jid, pooltest.FINAL_STATES)["state"], "TIMEOUT")

    def test_ctrl_c_while_waiting_cancels_the_job(self):
        hog = self.pool.cli("submit", "--gpus", "4", "--", "sleep", "1000")
        self.assertEqual(hog.returncode, 0, hog.stderr)
        hog_id = int(hog.stdout.split()[-1])
        try:
            p = subprocess.Popen([GPUPOOL, "run", "--gpus", "1", "--", "true"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=self.pool.env)
            line = p.stderr.readline()  # "job N submitted"
            jid = job_id_of(line)
            self.assertIn("waits", p.stderr.readline())
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=30)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("cancelled job %d while it waited" % jid, err)
            self.assertEqual(self.pool.wait(jid, pooltest.FINAL_STATES)["state"], "CANCELLED")
        finally:
            self.pool.cli("cancel", str(hog_id))
            self.pool.wait(hog_id, pooltest.FINAL_STATES)

    def test_alloc_holds_the_allocation_for_exec_and_releases_it(self):
        # Its commands share the job's own /dev/shm (docs/security.md, defence 11), which
        # is not the host's and goes with the job.
        shm = "/dev/shm/gp-interactive-test-%d" % os.getpid()
        self.addCleanup(lambda: os.path.exists(shm) and os.remove(shm))
        r = self.pool.cli("alloc", "--gpus", "2", "--", "sh", "-c",
                          'echo "local $GPUPOOL_JOB_ID"; '
                          '"$0" exec -- sh -c "echo remote \\$GPUPOOL_JOB_ID \\$CUDA_VISIBLE_DEVICES"; '
                          'echo piped | "$0" exec -i -- cat; '
                          '"$0" exec -- sh -c "echo kept > $1"; "$0" exec -- cat "$1"; '
                          'test -e "$1" && echo on-the-host; exit 4', GPUPOOL, shm)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("kept\n", r.stdout)
        self.assertNotIn("on-the-host", r.stdout)
        self.assertFalse(os.path.exists(shm))
        jid = job_id_of(r.stderr)
        self.assertIn("local %d\n" % jid, r.stdout)
        self.assertIn("remote %d GPU-" % jid, r.stdout)
        self.assertIn("piped\n", r.stdout)
        self.assertIn("released the allocation of job %d" % jid, r.stderr)
        job = self.pool.wait(jid, pooltest.FINAL_STATES)
        # It ends as its command did (exit 4), as salloc's job does (issue 30).
        self.assertEqual((job["state"], job["exit_code"]), ("FAILED", 4), job["reason"])
        self.assertEqual(job["interactive"], "alloc")

    def test_an_alloc_whose_client_is_killed_is_released(self):
        # Its client killed outright (with its COMMAND): the controller hears nothing more
        # from it and releases the allocation after the client timeout, where it used to
        # hold the GPUs for good.
        p = subprocess.Popen([GPUPOOL, "alloc", "--gpus", "2", "--", "sh", "-c",
                              "echo ready; exec sleep 1000"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.pool.env,
                             start_new_session=True)
        try:
            self.assertEqual(p.stdout.readline(), "ready\n")
            jid = job_id_of(p.stderr.readline())
            self.assertEqual(self.pool.job(jid)["state"], "RUNNING")
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            start = time.time()
            job = self.pool.wait(jid, pooltest.FINAL_STATES, timeout=CLIENT_TIMEOUT_S + 20)
            self.assertEqual(job["state"], "CANCELLED", job)
            self.assertIn("its client went away (no word from gpupool alloc for %d s)" %
                          CLIENT_TIMEOUT_S, job["reason"])
            took = time.time() - start
            self.assertGreaterEqual(took, CLIENT_TIMEOUT_S - 1)
            print("  killed alloc client: allocation released %.1f s after the kill" % took)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def test_an_alloc_whose_allocation_is_revoked_says_so_and_ends(self):
        # Its time limit or a cancel ended the job while COMMAND ran: alloc said nothing
        # and the shell went on in an allocation that no longer existed. As salloc's "Job
        # allocation N has been revoked.": said on stderr with the state and reason,
        # COMMAND hung up, and a non-zero exit.
        r = self.pool.cli("alloc", "-t", "0:02", "--", "sh", "-c", "echo ready; exec sleep 40",
                          timeout=30)
        jid = job_id_of(r.stderr)
        self.assertIn("gpupool: job allocation %d has been revoked (it ended TIMEOUT: " % jid,
                      r.stderr)
        self.assertEqual(r.returncode, 128 + signal.SIGHUP, r.stderr)
        self.assertNotIn("released the allocation", r.stderr)
        p = subprocess.Popen([GPUPOOL, "alloc", "--", "sh", "-c", "echo ready; exec sleep 40"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.pool.env)
        try:
            self.assertEqual(p.stdout.readline(), "ready\n")
            jid = job_id_of(p.stderr.readline())
            c = self.pool.cli("cancel", str(jid))
            self.assertEqual(c.returncode, 0, c.stderr)
            _, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertIn("gpupool: job allocation %d has been revoked (it ended CANCELLED: "
                      "cancelled by " % jid, err)
        self.assertEqual(p.returncode, 128 + signal.SIGHUP, err)

    def test_an_alloc_killed_while_it_waits_holds_nothing(self):
        # Killed outright while its job waits for GPUs: the request is withdrawn, or, if the
        # job starts first, its allocation released; it used to start and hold for good.
        hog = self.pool.cli("submit", "--gpus", "4", "--", "sleep", "1000")
        self.assertEqual(hog.returncode, 0, hog.stderr)
        hog_id = int(hog.stdout.split()[-1])
        procs = []

        def killed_alloc():
            p = subprocess.Popen([GPUPOOL, "alloc", "--gpus", "1", "--", "sleep", "1000"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, env=self.pool.env,
                                 start_new_session=True)
            procs.append(p)
            jid = job_id_of(p.stderr.readline())  # "job N submitted"
            self.assertIn("waits", p.stderr.readline())
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return jid

        went_away = "its client went away (no word from gpupool alloc for %d s)" % CLIENT_TIMEOUT_S
        try:
            self.pool.wait(hog_id, ("RUNNING",))
            jid = killed_alloc()
            start = time.time()
            job = self.pool.wait(jid, pooltest.FINAL_STATES, timeout=CLIENT_TIMEOUT_S + 20)
            self.assertEqual(job["state"], "CANCELLED", job)
            self.assertIn(went_away + ": the request was withdrawn", job["reason"])
            print("  alloc killed while waiting: withdrawn %.1f s after the kill" %
                  (time.time() - start))
            # The repro: killed while waiting, then the GPUs free up at once.
            jid = killed_alloc()
            self.pool.cli("cancel", str(hog_id))
            job = self.pool.wait(jid, pooltest.FINAL_STATES, timeout=CLIENT_TIMEOUT_S + 30)
            self.assertEqual(job["state"], "CANCELLED", job)
            self.assertIn(went_away, job["reason"])
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            self.pool.cli("cancel", str(hog_id))
            self.pool.wait(hog_id, pooltest.FINAL_STATES)

    def test_bad_requests_name_the_fix(self):
        r = self.pool.cli("run", "--gpus", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("give the command after --", r.stderr)
        r = self.pool.cli("run", "--array", "0-3", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--array", r.stderr)
        r = self.pool.cli("exec", "--pty", "somehost", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--pty and -i go with --job", r.stderr)
        r = self.pool.cli("exec", "--", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("GPUPOOL_JOB_ID is not set", r.stderr)
        # A command that is not there: the job fails with the reason, the client says it.
        r = self.pool.cli("run", "--", "no-such-command-here")
        self.assertEqual(r.returncode, 255, r.stderr)
        self.assertIn("no-such-command-here", r.stderr)
        job = self.pool.wait(job_id_of(r.stderr), pooltest.FINAL_STATES)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("the command did not run", job["reason"])
        # A batch job has no terminal to attach to.
        s = self.pool.cli("submit", "--", "sleep", "30")
        jid = int(s.stdout.split()[-1])
        self.pool.wait(jid, ("RUNNING",))
        x = self.pool.cli("exec", "--job", str(jid), "-i", "--", "cat", stdin="in a batch job\n")
        self.assertEqual(x.returncode, 0, x.stderr)
        self.assertEqual(x.stdout, "in a batch job\n")
        self.pool.cli("cancel", str(jid))


class AllocStopGraceTest(unittest.TestCase):
    """A revoked allocation's COMMAND that ignores its SIGHUP is killed after the pool's
    stop grace (server --kill-wait), as the allocation's tasks were; it used to be a fixed
    10 s whatever the pool's grace. One pool with a short grace, one with a long one."""

    @classmethod
    def setUpClass(cls):
        cls.short = Pool(kill_wait="2s")
        cls.long = Pool(kill_wait="12s")

    @classmethod
    def tearDownClass(cls):
        cls.short.stop()
        cls.long.stop()

    def revoke(self, pool, script):
        """Runs `gpupool alloc -- sh -c SCRIPT`, cancels its job once SCRIPT said ready:
        (seconds from the revocation's message to alloc's exit, exit status, stderr)."""
        p = subprocess.Popen([GPUPOOL, "alloc", "--", "sh", "-c", script],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=pool.env,
                             start_new_session=True)
        try:
            self.assertEqual(p.stdout.readline(), "ready\n")
            err = p.stderr.readline()
            jid = job_id_of(err)
            c = pool.cli("cancel", str(jid))
            self.assertEqual(c.returncode, 0, c.stderr)
            while "has been revoked" not in err:
                line = p.stderr.readline()
                self.assertTrue(line, "alloc said nothing of the revocation: " + err)
                err += line
            start = time.time()
            p.wait(timeout=30)
            took = time.time() - start
            err += p.stderr.read()
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            p.stdout.close()
            p.stderr.close()
        self.assertIn("gpupool: job allocation %d has been revoked (it ended CANCELLED: "
                      "cancelled by " % jid, err)
        return took, p.returncode, err

    def test_a_command_ignoring_the_hangup_is_killed_after_a_short_kill_wait(self):
        took, code, err = self.revoke(
            self.short, 'trap "" HUP; echo ready; while :; do sleep 0.2; done')
        self.assertEqual(code, 128 + signal.SIGKILL, err)
        # --kill-wait 2s: killed about 2 s after the hangup (it was 10 s).
        self.assertGreaterEqual(took, 1.5, err)
        self.assertLess(took, 7, err)
        print("  --kill-wait 2s: the command ignoring SIGHUP was killed %.1f s after" % took)

    def test_a_long_kill_wait_gives_the_command_its_time(self):
        # --kill-wait 12s: a command that takes 10.5 s to clean up after its hangup ends
        # by itself (exit 3), where the fixed 10 s killed it.
        took, code, err = self.revoke(
            self.long, 'trap "sleep 10.5; exit 3" HUP; echo ready; '
                       'while :; do sleep 0.2; done')
        self.assertEqual(code, 3, err)
        self.assertGreaterEqual(took, 10, err)
        print("  --kill-wait 12s: the command ended by itself %.1f s after its hangup" % took)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (the agent runs jobs as their users)")
        sys.exit(77)
    runner = unittest.TextTestRunner(verbosity=2)
    loader = unittest.defaultTestLoader
    result = runner.run(unittest.TestSuite([loader.loadTestsFromTestCase(InteractiveTest),
                                            loader.loadTestsFromTestCase(AllocStopGraceTest)]))
    sys.exit(0 if result.wasSuccessful() else 1)
