#!/usr/bin/env python3
"""Several controllers on one PostgreSQL server (docs/deploy.md, "Three controllers"):
a real PostgreSQL 15 started here, `gpupool server` processes that elect a leader through
the lease in the database, agents and the CLI given the list of every controller.

  * failover, three controllers: 300 jobs stream in through the CLI while the leader is
    killed with SIGKILL three times and a standby once; every job the CLI was told about ends SUCCEEDED and
    ran exactly once (each job appends its id to one file);
  * a stale leader: the leader is stopped (SIGSTOP) past its lease, a standby takes over,
    and when the old one runs again (SIGCONT) it finds itself fenced and exits with 75
    having changed nothing: every job still runs once;
  * the database restarts under load: the leader reconnects, keeps the lease, loses
    nothing;
  * `gpupool up` refuses a store a server leads, and holds the lease against servers;
  * the leader is killed during a preempted job's grace: the standby restores the stored
    hold, and the preemptor, not an older waiting job, gets the victim's GPUs;
  * `cancel`, `release` and `node drain` sent right after the leader is killed land on
    the standby once it takes over (they are safe to repeat), exit 0 and take effect.

Usage: failover_test.py PATH_TO_GPUPOOL. Needs root (the test server runs as the
`postgres` account) and postgresql-15; skips (exit 77) without them.
"""
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import hasite  # noqa: E402  (tests/testlib)
import pooltest  # noqa: E402

VICTIM = os.path.join(HERE, "..", "preemption", "crash_victim.py")


def kill_all(pids):
    for pid in pids:
        if int(pid) <= 0:
            continue  # never a process group
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


class FailoverTest(unittest.TestCase):
    def setUp(self):
        why = hasite.missing()
        if why:
            self.skipTest(why)
        self.site = None

    def tearDown(self):
        if self.site:
            self.site.stop()

    def check_once(self, ids):
        site = self.site
        jobs = site.wait_all(ids)
        bad = [jobs[i] for i in ids if jobs[i]["state"] != "SUCCEEDED"]
        self.assertEqual(bad[:3], [], "%d jobs did not succeed\n%s" % (len(bad), site.log()))
        runs = site.runs_of()
        twice = {i: c for i, c in runs.items() if c != 1}
        self.assertEqual(twice, {}, "jobs ran more than once")
        self.assertEqual(sorted(runs), sorted(ids), "runs do not match the accepted jobs")

    def stream(self, count, threads, on_progress):
        """Submits `count` jobs from `threads` CLI loops; on_progress(accepted) runs on
        this thread as they come. Returns the ids and the failures."""
        ids, failures, lock = [], [], threading.Lock()
        todo = list(range(count))

        def loop():
            while True:
                with lock:
                    if not todo:
                        return
                    todo.pop()
                jid, err = self.site.submit()
                with lock:
                    (ids.append(jid) if jid is not None else failures.append(err))

        workers = [threading.Thread(target=loop) for _ in range(threads)]
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers):
            with lock:
                n = len(ids)
            on_progress(n)
            time.sleep(0.05)
        for w in workers:
            w.join()
        return ids, failures

    def test_three_controllers_leader_killed_three_times_while_300_jobs_stream_in(self):
        # docs/deploy.md's three-controller site: the leader is SIGKILLed three times and
        # a standby once; clients and agents are given all three addresses.
        self.site = site = hasite.Site(GPUPOOL, controllers=3, agents=2, lease_ms=2000)
        site.wait_nodes(2)
        kills, takeovers, standby_kills = [], [], []

        def maybe_kill(accepted):
            if len(kills) < 3 and accepted >= 60 * (len(kills) + 1):
                old = site.leader()
                t0 = time.time()
                site.kill9(old)
                new = site.leader(besides=old)
                takeovers.append(time.time() - t0)
                kills.append((old, new))
                site.start_controller(old)  # back, as a standby
            elif len(kills) == 3 and not standby_kills and accepted >= 240:
                leader = site.leader()
                epoch = site.api("/v1/controllers")["leader"]["epoch"]
                standby = next(n for n in site.names if n != leader)
                site.kill9(standby)
                site.start_controller(standby)
                standby_kills.append((standby, leader, epoch))

        ids, failures = self.stream(300, 4, maybe_kill)
        self.assertEqual(failures, [], "submissions failed")
        self.assertEqual(len(ids), 300)
        self.assertEqual(len(set(ids)), 300, "a retried submission made two jobs")
        self.assertEqual(len(kills), 3)
        for old, new in kills:
            self.assertNotEqual(old, new)
        # Killing a standby changes nothing: the same leader, the same epoch.
        self.assertEqual(len(standby_kills), 1)
        _, leader, epoch = standby_kills[0]
        self.check_once(ids)
        now = site.api("/v1/controllers")["leader"]
        self.assertEqual((site.leader(), now["epoch"]), (leader, epoch))
        seen = site.api("/v1/controllers")["controllers"]
        self.assertEqual(len({c["address"] for c in seen}), 3, seen)
        site.wait_nodes(2)
        print("takeovers after SIGKILL: %s s" % ", ".join("%.2f" % t for t in takeovers))

    def test_a_stale_leader_that_wakes_up_writes_nothing(self):
        self.site = site = hasite.Site(GPUPOOL, controllers=2, agents=1, lease_ms=2000)
        site.wait_nodes(1)
        first = [site.submit()[0] for _ in range(10)]
        old = site.leader()
        epoch = site.api("/v1/controllers")["leader"]["epoch"]
        # More jobs, then the leader freezes while it has them to schedule.
        more, _ = self.stream(20, 4, lambda n: None)
        os.kill(site.procs[old].pid, signal.SIGSTOP)
        new = site.leader(besides=old)
        after = site.api("/v1/controllers")["leader"]
        self.assertEqual(after["epoch"], epoch + 1)
        self.assertTrue(after["address"].endswith(new + "/gpupool.sock"), after)
        # Through the new leader first: a CLI whose list starts with a controller that
        # takes connections and never answers waits out its timeout (30 s) before it
        # moves on (docs/deploy.md).
        late = [site.submit(first=new)[0] for _ in range(10)]
        self.assertNotIn(None, late)
        os.kill(site.procs[old].pid, signal.SIGCONT)
        try:
            status = site.procs[old].wait(timeout=3 * site.lease_ms / 1000 + 5)
        except subprocess.TimeoutExpired:
            self.fail("the stale leader did not exit\n" + site.log())
        self.assertEqual(status, hasite.EXIT_LOST_LEADERSHIP, site.log())
        with open(os.path.join(site.root, old + ".log"), errors="replace") as f:
            self.assertIn("leadership lost", f.read())
        self.assertEqual(site.leader(), new)
        self.check_once(first + more + late)
        site.wait_nodes(1)  # the agent left the frozen leader for the new one

    def test_up_never_shares_a_store_with_servers(self):
        self.site = site = hasite.Site(GPUPOOL, controllers=1, agents=0, lease_ms=2000)
        leader = site.leader()
        up_dir = os.path.join(site.root, "up")
        up = [GPUPOOL, "up", "--config", "", "--state-dir", up_dir, "--port", "0", "--store",
              site.pg.spec, "--fake", hasite.NODE]
        # A server leads the store: up refuses, naming it and what to run instead.
        r = subprocess.run(up, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("leads this PostgreSQL store", r.stderr)
        self.assertIn("gpupool server", r.stderr)
        # The server stops (and gives the lease up): up runs, holding the lease, and a
        # server started beside it stands by instead of scheduling too.
        pooltest.stop_processes([site.procs[leader]])
        with open(os.path.join(site.root, "up.log"), "ab") as log:
            proc = subprocess.Popen(up, stdout=log, stderr=log, start_new_session=True)
        try:
            sock = os.path.join(up_dir, "gpupool.sock")
            deadline = time.time() + 30
            while time.time() < deadline and not os.path.exists(sock):
                self.assertIsNone(proc.poll(), site.log())
                time.sleep(0.05)
            site.start_controller(leader)
            deadline = time.time() + 30
            standby = None
            while time.time() < deadline:
                try:
                    st, body = hasite.call(site.sock(leader), "GET", "/readyz", timeout=2)
                    # Until its first look at the lease a standby names no leader.
                    if st == 503 and body.get("role") == "standby" and body.get("leader"):
                        standby = body
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            self.assertIsNotNone(standby, site.log())
            self.assertTrue(standby["leader"].endswith("up/gpupool.sock"), standby)
        finally:
            pooltest.stop_processes([proc])
            pooltest.kill_leftovers(up_dir)

    def test_the_database_restarts_under_load(self):
        self.site = site = hasite.Site(GPUPOOL, controllers=1, agents=1, lease_ms=5000)
        site.wait_nodes(1)
        leader = site.leader()
        epoch = site.api("/v1/controllers")["leader"]["epoch"]
        restarted = []

        def maybe_restart(accepted):
            if not restarted and accepted >= 30:
                site.pg.restart()
                restarted.append(time.time())

        ids, failures = self.stream(80, 4, maybe_restart)
        self.assertEqual(failures, [])
        self.assertTrue(restarted)
        self.check_once(ids)
        self.assertIsNone(site.procs[leader].poll(), "the controller exited\n" + site.log())
        self.assertEqual(site.api("/v1/controllers")["leader"]["epoch"], epoch)

    def test_a_standby_takes_over_while_a_preemption_holds_gpus(self):
        # Issue 28: the leader is killed during a victim's grace; the standby that takes
        # the lead restores the stored hold with its expiry (the victim's grace end), the
        # victim is still killed at its deadline and requeued once, and the preemptor, not
        # the older third job, gets the held GPUs.
        self.site = site = hasite.Site(GPUPOOL, controllers=2, agents=1, lease_ms=2000)
        site.wait_nodes(1)
        marks = os.path.join(site.root, "marks")
        os.mkdir(marks)
        env = dict(os.environ, GPUPOOL_SERVER=site.servers)

        def submit(*args):
            r = subprocess.run([GPUPOOL, "submit", "-D", site.root, "--gpus", "4"] + list(args),
                               capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            return int(r.stdout.split()[-1])

        def job(jid):
            body = site.api("/v1/jobs/%d" % jid)
            return body.get("job", body)

        def stamp(name):
            return ("import time; open(%r, 'w').write('%%.3f' %% time.time()); time.sleep(1)"
                    % os.path.join(marks, name))

        victim = submit("--preemptible", "--min-runtime", "1s", "--grace", "10s", "--",
                        "python3", VICTIM, marks, "ignore")
        def started():
            p = os.path.join(marks, "runs")
            if os.path.exists(p):
                with open(p) as f:
                    return f.read().split()[2:5:2]  # its pid and its child's
            return None
        pids = pooltest.wait_for("the victim's start", started, 30)
        # Killed whatever happens: it ignores SIGTERM, and may outlive a failed case.
        self.addCleanup(kill_all, pids)
        third = submit("--", "python3", "-c", stamp("third"))  # older than the preemptor
        running = pooltest.wait_job(job, victim, ("RUNNING",), 30, log=site.log)
        pooltest.wait_for("the victim past its minimum run time",
                          lambda: time.time() - running["start_time_us"] / 1e6 >= 1.2)
        preemptor = submit("--priority", "10", "--", "python3", "-c", stamp("preemptor"))
        term = os.path.join(marks, "term")
        pooltest.wait_for("the victim's SIGTERM", lambda: os.path.exists(term), 30)
        with open(term) as f:
            deadline = int(f.read().split()[0])
        old = site.leader()
        site.kill9(old)
        new = site.leader(besides=old)
        rows = site.pg.query("SELECT victim, preemptor, grace_end_us FROM preempt_holds")
        self.assertEqual(rows, [[str(victim), str(preemptor), str(deadline * 1000000)]])
        self.assertNotEqual(new, old)
        again = pooltest.wait_job(job, victim, ("PENDING",), 30, log=site.log)
        self.assertEqual(again["preemptions"], 1)
        done = pooltest.wait_job(job, preemptor, ("SUCCEEDED",), 60, log=site.log)
        self.assertGreaterEqual(done["start_time_us"] / 1e6, deadline - 1.5)
        after = pooltest.wait_job(job, third, ("SUCCEEDED",), 60, log=site.log)
        self.assertGreaterEqual(after["start_time_us"], done["end_time_us"])
        final = pooltest.wait_job(job, victim, ("SUCCEEDED",), 60, log=site.log)
        self.assertEqual((final["attempt"], final["preemptions"]), (2, 1))
        with open(os.path.join(marks, "runs")) as f:
            self.assertEqual([line.split()[:2] for line in f], [["start", "1"], ["start", "2"],
                                                                 ["end", "2"]])
        self.assertEqual(site.pg.query("SELECT victim FROM preempt_holds"), [])

    def test_cancel_release_and_drain_sent_during_a_takeover(self):
        # Before, they failed with exit 5 ("no controller leads") when sent in the lease's
        # gap, and the user had to find out and send them again.
        self.site = site = hasite.Site(GPUPOOL, controllers=2, agents=1, lease_ms=2000)
        site.wait_nodes(1)
        env = dict(os.environ, GPUPOOL_SERVER=site.servers)

        def cli(*args):
            return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True,
                                  env=env, timeout=120, cwd=site.root)

        def submit(*args):
            r = cli("submit", "--gpus", "1", "--cpus", "0.1", *args)
            self.assertEqual(r.returncode, 0, r.stderr)
            return int(r.stdout.split()[-1])

        running = [submit("--", "sleep", "300") for _ in range(2)]
        held = [submit("--hold", "--", "true") for _ in range(2)]
        for jid in running:
            pooltest.wait_job(lambda j: site.api("/v1/jobs/%d" % j).get("job", {}), jid,
                              ("RUNNING",), 30, log=site.log)
        old = site.leader()
        site.kill9(old)
        cancel = cli("cancel", *[str(j) for j in running])
        self.assertEqual(cancel.returncode, 0, cancel.stderr + site.log())
        self.assertEqual(cancel.stdout.count("ancel"), 2, cancel.stdout)
        self.assertIn("trying again", cancel.stderr)
        release = cli("release", *[str(j) for j in held])
        self.assertEqual(release.returncode, 0, release.stderr + site.log())
        self.assertNotEqual(site.leader(), old)
        jobs = site.wait_all(running + held)
        self.assertEqual([jobs[j]["state"] for j in running + held],
                         ["CANCELLED"] * 2 + ["SUCCEEDED"] * 2)
        # A node action, the leader killed again (the old one is back as the standby).
        site.start_controller(old)
        def standing_by():
            try:
                return hasite.call(site.sock(old), "GET", "/readyz", timeout=2)[0] == 503
            except (OSError, ValueError):
                return False
        pooltest.wait_for("the old leader back as a standby", standing_by, 30)
        now = site.leader()
        site.kill9(now)
        drain = cli("node", "drain", "n0", "--reason", "takeover test")
        self.assertEqual(drain.returncode, 0, drain.stderr + site.log())
        self.assertEqual(site.leader(), old)
        nodes = {n["name"]: n for n in site.api("/v1/nodes")["nodes"]}
        self.assertIn(nodes["n0"]["state"], ("drained", "draining"), nodes["n0"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
