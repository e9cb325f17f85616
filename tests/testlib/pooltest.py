"""Helpers shared by the Python tests that run a real pool (tests/integration,
tests/podman): a state directory other users can reach, waiting for a job to reach a
state, and stopping a pool without leaving job supervisors or cgroups behind."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "LOST")


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (the pool's API socket)."""

    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def call(sock, method, path, body=None, timeout=10):
    """One API call over the pool's Unix socket `sock`, `body` sent as JSON: (status, the
    answer's JSON, or its bytes when it is not JSON, or None when empty)."""
    conn = UnixConnection(sock, timeout)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None)
        r = conn.getresponse()
        payload = r.read()
    finally:
        conn.close()
    try:
        return r.status, json.loads(payload) if payload else None
    except ValueError:
        return r.status, payload


def make_test_dir(prefix):
    """A fresh directory under /tmp, mode 755: jobs of other users reach their socket and
    working directories, as under /var/lib/gpupool."""
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(d, 0o755)
    return d


def wait_job(get_job, jid, states, timeout, poll=0.05, log=lambda: ""):
    """Polls get_job(jid) until its state is one of `states`; returns the job. Fails
    with the job's reasons and the pool's log otherwise."""
    deadline = time.time() + timeout
    j = None
    while time.time() < deadline:
        j = get_job(jid)
        if j["state"] in states:
            return j
        time.sleep(poll)
    raise AssertionError("job %d stuck in %s (wanted %s); reason=%r pending=%r\n%s" % (
        jid, j["state"] if j else "?", states, j.get("reason") if j else None,
        j.get("pending_reason") if j else None, log()))


def wait_requeued(get_job, jid, timeout=30):
    """Polls get_job(jid) until the job is back in the queue (PENDING) or already past
    its first attempt (under load its wait can end between two polls); returns it."""
    seen = {}

    def past_attempt_one():
        seen["job"] = get_job(jid)
        return seen["job"]["state"] == "PENDING" or seen["job"].get("attempt", 1) >= 2

    wait_for("job %d's requeue" % jid, past_attempt_one, timeout)
    return seen["job"]


def wait_for(what, check, timeout=30, poll=0.05):
    """Polls check() until it returns something true, which is returned; fails naming
    `what` after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(poll)
    raise AssertionError("timed out after %s s waiting for %s" % (timeout, what))


def stop_processes(procs, timeout=10, sig=signal.SIGTERM):
    """Signals each live process, waits up to `timeout` s, then kills it."""
    for p in procs:
        if p is None or p.poll() is not None:
            continue
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _proc_stat(pid):
    """(ppid, pgrp) of a live process, from /proc/PID/stat; None once it has exited."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else (int(fields[1]), int(fields[2]))


def alive(pid):
    """Whether `pid` runs (a zombie counts as ended)."""
    return _proc_stat(pid) is not None


class Ended:
    """When a watched process ended, as two polls bracket it: `alive_at`, the start of
    the last poll that saw it running (0 if none did), and `gone_at`, the end of the
    first that saw it ended. Its real end lies between them however late a poll ran
    (a loaded machine can hold a poll back for a second): a check that something came
    after the end compares with `alive_at`, one that the end came by a time with
    `gone_at`."""

    def __init__(self, alive_at, gone_at):
        self.alive_at, self.gone_at = alive_at, gone_at

    def assert_between(self, test, earliest, latest):
        """Fails `test` unless the end surely lies within [earliest, latest]."""
        test.assertGreaterEqual(self.alive_at, earliest, "ended too early")
        test.assertLessEqual(self.gone_at, latest, "ended too late")


def wait_ended(what, pids, timeout, poll=0.02):
    """Polls until every pid has ended; returns {pid: Ended}."""
    ended, seen = {}, {}

    def check():
        for pid in pids:
            if pid not in ended:
                t = time.time()
                if alive(pid):
                    seen[pid] = t
                else:
                    ended[pid] = Ended(seen.get(pid, 0.0), time.time())
        return len(ended) == len(pids)
    wait_for(what, check, timeout, poll)
    return ended


def _shims_under(state_dir):
    """The pids of the job supervisors (`gpupool-agent-shim --job-dir DIR`, or `gpupool
    agent-shim ...`) whose DIR is `state_dir` or inside it: the pool's under that
    directory, no one else's."""
    dirs = {state_dir.rstrip("/"), os.path.abspath(state_dir)}
    shims = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        for i in range(len(argv) - 2):
            if argv[i].endswith("agent-shim") and argv[i + 1] == "--job-dir" and any(
                    argv[i + 2] == d or argv[i + 2].startswith(d + "/") for d in dirs):
                shims.append(int(name))
                break
    return shims


def _job_groups(shims):
    """The process groups of the jobs those supervisors started: each job is a child of
    its shim that leads a session (and so a group) of its own."""
    groups = set()
    mine = os.getpgid(0)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _proc_stat(int(name))
        if st and st[0] in shims and st[1] == int(name) and st[1] != mine:
            groups.add(st[1])
    return groups


def kill_leftovers(state_dir):
    """Kills the job supervisors started under `state_dir` that outlived the pool and the
    process groups of the jobs under them (a job may ignore SIGTERM; these get SIGKILL),
    then removes the empty job cgroups they leave (a live agent's adoption would have)."""
    shims = _shims_under(state_dir)
    groups = _job_groups(shims)  # before the shims die: their jobs are found as children
    for pid in shims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pgrp in groups:
        try:
            os.killpg(pgrp, signal.SIGKILL)
        except OSError:
            pass
    wait_for("the leftover supervisors and jobs to exit",
             lambda: all(_proc_stat(p) is None for p in shims + sorted(groups)), timeout=10)
    for ctrl in ("cpu", "memory", "devices", "pids"):
        base = os.path.join("/sys/fs/cgroup", ctrl, "gpupool")
        if not os.path.isdir(base):
            continue
        for name in os.listdir(base):
            path = os.path.join(base, name)
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    empty = not f.read().strip()
                if name.startswith("job-") and empty:
                    os.rmdir(path)
            except OSError:
                pass


def remove_dir(path):
    shutil.rmtree(path, ignore_errors=True)


def log_tails(directory, names=None, limit=5000):
    """The last `limit` characters of each log in `directory`, headed by its name: the files
    `names` that exist, or every *.log there (sorted) when names is None. For a failure's
    message."""
    if names is None:
        try:
            names = sorted(f for f in os.listdir(directory) if f.endswith(".log"))
        except OSError:
            names = []
    out = ""
    for name in names:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with open(path, errors="replace") as fh:
                out += "--- %s\n%s\n" % (name, fh.read()[-limit:])
    return out


def test_failed(case):
    """Whether the unittest case `case` has failed so far (in its tearDown or cleanups):
    its logs are then worth printing. True when it cannot tell."""
    result = getattr(getattr(case, "_outcome", None), "result", None)
    if result is None:
        return True
    return any(test is case for test, _ in result.failures + result.errors)


def spawn_logged(cmd, log_path, procs):
    """Starts `cmd` in a session of its own, its output appended to `log_path`; adds the
    process to `procs` (for stop_processes) and returns it."""
    with open(log_path, "ab") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
    procs.append(p)
    return p


def read_env(out, jid):
    """The variables job `jid` wrote to OUT/<jid>.env (`env | ... > "$OUT/$GPUPOOL_JOB_ID.env"`),
    once the file has them."""
    path = os.path.join(out, "%d.env" % jid)
    wait_for("job %d's environment" % jid,
             lambda: os.path.exists(path) and os.path.getsize(path) > 0)
    with open(path) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


class PoolCli:
    """The CLI against a pool started by its user: `gpupool` (the binary), `env` (with
    GPUPOOL_SERVER) and `log` (the server's output file) are the user's attributes."""

    def open_pool_dir(self, prefix):
        """A fresh test directory `dir` for a pool the user starts itself (as `pool`, a
        Popen), with `env` and `log` set for it."""
        self.dir = make_test_dir(prefix)
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(self.dir, "gpupool.sock"))
        self.log = os.path.join(self.dir, "server.log")
        self.pool = None

    def close_pool_dir(self):
        """Stops `pool` if it was started, whatever it left running, and removes `dir`."""
        if self.pool is not None:
            stop_processes([self.pool])
        kill_leftovers(self.dir)
        remove_dir(self.dir)

    def cli(self, *args):
        return subprocess.run([self.gpupool] + list(args), capture_output=True, text=True,
                              env=self.env, timeout=60)

    def server_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]

    def job(self, jid):
        r = self.cli("show", str(jid), "--json")
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        return j.get("job", j)

    def running_share(self, name, gpu_mem="2G"):
        """A running --gpu-mem share whose process wrote its pid to DIR/NAME (atomically);
        returns (job, pid)."""
        pid_file = os.path.join(self.dir, name)
        r = self.cli("submit", "--cpus", "0.1", "-D", self.dir, "--gpu-mem", gpu_mem, "--",
                     "sh", "-c", "echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 300" % (
                         pid_file, pid_file, pid_file))
        assert r.returncode == 0, r.stderr
        jid = int(r.stdout.split()[-1])
        wait_job(self.job, jid, ("RUNNING",), 30, log=self.server_log)
        wait_for("the pid of job %d" % jid, lambda: os.path.exists(pid_file))
        with open(pid_file) as f:
            return jid, int(f.read())


class FakeNodePool(PoolCli):
    """A real `gpupool up` on a fake node file in a fresh test directory (`dir`, with an
    `out` folder for the jobs' files), and the CLI against it. A test case makes one in
    setUp and calls stop() in tearDown (which also releases jobs waiting for out/go-all)."""

    def __init__(self, gpupool, node, prefix, extra_args=(), config=""):
        """`config`: the text of a config file for the pool (written 0600 in `dir`), or ""
        for none."""
        self.gpupool = gpupool
        self.dir = make_test_dir(prefix)
        self.out = os.path.join(self.dir, "out")
        os.mkdir(self.out)
        self.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(self.dir, "gpupool.sock"))
        self.log = os.path.join(self.dir, "server.log")
        conf = ""
        if config:
            conf = os.path.join(self.dir, "gpupool.conf")
            with open(os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(config)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [gpupool, "up", "--state-dir", self.dir, "--port", "0", "--config", conf,
                 "--fake", node] + list(extra_args),
                stdout=log, stderr=log, start_new_session=True)
        wait_for("the pool", lambda: " up " in self.cli("nodes").stdout)

    def stop(self):
        open(os.path.join(self.out, "go-all"), "w").close()
        stop_processes([self.proc])
        kill_leftovers(self.dir)
        remove_dir(self.dir)
