#!/usr/bin/env python3
"""Attacks with tokens (issue 12, items 2, 3 and 10's token names, and the caller-kind
rule), each run against a real pool. Every test asserts the refusal, its message, and that
nothing changed.

Usage: test_tokens.py PATH_TO_GPUPOOL
"""
import time
import unittest

import seclib


def node_tokens(env):
    st, body, _ = env.api(None, "GET", "/v1/tokens")
    if st != 200:
        raise RuntimeError("token list: %s %s" % (st, body))
    return [t for t in body["tokens"] if t["kind"] == "node"]


class NodeTokenTest(unittest.TestCase):
    """Items 2 and 3: a node token was a root caller: it could submit jobs (which ran as
    uid 0) and act for any node (end another node's jobs, re-register it without GPUs)."""

    @classmethod
    def setUpClass(cls):
        e = cls.env = seclib.Env(split=True)
        e.start()
        cls.vm_token = e.token("vm", kind="node")
        cls.vm2_token = e.token("vm2", kind="node")
        # vm alone first, so that alice's job is placed there; then vm2.
        e.start_agent("vm", cls.vm_token)
        e.wait_nodes(1)
        st, body = e.submit(e.alice, {"command": ["sleep", "120"], "request": {"gpus": 1}})
        if st != 201:
            raise RuntimeError("submit: %s %s" % (st, body))
        cls.job_id = body["job"]["id"]
        job = e.wait(cls.job_id, ("RUNNING",))
        if job["placement"][0]["node"] != "vm":
            raise RuntimeError("the job is not on vm: %s" % job)
        e.start_agent("vm2", cls.vm2_token)
        e.wait_nodes(2)

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()

    def vm_view(self):
        st, body, _ = self.env.api(None, "GET", "/v1/nodes")
        self.assertEqual(st, 200, body)
        return [n for n in body["nodes"] if n["name"] == "vm"][0]

    def assert_vm_and_its_job_intact(self, vm_before):
        job = self.env.job(self.job_id)
        self.assertEqual(job["state"], "RUNNING", job)
        vm = self.vm_view()
        self.assertEqual(len(vm["gpus"]), len(vm_before["gpus"]))
        self.assertEqual([g["allocated_milli"] for g in vm["gpus"]],
                         [g["allocated_milli"] for g in vm_before["gpus"]])
        self.assertEqual(vm["running_jobs"], 1)
        self.assertEqual(vm["state"], "up")

    def test_node_token_cannot_submit_a_job(self):
        e = self.env
        before = len(e.jobs())
        st, body, _ = e.tcp(self.vm2_token, "POST", "/v1/jobs",
                            {"command": ["sh", "-c", "id -u > /tmp/gp-sec-owned"],
                             "workdir": "/tmp"})
        self.assertEqual(st, 403, body)
        self.assertIn("may only call the agent endpoints", body["error"])
        self.assertEqual(len(e.jobs()), before, "a job was created")
        # Nor any other user endpoint: a node caller has no user and no uid.
        for method, path in (("GET", "/v1/jobs"), ("GET", "/v1/whoami"),
                             ("GET", "/v1/jobs/%d" % self.job_id), ("GET", "/v1/tokens"),
                             ("POST", "/v1/jobs/%d/cancel" % self.job_id)):
            st, body, _ = e.tcp(self.vm2_token, method, path)
            self.assertEqual(st, 403, (method, path, body))
        self.assertEqual(e.job(self.job_id)["state"], "RUNNING")

    def test_node_token_cannot_end_another_nodes_job(self):
        e = self.env
        vm_before = self.vm_view()
        events = {"node": "vm", "events": [
            {"job_id": self.job_id, "attempt": 1, "kind": "exited", "exit_code": 0},
        ]}
        st, body, _ = e.tcp(self.vm2_token, "POST", "/v1/agent/events", events)
        self.assertEqual(st, 403, body)
        self.assertIn("this token belongs to node vm2; it cannot act for node vm", body["error"])
        events["events"][0]["kind"] = "lost"
        st, body, _ = e.tcp(self.vm2_token, "POST", "/v1/agent/events", events)
        self.assertEqual(st, 403, body)
        self.assert_vm_and_its_job_intact(vm_before)

    def test_node_token_cannot_register_or_poll_for_another_node(self):
        e = self.env
        vm_before = self.vm_view()
        st, body, _ = e.tcp(self.vm2_token, "POST", "/v1/agent/register",
                            {"protocol": "1.1", "node": "vm",
                             "info": {"hostname": "vm", "gpus": []},
                             "running": []})
        self.assertEqual(st, 403, body)
        self.assertIn("cannot act for node vm", body["error"])
        st, body, _ = e.tcp(self.vm2_token, "GET", "/v1/agent/work?node=vm&wait_ms=0")
        self.assertEqual(st, 403, body)
        st, body, _ = e.tcp(self.vm2_token, "POST", "/v1/agent/logs?node=vm&id=1&size=3")
        self.assertEqual(st, 403, body)
        self.assert_vm_and_its_job_intact(vm_before)

    def test_people_cannot_use_agent_endpoints(self):
        e = self.env
        vm_before = self.vm_view()
        alice_token = e.token(e.alice.name)
        events = {"node": "vm", "events": [
            {"job_id": self.job_id, "attempt": 1, "kind": "exited", "exit_code": 0},
        ]}
        st, body, _ = e.tcp(alice_token, "POST", "/v1/agent/events", events)
        self.assertEqual(st, 403, body)
        self.assertIn("node token", body["error"])
        st, body, _ = e.api(e.bob, "POST", "/v1/agent/events", events)
        self.assertEqual(st, 403, body)
        self.assert_vm_and_its_job_intact(vm_before)


class TokenLifecycleTest(seclib.PoolTestCase):
    """Item 10: unknown tokens were 403 (docs say 401), tokens never expired and could not
    be revoked, and token names were not checked."""

    def test_unknown_token_is_401(self):
        st, body, hdrs = self.env.tcp("gpt_" + "0" * 64, "GET", "/v1/jobs")
        self.assertEqual(st, 401, body)
        self.assertIn("unknown or revoked token", body["error"])
        self.assertEqual(hdrs.get("WWW-Authenticate"), "Bearer")
        st, body, _ = self.env.tcp(None, "GET", "/v1/jobs")
        self.assertEqual(st, 401, body)

    def test_expired_token_is_401(self):
        e = self.env
        token = e.token(e.alice.name, expires_in_s=2)
        st, body, _ = e.tcp(token, "GET", "/v1/whoami")
        self.assertEqual((st, body["user"]), (200, e.alice.name))
        time.sleep(2.5)
        st, body, _ = e.tcp(token, "GET", "/v1/whoami")
        self.assertEqual(st, 401, body)
        self.assertIn("has expired", body["error"])

    def test_revoked_token_is_401_and_only_admins_revoke(self):
        e = self.env
        token = e.token(e.bob.name)
        self.assertEqual(e.tcp(token, "GET", "/v1/whoami")[0], 200)
        st, body, _ = e.api(None, "GET", "/v1/tokens")
        ids = [t["id"] for t in body["tokens"] if t["user"] == e.bob.name]
        self.assertEqual(len(ids), 1, body)
        r = e.cli(e.alice, "token", "revoke", ids[0])
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("only admins manage tokens", r.stderr)
        self.assertEqual(e.tcp(token, "GET", "/v1/whoami")[0], 200)
        r = e.cli(None, "token", "revoke", ids[0])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("revoked user token " + ids[0], r.stdout)
        st, body, _ = e.tcp(token, "GET", "/v1/whoami")
        self.assertEqual(st, 401, body)
        r = e.cli(None, "token", "revoke", ids[0])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no token has the id", r.stderr)

    def test_token_names_are_checked(self):
        e = self.env
        st, before, _ = e.api(None, "GET", "/v1/tokens")
        r = e.cli(None, "token", "create", "--user", "gpsec-nosuchuser")
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("no account 'gpsec-nosuchuser'", r.stderr)
        r = e.cli(None, "token", "create", "--user", "root:x")
        self.assertIn("not a valid user name", r.stderr)
        r = e.cli(None, "token", "create", "--kind", "node", "--user", "-vm")
        self.assertIn("not a node name", r.stderr)
        st, after, _ = e.api(None, "GET", "/v1/tokens")
        self.assertEqual(after["tokens"], before["tokens"])
        r = e.cli(None, "token", "create", "--user", e.alice.name, "--kind", "metrics",
                  "--expires", "90d")
        self.assertEqual(r.returncode, 0, r.stderr)
        metrics = r.stdout.strip()
        self.assertEqual(e.tcp(metrics, "GET", "/v1/nodes")[0], 200)
        st, body, _ = e.tcp(metrics, "GET", "/v1/jobs")
        self.assertEqual(st, 403, body)
        r = e.cli(None, "token", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("LAST USED", r.stdout)
        self.assertIn("metrics", r.stdout)


class UpRestartTest(unittest.TestCase):
    """Item 10: every `gpupool up` added a node token for its local agent (12 after six
    starts), each valid forever."""

    def test_restarts_leave_one_node_token(self):
        e = seclib.Env()
        try:
            e.start()
            first = node_tokens(e)
            self.assertEqual(len(first), 1, first)
            for _ in range(3):
                e.restart_server()
            tokens = node_tokens(e)
            self.assertEqual(len(tokens), 1, tokens)
            self.assertEqual(tokens[0]["id"], first[0]["id"])
            # The local agent still works with it: a job runs.
            st, body = e.submit(e.alice, {"command": ["true"]})
            self.assertEqual(st, 201, body)
            e.wait(body["job"]["id"], ("SUCCEEDED",))
        finally:
            e.stop()


if __name__ == "__main__":
    seclib.main()
