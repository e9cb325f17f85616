"""A site of several controllers on one real PostgreSQL 15 server, for the tests in
tests/ha and bench/pool/failover.py: the server started here as the `postgres` account in
a temporary directory, `gpupool server` processes that elect a leader through the lease
in the database, agents and CLI calls given every controller's address."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import time

import pooltest

PG_BIN = "/usr/lib/postgresql/15/bin"
HERE = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
EXIT_LOST_LEADERSHIP = 75


def missing():
    """Why a site cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root: the test PostgreSQL runs as the postgres account"
    if not os.path.exists(os.path.join(PG_BIN, "initdb")):
        return "needs postgresql-15 (scripts/install-deps.sh)"
    return None


def call(sock, method, path, timeout=10):
    conn = pooltest.UnixConnection(sock, timeout)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        body = r.read()
        return r.status, json.loads(body) if body else None
    finally:
        conn.close()


class Postgres:
    """PostgreSQL 15 on a Unix socket in a temporary directory, as the `postgres` account
    (initdb refuses root), fsync off as in the store tests."""

    def __init__(self, root):
        self.dir = os.path.join(root, "pg")
        os.makedirs(self.dir)
        shutil.chown(self.dir, "postgres", "postgres")
        self.data = os.path.join(self.dir, "data")
        self._pg([os.path.join(PG_BIN, "initdb"), "-D", self.data, "-A", "trust", "-U",
                  "postgres"])
        self.start()
        self._pg(["psql", "-h", self.dir, "-U", "postgres", "-c", "CREATE DATABASE gpupool"])
        self.spec = "postgresql:///gpupool?host=%s&user=postgres" % self.dir

    def _pg(self, cmd):
        subprocess.run(["runuser", "-u", "postgres", "--"] + cmd, check=True,
                       capture_output=True)

    def _ctl(self, *args):
        self._pg([os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-w", "-l",
                  os.path.join(self.dir, "log")] + list(args))

    def start(self):
        self._ctl("-o", "-k %s -c listen_addresses='' -c fsync=off" % self.dir, "start")

    def restart(self):
        self._ctl("-m", "fast", "-o", "-k %s -c listen_addresses='' -c fsync=off" % self.dir,
                  "restart")

    def query(self, sql):
        """The rows of `sql` in the gpupool database, each a list of its fields as text."""
        r = subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-h", self.dir, "-U",
                            "postgres", "-d", "gpupool", "-At", "-F", "|", "-c", sql],
                           check=True, capture_output=True, text=True)
        return [line.split("|") for line in r.stdout.splitlines() if line]

    def stop(self):
        try:
            self._ctl("-m", "immediate", "stop")
        except subprocess.CalledProcessError:
            pass


class Site:
    """Controllers on one database, agents and clients given all of their addresses."""

    def __init__(self, gpupool, controllers=2, agents=2, lease_ms=2000):
        self.gpupool = gpupool
        self.root = pooltest.make_test_dir("gp-ha-")
        self.pg = Postgres(self.root)
        self.lease_ms = lease_ms
        self.names = ["c%d" % i for i in range(controllers)]
        self.procs = {}
        self.exits = {}  # name -> exit statuses seen
        self.agents = []
        self.runs = os.path.join(self.root, "runs")
        with open(self.runs, "w"):
            pass
        os.chmod(self.runs, 0o666)
        for n in self.names:
            self.start_controller(n)
        self.servers = ",".join("unix:" + self.sock(n) for n in self.names)
        for i in range(agents):
            d = os.path.join(self.root, "agent%d" % i)
            os.makedirs(d)
            with open(os.path.join(self.root, "agent%d.log" % i), "ab") as log:
                self.agents.append(subprocess.Popen(
                    [self.gpupool, "agent", "--config", "", "--controller", self.servers,
                     "--state-dir", d, "--fake", NODE, "--node-name", "n%d" % i],
                    stdout=log, stderr=log, start_new_session=True))

    def sock(self, name):
        return os.path.join(self.root, name, "gpupool.sock")

    def start_controller(self, name):
        d = os.path.join(self.root, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(self.root, name + ".log"), "ab") as log:
            self.procs[name] = subprocess.Popen(
                [self.gpupool, "server", "--config", "", "--state-dir", d, "--port", "0",
                 "--store", self.pg.spec, "--advertise", "unix:" + self.sock(name),
                 "--lease-ms", str(self.lease_ms)], stdout=log, stderr=log,
                start_new_session=True)

    def log(self):
        return pooltest.log_tails(self.root, limit=2500)

    def ready(self, name):
        try:
            return call(self.sock(name), "GET", "/readyz", timeout=2)[0] == 200
        except (OSError, http.client.HTTPException, ValueError):
            return False

    def leader(self, timeout=30, besides=None):
        """The controller that answers /readyz, waiting up to `timeout` s."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for n in self.names:
                if n != besides and self.procs[n].poll() is None and self.ready(n):
                    return n
            time.sleep(0.02)
        raise AssertionError("no controller leads after %d s\n%s" % (timeout, self.log()))

    def api(self, path):
        n = self.leader()
        st, body = call(self.sock(n), "GET", path)
        assert st == 200, (st, body)
        return body

    def wait_nodes(self, count, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                nodes = self.api("/v1/nodes")["nodes"]
                if sum(1 for x in nodes if x["state"] == "up") >= count:
                    return
            except (OSError, AssertionError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        raise AssertionError("%d nodes did not come up\n%s" % (count, self.log()))

    def submit(self, first=None):
        """One job through the CLI (which retries a failover with its idempotency key);
        its id, or None when the CLI gave up. `first`: the controller the CLI's list
        starts with (default: the site's order)."""
        cmd = [self.gpupool, "submit", "--gpus", "1", "--cpus", "0.1", "--", "sh", "-c",
               'echo "$GPUPOOL_JOB_ID" >> ' + self.runs]
        servers = self.servers
        if first is not None:
            servers = ",".join("unix:" + self.sock(n)
                               for n in [first] + [n for n in self.names if n != first])
        env = dict(os.environ, GPUPOOL_SERVER=servers)
        # In the site's directory: the job's default output file goes there.
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120,
                           cwd=self.root)
        if r.returncode != 0 or not r.stdout.startswith("Submitted job "):
            return None, r.stderr.strip()
        return int(r.stdout.split()[2]), ""

    def kill9(self, name):
        p = self.procs[name]
        os.kill(p.pid, signal.SIGKILL)
        p.wait()

    def wait_all(self, ids, timeout=120):
        deadline = time.time() + timeout
        jobs = {}
        while time.time() < deadline:
            try:
                jobs = {j["id"]: j for j in self.api("/v1/jobs?all=1")["jobs"]}
            except (OSError, AssertionError, http.client.HTTPException):
                time.sleep(0.1)
                continue
            if all(jobs.get(i, {}).get("state") in pooltest.FINAL_STATES for i in ids):
                return jobs
            time.sleep(0.2)
        left = [i for i in ids if jobs.get(i, {}).get("state") not in pooltest.FINAL_STATES]
        raise AssertionError("%d jobs did not end, e.g. %s\n%s" % (
            len(left), [jobs.get(i) for i in left[:3]], self.log()))

    def runs_of(self):
        counts = {}
        with open(self.runs) as f:
            for line in f:
                if line.strip():
                    counts[int(line)] = counts.get(int(line), 0) + 1
        return counts

    def stop(self):
        pooltest.stop_processes(self.agents + list(self.procs.values()))
        for i in range(len(self.agents)):
            pooltest.kill_leftovers(os.path.join(self.root, "agent%d" % i))
        self.pg.stop()
        pooltest.remove_dir(self.root)
