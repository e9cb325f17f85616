#!/usr/bin/env python3
"""A leader paused past its lease answers no read from its memory when it runs again
(docs/deploy.md, "Fencing"), on a real PostgreSQL 15 server with two controllers:

  * the leader is stopped (SIGSTOP) with a pending job; the standby takes over and the job
    is cancelled through it; reads sent to the old leader while it was stopped, and right
    after it runs again (SIGCONT), are answered 503 naming no leader (or the new state),
    never the job still PENDING; the old leader then exits with 75.

Usage: stale_reads_test.py PATH_TO_GPUPOOL. Needs root (the test server runs as the
`postgres` account) and postgresql-15; skips without them.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import hasite  # noqa: E402  (tests/testlib)
import pooltest  # noqa: E402

QUEUED = 8  # reads sent to the stopped leader, answered once it runs again


def answer(conn):
    """(status, JSON body) of the request sent on `conn`; None when the controller closed
    the connection unanswered (it exited)."""
    try:
        r = conn.getresponse()
        body = r.read()
        return r.status, json.loads(body) if body else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


class StaleReadsTest(unittest.TestCase):
    def setUp(self):
        why = hasite.missing()
        if why:
            self.skipTest(why)
        # No agent: the job stays PENDING until it is cancelled.
        self.site = hasite.Site(GPUPOOL, controllers=2, agents=0, lease_ms=1000)

    def tearDown(self):
        self.site.stop()

    def assert_not_stale(self, got, path):
        """A read of the old leader after the takeover: 503 sending the client on (no
        leader it would name is the old one itself), the new state, or no answer."""
        if got is None:
            return
        status, body = got
        if status == 503:
            self.assertIn("leader", body, body)
            self.assertFalse(body["leader"].endswith(self.old + "/gpupool.sock"), body)
            return
        self.assertEqual(status, 200, body)
        self.assertEqual(body["job"]["state"], "CANCELLED",
                         "a stale read of %s from the paused leader\n%s" % (path, self.site.log()))

    def test_a_paused_leader_answers_no_stale_read_when_it_runs_again(self):
        site = self.site
        self.old = old = site.leader()
        jid, err = site.submit()
        self.assertIsNotNone(jid, err)
        path = "/v1/jobs/%d" % jid
        st, body = hasite.call(site.sock(old), "GET", path)
        self.assertEqual((st, body["job"]["state"]), (200, "PENDING"), body)
        pid = site.procs[old].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            new = site.leader(besides=old)  # the lease ran out: the standby took it
            st, body = hasite.call(site.sock(new), "POST", path + "/cancel")
            self.assertEqual(st, 200, body)
            st, body = hasite.call(site.sock(new), "GET", path)
            self.assertEqual((st, body["job"]["state"]), (200, "CANCELLED"), body)
            # Reads that reach the old leader while it is stopped: the kernel takes the
            # connections and their requests, which it reads first when it runs again.
            queued = []
            for _ in range(QUEUED):
                conn = pooltest.UnixConnection(site.sock(old), timeout=10)
                conn.request("GET", path)
                queued.append(conn)
        finally:
            os.kill(pid, signal.SIGCONT)
        # And reads right after it runs again, until it has gone.
        late = []
        while site.procs[old].poll() is None and len(late) < 200:
            try:
                late.append(hasite.call(site.sock(old), "GET", path, timeout=10))
            except (OSError, http.client.HTTPException, ValueError):
                break
        early = [answer(conn) for conn in queued]
        for got in early + late:
            self.assert_not_stale(got, path)
        # The queued reads are answered, not lost with the process: they meet the check.
        self.assertTrue(any(got is not None for got in early), site.log())
        print("reads of the old leader: queued while stopped %s; after SIGCONT %s" % (
            [got and got[0] for got in early], [got and got[0] for got in late]))
        try:
            status = site.procs[old].wait(timeout=3 * site.lease_ms / 1000 + 5)
        except subprocess.TimeoutExpired:
            self.fail("the paused leader did not exit\n" + site.log())
        self.assertEqual(status, hasite.EXIT_LOST_LEADERSHIP, site.log())
        self.assertEqual(site.leader(), new)


if __name__ == "__main__":
    unittest.main(verbosity=2)
