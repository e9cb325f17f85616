#!/usr/bin/env python3
"""The usage limits' revision (GET /v1/limits "revision" and ETag, PUT with If-Match or
the body's "revision": docs/api.md) on several controllers sharing one real PostgreSQL
15 server, as an operator who edits them through whichever controller is at hand:

  * edits through the leader, through a standby (503 naming the leader, which the CLI
    follows) and through each new leader after the leader is killed (SIGKILL): every
    controller that leads answers the store's limits and revision, never a stale one, and
    enforces them;
  * the revision moved in the database behind the leader's back (a write whose answer
    was lost, the database edited by hand): the leader's next refused write makes it hold
    the store's limits, so `limits set` lands instead of being refused until a restart;
  * malformed If-Match headers and body revisions: 400 naming the header or field and
    what to send, never a 500 or a crash, and nothing written.

Usage: limits_test.py PATH_TO_GPUPOOL. Needs root (the test server runs as the
`postgres` account) and postgresql-15; skips without them.
"""
import json
import os
import subprocess
import sys
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import hasite  # noqa: E402  (tests/testlib)
import pooltest  # noqa: E402


def request(sock, method, path, body=None, headers=None):
    """(status, headers with lower-case names, JSON body) of one request over `sock`."""
    conn = pooltest.UnixConnection(sock, 10)
    try:
        data = json.dumps(body) if isinstance(body, (dict, list)) else body
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        raw = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(raw) if raw else None
    finally:
        conn.close()


class LimitsOnSeveralControllersTest(unittest.TestCase):
    def setUp(self):
        why = hasite.missing()
        if why:
            self.skipTest(why)
        self.site = hasite.Site(GPUPOOL, controllers=2, agents=0, lease_ms=2000)

    def tearDown(self):
        self.site.stop()

    def stored(self):
        """(limits, revision) as the database holds them; (None, 0) when never set."""
        rows = self.site.pg.query("SELECT value, revision FROM settings WHERE key = 'limits'")
        return (json.loads(rows[0][0]), int(rows[0][1])) if rows else (None, 0)

    def get(self, name):
        st, headers, body = request(self.site.sock(name), "GET", "/v1/limits")
        self.assertEqual(st, 200, body)
        self.assertEqual(headers["etag"], '"%d"' % body["revision"])
        return body

    def assert_serves_the_store(self, name):
        """`name` answers the stored limits at the stored revision."""
        body = self.get(name)
        limits, revision = self.stored()
        self.assertEqual(body["revision"], revision, self.site.log())
        self.assertEqual(body["users"], limits["users"])
        return revision

    def limits_set(self, *args, first):
        """`gpupool limits set ARGS` given every controller, `first` first."""
        names = [first] + [n for n in self.site.names if n != first]
        env = dict(os.environ, GPUPOOL_SERVER=",".join("unix:" + self.site.sock(n)
                                                       for n in names))
        r = subprocess.run([GPUPOOL, "limits", "set"] + list(args), env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr + self.site.log())

    def standby(self, name):
        """Whether `name` answers as a standby that knows the leader (a controller just
        started may not listen yet, nor have read the lease)."""
        try:
            st, _, body = request(self.site.sock(name), "GET", "/readyz")
        except OSError:
            return False
        return st == 503 and bool(body.get("leader"))

    def submit(self, leader):
        """Exit status and stderr of one root submission to `leader`."""
        env = dict(os.environ, GPUPOOL_SERVER="unix:" + self.site.sock(leader))
        r = subprocess.run([GPUPOOL, "submit", "--", "true"], env=env, capture_output=True,
                           text=True, timeout=60, cwd=self.site.root)
        return r.returncode, r.stderr

    def test_every_leader_serves_and_enforces_the_stored_limits(self):
        site = self.site
        a = site.leader()
        b = next(n for n in site.names if n != a)
        self.assertEqual(self.get(a)["revision"], 0)
        pooltest.wait_for("the standby naming the leader", lambda: self.standby(b))
        # A standby writes nothing: 503 naming the leader, whatever the If-Match.
        st, _, body = request(site.sock(b), "PUT", "/v1/limits",
                              {"users": {"root": {"max_queued": 9}}}, {"If-Match": '"0"'})
        self.assertEqual(st, 503, body)
        self.assertTrue(body["leader"].endswith(a + "/gpupool.sock"), body)
        self.assertEqual(self.stored(), (None, 0))
        st, _, body = request(site.sock(a), "PUT", "/v1/limits",
                              {"users": {"root": {"max_queued": 9}}}, {"If-Match": '"0"'})
        self.assertEqual((st, body["revision"]), (200, 1), body)
        # The CLI given the standby first follows its 503 to the leader.
        self.limits_set("--user", "root", "--max-queued", "2", first=b)
        self.assertEqual(self.assert_serves_the_store(a), 2)
        # Behind the leader's back (a write whose answer was lost, a hand edit): the
        # leader still answers revision 2; `limits set` is refused once, reads again
        # and lands, where every try was refused until a restart.
        site.pg.query("UPDATE settings SET value = '{\"users\": {\"root\": {\"max_queued\": "
                      "5}}}', revision = revision + 1 WHERE key = 'limits'")
        self.limits_set("--user", "root", "--max-queued", "1", first=a)
        self.assertEqual(self.assert_serves_the_store(a), 4)
        self.assertEqual(self.stored()[0]["users"]["root"]["max_queued"], 1)
        self.assertEqual(self.submit(a)[0], 0)
        code, err = self.submit(a)
        self.assertNotEqual(code, 0)
        self.assertIn("max_queued 1", err)
        # The leader is killed: the standby that takes over answers the store's limits and
        # revision, enforces them, and takes a write at that revision.
        site.kill9(a)
        self.assertEqual(site.leader(besides=a), b)
        self.assertEqual(self.assert_serves_the_store(b), 4)
        self.assertNotEqual(self.submit(b)[0], 0)  # the queued job counts: 1 of 1
        st, _, body = request(site.sock(b), "PUT", "/v1/limits",
                              {"users": {"root": {"max_queued": 3}}}, {"If-Match": '"4"'})
        self.assertEqual((st, body.get("revision")), (200, 5), body)
        self.assertEqual(self.submit(b)[0], 0)
        site.start_controller(a)  # back, as a standby; then b is killed: a leads again
        pooltest.wait_for("the restarted controller standing by", lambda: self.standby(a))
        site.kill9(b)
        self.assertEqual(site.leader(besides=b), a)
        self.assertEqual(self.assert_serves_the_store(a), 5)
        st, _, body = request(site.sock(a), "PUT", "/v1/limits",
                              {"users": {"root": {"max_queued": 1}}}, {"If-Match": '"4"'})
        self.assertEqual(st, 409, body)
        self.assertIn("they are at revision 5, not 4", body["error"])
        self.assertEqual(self.stored()[1], 5)

    def test_malformed_revisions_are_400_naming_the_header_or_field(self):
        site = self.site
        a = site.leader()
        st, _, body = request(site.sock(a), "PUT", "/v1/limits", {"users": {}})
        self.assertEqual((st, body["revision"]), (200, 1), body)
        limits = {"users": {"root": {"max_queued": 4}}}
        for tag in ["abc", '"abc"', '"-1"', "-1", '"99999999999999999999"', '"1", "2"',
                    '"1" "2"', 'W/"1"', '""', '"', "'1'", '"1', "1.0", "0x1", '"*"', "**",
                    '"1"\t"1"', "\u00e9"]:
            st, _, body = request(site.sock(a), "PUT", "/v1/limits", limits,
                                  {"If-Match": tag.encode("utf-8")})
            self.assertEqual(st, 400, (tag, body))
            self.assertIn("If-Match", body["error"], tag)
            self.assertIn("GET /v1/limits", body["error"], tag)
        for revision in [-1, 1.5, "1", 1e30, None, [1], True]:
            st, _, body = request(site.sock(a), "PUT", "/v1/limits",
                                  dict(limits, revision=revision))
            self.assertEqual(st, 400, (revision, body))
            self.assertIn("limits.revision", body["error"], revision)
        st, _, body = request(site.sock(a), "PUT", "/v1/limits", dict(limits, revision=1),
                              {"If-Match": '"2"'})
        self.assertEqual(st, 400, body)
        self.assertIn("disagree", body["error"])
        self.assertEqual(self.stored()[1], 1)  # none of those wrote
        self.assertIsNone(site.procs[a].poll(), site.log())
        # Well-formed: a revision that is not the stored one is 409, even a huge one.
        st, _, body = request(site.sock(a), "PUT", "/v1/limits", limits,
                              {"If-Match": '"9223372036854775807"'})
        self.assertEqual(st, 409, body)
        # The stored one, quoted or not, and * (any): 200.
        for tag, revision in [('"1"', 2), ("2", 3), (" \"3\" ", 4), ("*", 5)]:
            st, headers, body = request(site.sock(a), "PUT", "/v1/limits", limits,
                                        {"If-Match": tag})
            self.assertEqual((st, body.get("revision")), (200, revision), (tag, body))
            self.assertEqual(headers["etag"], '"%d"' % revision)
        self.assertEqual((self.stored()[0]["users"], self.stored()[1]), (limits["users"], 5))


if __name__ == "__main__":
    unittest.main(verbosity=2)
