#!/usr/bin/env python3
"""Connection exhaustion (issue 25, item 7): a local user holding 10,000 half-sent requests
on the Unix socket, and as many unauthenticated on the TCP port, left other users without
answers and cut the node's own agent off (the server took connections until its open-files
limit and gave each 120 s, restarted by every byte). The pool runs at the red team's limit
(RLIMIT_NOFILE 20,000: about 9,900 connections a listener before the fix); alice holds
10,000 on each listener, reopening those the server closes, while bob's calls must be
answered at once and the local agent must keep polling.

Usage: test_connections.py PATH_TO_GPUPOOL
"""
import json
import os
import select
import subprocess
import time
import unittest

import seclib

HELD = 10000        # half-sent requests alice holds on each listener
SERVER_NOFILE = 20000
ANSWER_WITHIN_S = 2.0
REOPEN_PER_S = int(os.environ.get("GPSEC_REOPEN_PER_S", "1000"))  # 0: a flood


def read_counts(proc, until, want):
    """The attacker's last counts line once `want(counts)` holds or at `until`."""
    last = {}
    while time.time() < until:
        r, _, _ = select.select([proc.stdout], [], [], max(0.0, until - time.time()))
        if not r:
            break
        line = proc.stdout.readline()
        if not line:
            break
        last = json.loads(line)
        if want(last):
            break
    return last


class ConnectionExhaustionTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.env = seclib.Env(nofile=SERVER_NOFILE)
        cls.env.start()
        cls.bob_token = cls.env.token(cls.env.bob.name)
        cls.attackers = []

    @classmethod
    def tearDownClass(cls):
        for p in cls.attackers:
            if p.poll() is None:
                p.kill()
            p.wait()
        cls.env.stop()

    def node(self):
        st, body, _ = self.env.api(None, "GET", "/v1/nodes", timeout=5)
        self.assertEqual(st, 200, body)
        return body["nodes"][0]

    def timed_queue_as_bob(self):
        t0 = time.monotonic()
        try:
            r = self.env.cli(self.env.bob, "queue", timeout=10)
            ok = r.returncode == 0
            why = r.stderr
        except subprocess.TimeoutExpired:
            ok, why = False, "no answer in 10 s"
        return ok, time.monotonic() - t0, why

    def timed_tcp_as_bob(self):
        t0 = time.monotonic()
        try:
            st, body, _ = self.env.tcp(self.bob_token, "GET", "/v1/jobs", timeout=10)
            ok, why = st == 200, "%s %s" % (st, body)
        except OSError as e:
            ok, why = False, str(e)
        return ok, time.monotonic() - t0, why

    def test_held_connections_leave_other_users_and_the_agent_answered(self):
        e = self.env
        self.assertEqual(self.node()["state"], "up")
        start_us = time.time() * 1e6
        unix = e.hold_connections(e.alice, "unix", HELD, seconds=60, reopen_per_s=REOPEN_PER_S)
        tcp = e.hold_connections(e.alice, "tcp", HELD, seconds=60, reopen_per_s=REOPEN_PER_S)
        self.attackers += [unix, tcp]
        # At the limit: every one of the 10,000 a listener was opened (and those the server
        # closed reopened) before bob calls.
        ramp = time.time() + 30
        cu = read_counts(unix, ramp, lambda c: c["opened"] >= HELD)
        ct = read_counts(tcp, ramp, lambda c: c["opened"] >= HELD)
        self.assertGreaterEqual(cu.get("opened", 0), HELD, (cu, unix.stderr.read()
                                                            if unix.poll() is not None else ""))
        self.assertGreaterEqual(ct.get("opened", 0), HELD, ct)
        time.sleep(1)  # the attack as it stands, not as it starts
        results = [("queue (socket)", self.timed_queue_as_bob()),
                   ("GET /v1/jobs (TCP)", self.timed_tcp_as_bob()),
                   ("queue (socket)", self.timed_queue_as_bob())]
        # The local agent keeps polling: its heartbeat moves past the attack's start (one
        # poll is 10 s) and the node stays up.
        heartbeat_deadline = time.time() + 25
        node, root_errors = {"last_heartbeat_us": 0, "state": "unknown"}, []
        while node["last_heartbeat_us"] <= start_us and time.time() < heartbeat_deadline:
            try:
                node = self.node()
            except OSError as err:  # root's own call got no answer either
                root_errors.append(str(err))
            time.sleep(0.5)
        cu = read_counts(unix, time.time() + 1.5, lambda c: False)
        ct = read_counts(tcp, time.time() + 1.5, lambda c: False)
        print("\n  attack on the socket: %s\n  attack on TCP: %s" % (cu, ct))
        for what, (ok, secs, why) in results:
            print("  bob's %s: %s in %.2f s" % (what, "answered" if ok else "FAILED", secs))
        print("  root's GET /v1/nodes: %d failed; node: %s, last heartbeat %.1f s after "
              "the attack began" % (len(root_errors), node["state"],
                                    (node["last_heartbeat_us"] - start_us) / 1e6))
        if root_errors:
            print("  root's errors: %s" % sorted(set(root_errors)))
        for what, (ok, secs, why) in results:
            self.assertTrue(ok, "bob's %s: %s (%.1f s)" % (what, why, secs))
            self.assertLess(secs, ANSWER_WITHIN_S, "bob's %s took %.2f s" % (what, secs))
        self.assertGreater(node["last_heartbeat_us"], start_us,
                           "the local agent did not poll during the attack: %s" % node)
        self.assertEqual(node["state"], "up", node)


if __name__ == "__main__":
    seclib.main()
