#!/usr/bin/env python3
"""A new leader keeps its lease while it loads the pool's state (docs/deploy.md, "One
leader"), on a real PostgreSQL 15 server with three controllers and a 1 s lease:

  * the jobs table is locked (a busy database, or a store so large that the load takes
    long) and the leader is killed; the standby that takes the lease cannot load the
    state until the lock goes, three leases later. It answers as a standby meanwhile (503,
    never a 200 from a state it has not loaded), renews the lease all along, so the other
    standby never takes it, and serves once the lock goes: one takeover, one epoch, no
    controller exits;
  * the same, and the new leader is stopped (SIGTERM) while it loads: it keeps the lease
    until the load ends, then stops cleanly (0) and gives the lease up to the last standby.

Usage: slow_load_test.py PATH_TO_GPUPOOL. Needs root (the test server runs as the
`postgres` account) and postgresql-15; skips without them.
"""
import os
import signal
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import hasite  # noqa: E402  (tests/testlib)

LEASES_HELD = 3  # how many leases the load is kept waiting


class SlowLoadTest(unittest.TestCase):
    def setUp(self):
        why = hasite.missing()
        if why:
            self.skipTest(why)
        self.lock = None
        self.site = hasite.Site(GPUPOOL, controllers=3, agents=0, lease_ms=1000)

    def tearDown(self):
        if self.lock and self.lock.poll() is None:
            self.lock.kill()
            self.lock.wait()
        self.site.stop()

    def lease(self):
        """(holder's address, epoch, ms since it was taken) by the database's clock."""
        row = self.site.pg.query(
            "SELECT address, epoch, (EXTRACT(EPOCH FROM clock_timestamp() - acquired_at) * "
            "1000)::BIGINT FROM leader_lease WHERE id = 1")[0]
        return row[0], int(row[1]), int(row[2])

    def lock_jobs(self):
        """Locks the jobs table from a session of its own until unlock_jobs(); returns once
        the lock is granted."""
        pg = self.site.pg
        self.lock = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "psql", "-h", pg.dir, "-U", "postgres", "-d",
             "gpupool", "-v", "ON_ERROR_STOP=1", "-q"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            text=True)
        self.lock.stdin.write("BEGIN;\nLOCK TABLE jobs IN ACCESS EXCLUSIVE MODE;\n")
        self.lock.stdin.flush()
        granted = ("SELECT count(*) FROM pg_locks l JOIN pg_class c ON l.relation = c.oid "
                   "WHERE c.relname = 'jobs' AND l.mode = 'AccessExclusiveLock' AND l.granted")
        deadline = time.time() + 30
        while pg.query(granted)[0][0] != "1":
            self.assertIsNone(self.lock.poll(), "psql could not lock the jobs table")
            self.assertLess(time.time(), deadline, "the jobs table was not locked")
            time.sleep(0.02)

    def unlock_jobs(self):
        self.lock.stdin.write("COMMIT;\n")
        self.lock.stdin.close()
        self.assertEqual(self.lock.wait(timeout=30), 0)

    def take_over_into_a_blocked_load(self):
        """Locks the jobs table and kills the leader; returns (epoch, new leader) once a
        standby has taken the lease, its load waiting for the lock."""
        site = self.site
        old = site.leader()
        epoch = site.api("/v1/controllers")["leader"]["epoch"]
        self.lock_jobs()
        site.kill9(old)
        deadline = time.time() + 30
        while self.lease()[1] == epoch:
            self.assertLess(time.time(), deadline, "no standby took the lease\n" + site.log())
            time.sleep(0.02)
        holder, taken, _ = self.lease()
        self.assertEqual(taken, epoch + 1)
        return taken, next(n for n in site.names if holder == "unix:" + site.sock(n))

    def hold(self, epoch, leader, answers_503):
        """Until the lease taken at `epoch` would have run out LEASES_HELD times over:
        checks that `leader` keeps it and, with `answers_503`, answers as a standby."""
        site = self.site
        while True:
            address, now, held_ms = self.lease()
            self.assertEqual((address, now), ("unix:" + site.sock(leader), epoch),
                             "the lease changed hands during the load\n" + site.log())
            if answers_503:
                st, body = hasite.call(site.sock(leader), "GET", "/readyz", timeout=5)
                self.assertEqual(st, 503, body)
            if held_ms >= LEASES_HELD * site.lease_ms:
                return
            time.sleep(0.05)

    def test_a_leader_keeps_its_lease_through_a_load_longer_than_the_lease(self):
        site = self.site
        epoch, new = self.take_over_into_a_blocked_load()
        self.hold(epoch, new, answers_503=True)
        self.unlock_jobs()
        self.assertEqual(site.leader(), new)
        self.assertEqual(site.api("/v1/controllers")["leader"]["epoch"], epoch)
        for n in site.names:
            if site.procs[n].returncode is None:  # not the one killed
                self.assertIsNone(site.procs[n].poll(), "%s exited\n%s" % (n, site.log()))
        jid, err = site.submit()
        self.assertIsNotNone(jid, err)
        self.assertEqual(site.leader(), new)

    def test_a_stop_during_the_load_keeps_the_lease_then_gives_it_up(self):
        # SIGTERM while the load waits: the lease is still renewed, and once the load ends
        # the controller stops cleanly (0, not fenced out with 75) and gives the lease up,
        # so the last standby takes it at once.
        site = self.site
        epoch, new = self.take_over_into_a_blocked_load()
        site.procs[new].send_signal(signal.SIGTERM)
        self.hold(epoch, new, answers_503=False)
        self.unlock_jobs()
        self.assertEqual(site.procs[new].wait(timeout=30), 0, site.log())
        last = site.leader(besides=new)
        self.assertEqual(site.api("/v1/controllers")["leader"]["epoch"], epoch + 1)
        self.assertEqual(site.leader(), last)


if __name__ == "__main__":
    unittest.main(verbosity=2)
