"""Shared helpers of the security suite (tests/security): a real pool started by root on
a fake node, two unprivileged local users (alice and bob) and calls made as them over the
Unix socket (the kernel names the caller), with bearer tokens over TCP, or through the
`gpupool` CLI.

The attacks run as real, separate users: every call "as alice" is a child process that
has switched to alice's uid, gid and groups (setpriv) before it connects, so the server
sees exactly what it would see from a hostile local user.

Run a suite file as `python3 test_x.py PATH_TO_GPUPOOL`; it prints one line per test and
a closing "N passed, N failed, N skipped" line (see main()).
"""
import http.client
import json
import os
import pwd
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NODE_FILE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
# Debian's interpreter: the users' children cannot read another python under /root.
USER_PYTHON = "/usr/bin/python3"
USERS = ("gpsec-alice", "gpsec-bob")
GPUPOOL = None  # set by main() from argv


class User:
    def __init__(self, name):
        pw = pwd.getpwnam(name)
        self.name = name
        self.uid = pw.pw_uid
        self.gid = pw.pw_gid
        self.home = None  # a private 0700 directory, made per Env

    def __repr__(self):
        return self.name


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (it makes two local users and runs jobs as them)"
    for tool in ("setpriv", "useradd"):
        if shutil.which(tool) is None:
            return "%s is not installed" % tool
    if not os.path.exists(USER_PYTHON):
        return USER_PYTHON + " is missing"
    return None


def ensure_users():
    """The two test users, made once (system accounts with no home and no login)."""
    out = []
    for name in USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                            "--shell", "/usr/sbin/nologin", name], check=True)
        out.append(User(name))
    return out



def _decode(status, payload, headers):
    try:
        body = json.loads(payload) if payload else None
    except ValueError:
        body = payload.decode("utf-8", "replace")
    return status, body, headers


def http_call(conn, method, path, body=None, headers=None, raw=None):
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    conn.request(method, path, body=data, headers=headers or {})
    r = conn.getresponse()
    payload = r.read()
    hdrs = dict(r.getheaders())
    conn.close()
    return _decode(r.status, payload, hdrs)


def as_user_argv(user, argv):
    """argv run as `user` (its uid, gid and supplementary groups), nothing else kept."""
    return ["setpriv", "--reuid=%d" % user.uid, "--regid=%d" % user.gid, "--init-groups",
            "--reset-env"] + argv


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Env:
    """A test directory other users can traverse, a copy of gpupool and of this module
    that they can run, private homes for alice and bob, and one pool.

    split=False: `gpupool up` (controller + local agent). split=True: `gpupool server`
    and agents started with start_agent(name) for nodes "vm" and "vm2" and so on.
    """

    def __init__(self, split=False, extra_args=(), nofile=None):
        self.dir = pooltest.make_test_dir("gp-sec-")
        self.state = os.path.join(self.dir, "state")
        self.sock = os.path.join(self.state, "gpupool.sock")
        self.bin = os.path.join(self.dir, "gpupool")
        shutil.copy2(GPUPOOL, self.bin)
        shim = os.path.join(os.path.dirname(GPUPOOL), "gpupool-agent-shim")
        if os.path.exists(shim):
            shutil.copy2(shim, os.path.join(self.dir, "gpupool-agent-shim"))
        # The users' calls run this module (and what it imports) from the test directory.
        self.lib = os.path.join(self.dir, "seclib.py")
        shutil.copy2(os.path.abspath(__file__), self.lib)
        shutil.copy2(pooltest.__file__, os.path.join(self.dir, "pooltest.py"))
        for f in ("seclib.py", "pooltest.py"):
            os.chmod(os.path.join(self.dir, f), 0o644)
        self.alice, self.bob = ensure_users()
        for u in (self.alice, self.bob):
            u.home = os.path.join(self.dir, "home-" + u.name)
            os.makedirs(u.home)
            os.chown(u.home, u.uid, u.gid)
            os.chmod(u.home, 0o700)
        self.split = split
        self.extra_args = list(extra_args)
        self.port = free_port()
        self.server = None
        self.agents = {}
        self.node_file = NODE_FILE
        self.nofile = nofile  # the server's RLIMIT_NOFILE (soft and hard); None: inherited

    # --- the pool ---
    def start(self, timeout=30):
        cmd = [self.bin, "server" if self.split else "up", "--state-dir", self.state,
               "--port", str(self.port)] + self.extra_args
        if not self.split:
            cmd += ["--fake", self.node_file]
        nofile = self.nofile
        limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))) \
            if nofile else None
        with open(os.path.join(self.dir, "server.log"), "ab") as log:
            self.server = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True,
                                           preexec_fn=limit)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(self.sock):
                try:
                    if self.api(None, "GET", "/v1/whoami")[0] == 200:
                        break
                except OSError:
                    pass
            if self.server.poll() is not None:
                raise RuntimeError("the server exited:\n" + self.log())
            time.sleep(0.05)
        else:
            raise RuntimeError("the server did not come up:\n" + self.log())
        if not self.split:
            self.wait_nodes(1)

    def start_agent(self, name, token, node_file=None):
        """An agent for node `name` with its own state directory and a node token."""
        state = os.path.join(self.dir, "agent-" + name)
        os.makedirs(state, exist_ok=True)
        cmd = [self.bin, "agent", "--controller", "unix:" + self.sock, "--token", token,
               "--state-dir", state, "--fake", node_file or self.node_file,
               "--node-name", name]
        with open(os.path.join(self.dir, "agent-%s.log" % name), "ab") as log:
            self.agents[name] = subprocess.Popen(cmd, stdout=log, stderr=log,
                                                 start_new_session=True)

    def wait_nodes(self, n, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, body, _ = self.api(None, "GET", "/v1/nodes")
            if st == 200 and sum(1 for x in body["nodes"] if x["state"] == "up") >= n:
                return body["nodes"]
            time.sleep(0.05)
        raise RuntimeError("%d node(s) did not come up:\n%s" % (n, self.log()))

    def stop(self):
        procs = [self.server] + list(self.agents.values())
        pooltest.stop_processes(procs, timeout=15)
        pooltest.kill_leftovers(self.dir)
        pooltest.remove_dir(self.dir)

    def restart_server(self):
        pooltest.stop_processes([self.server], timeout=15)
        self.start()

    def log(self):
        return pooltest.log_tails(self.dir, limit=3000)

    # --- calls ---
    def api(self, user, method, path, body=None, headers=None, raw=None, timeout=30):
        """An API call over the Unix socket as `user` (None: root, in this process).
        Returns (status, decoded body, headers)."""
        if user is None:
            return http_call(pooltest.UnixConnection(self.sock, timeout), method, path, body, headers, raw)
        req = json.dumps({"sock": self.sock, "method": method, "path": path, "body": body,
                          "headers": headers, "raw": raw, "timeout": timeout})
        # On standard input: a body of a megabyte is more than one argument may hold.
        r = subprocess.run(as_user_argv(user, [USER_PYTHON, self.lib, "--call"]), input=req,
                           capture_output=True, text=True, timeout=timeout + 10)
        if r.returncode != 0:
            raise RuntimeError("call as %s failed: %s" % (user, r.stderr))
        out = json.loads(r.stdout)
        return out["status"], out["body"], out["headers"]

    def tcp(self, token, method, path, body=None, headers=None, timeout=30):
        """An API call over TCP with a bearer token (None: no Authorization header)."""
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = "Bearer " + token
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        return http_call(conn, method, path, body, h)

    def cli(self, user, *args, env=None, cwd=None, timeout=60):
        """`gpupool ARGS` as `user` (None: root) against this pool; a CompletedProcess."""
        e = {"PATH": "/usr/local/bin:/usr/bin:/bin", "GPUPOOL_SERVER": "unix:" + self.sock}
        e.update(env or {})
        argv = [self.bin] + list(args)
        if user is not None:
            e["HOME"] = user.home
            argv = as_user_argv(user, ["env"] + ["%s=%s" % kv for kv in e.items()] + argv)
        return subprocess.run(argv, capture_output=True, text=True, env=e,
                              cwd=cwd or (user.home if user else self.dir), timeout=timeout)

    def hold_connections(self, user, target, count, seconds, reopen_per_s=0):
        """Starts `user` holding `count` connections to `target` ("unix" or "tcp"), each
        with half a request head sent, for `seconds`, reopening those the server closes (at
        most `reopen_per_s` a second; 0: at once) (a connection-exhaustion attack). Returns the Popen; its stdout has one JSON line of
        counts per second (see run_hold)."""
        spec = json.dumps({"target": self.sock if target == "unix" else self.port,
                           "count": count, "seconds": seconds,
                           "reopen_per_s": reopen_per_s})
        need = count + 256

        def limits():  # as root, before the switch to `user`: room for `count` sockets
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if hard != resource.RLIM_INFINITY and hard < need:
                resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))

        return subprocess.Popen(as_user_argv(user, [USER_PYTHON, self.lib, "--hold", spec]),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=limits, start_new_session=True)

    def token(self, user, kind="user", **extra):
        """A new token for `user` (a name) made by root; returns the secret."""
        body = {"user": user, "kind": kind}
        body.update(extra)
        st, out, _ = self.api(None, "POST", "/v1/tokens", body)
        if st != 201:
            raise RuntimeError("token for %s: %s %s" % (user, st, out))
        return out["token"]

    def submit(self, user, job):
        """POST /v1/jobs as `user`; returns (status, body). The job runs in the user's
        private home unless it names a workdir (the test users have no real home)."""
        if user is not None and "workdir" not in job:
            job = dict(job, workdir=user.home)
        st, body, _ = self.api(user, "POST", "/v1/jobs", job)
        return st, body

    def job(self, jid):
        st, body, _ = self.api(None, "GET", "/v1/jobs/%d" % jid)
        if st != 200:
            raise RuntimeError("job %d: %s %s" % (jid, st, body))
        return body["job"]

    def jobs(self):
        st, body, _ = self.api(None, "GET", "/v1/jobs?all=1")
        return body["jobs"]

    def wait(self, jid, states, timeout=30):
        return pooltest.wait_job(self.job, jid, states, timeout, log=self.log)


class PoolTestCase(unittest.TestCase):
    """A test class with one default Env (a real pool) for all its tests: `cls.env`."""

    @classmethod
    def setUpClass(cls):
        cls.env = Env()
        cls.env.start()

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()


def run_call(spec):
    """The child side of Env.api: one HTTP call over the Unix socket, as printed JSON."""
    s = json.loads(spec)
    conn = pooltest.UnixConnection(s["sock"], s["timeout"])
    st, body, hdrs = http_call(conn, s["method"], s["path"], s["body"], s["headers"], s["raw"])
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    print(json.dumps({"status": st, "body": body, "headers": hdrs}))


def run_hold(spec):
    """The child side of Env.hold_connections: opens up to `count` connections to the
    socket path or TCP port `target`, sends each half a request head (no blank line), and
    keeps them open for `seconds`, opening new ones for those the server closes. Prints
    {"open", "opened", "closed", "refused"} once a second (closed: by the server; refused:
    the connect failed, e.g. a full listen backlog)."""
    s = json.loads(spec)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    unix = isinstance(s["target"], str)
    addr = s["target"] if unix else ("127.0.0.1", s["target"])
    head = b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Slow: "
    sel = selectors.DefaultSelector()
    counts = {"open": 0, "opened": 0, "closed": 0, "refused": 0}
    end = time.time() + s["seconds"]
    next_report = time.time()

    def open_one():
        sk = socket.socket(socket.AF_UNIX if unix else socket.AF_INET, socket.SOCK_STREAM)
        sk.setblocking(False)
        try:
            sk.connect(addr)
        except (BlockingIOError, InterruptedError):
            if unix:  # EAGAIN on a Unix socket: the backlog is full, not in progress
                sk.close()
                counts["refused"] += 1
                return False
        except OSError:
            sk.close()
            counts["refused"] += 1
            return False
        sel.register(sk, selectors.EVENT_READ | selectors.EVENT_WRITE, [False])
        counts["open"] += 1
        counts["opened"] += 1
        return True

    # All `count` at once, then those the server closed again, at most `reopen_per_s` a
    # second (0: as fast as it can: a flood of connections more than a hold).
    budget, last = float(s["count"]), time.time()
    while time.time() < end:
        if s.get("reopen_per_s", 0) > 0 and counts["opened"] >= s["count"]:
            now = time.time()
            budget = min(budget + (now - last) * s["reopen_per_s"], s["reopen_per_s"])
            last = now
        else:
            budget, last = float(s["count"]), time.time()
        for _ in range(min(2000, int(budget), s["count"] - counts["open"])):
            if not open_one():
                break
            budget -= 1
        for key, ev in sel.select(timeout=0.05):
            sk, sent = key.fileobj, key.data
            closed = False
            if ev & selectors.EVENT_READ:
                try:
                    closed = sk.recv(4096) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    closed = True
            elif ev & selectors.EVENT_WRITE and not sent[0]:
                try:
                    sk.send(head)
                    sent[0] = True
                    sel.modify(sk, selectors.EVENT_READ, sent)
                except BlockingIOError:
                    pass
                except OSError:
                    closed = True
            if closed:
                sel.unregister(sk)
                sk.close()
                counts["open"] -= 1
                counts["closed"] += 1
        if time.time() >= next_report:
            print(json.dumps(counts), flush=True)
            next_report = time.time() + 1
    print(json.dumps(counts), flush=True)


def sanitized():
    """Whether the gpupool under test is built with AddressSanitizer (its memory figures
    then include the sanitizer's quarantine and shadow)."""
    out = subprocess.run(["ldd", GPUPOOL], capture_output=True, text=True).stdout
    return "libasan" in out


def main():
    """Runs the calling module's tests; exits 77 (skipped) when they cannot run here."""
    global GPUPOOL
    if len(sys.argv) > 1 and sys.argv[1] == "--call":
        run_call(sys.argv[2] if len(sys.argv) > 2 else sys.stdin.read())
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--hold":
        run_hold(sys.argv[2])
        return
    GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else shutil.which("gpupool")
    why = skip_reason()
    if why:
        print("SKIP: " + why)
        print("0 passed, 0 failed, 1 skipped")
        sys.exit(77)
    result = unittest.main(module="__main__", exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
