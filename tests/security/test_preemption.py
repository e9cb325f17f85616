#!/usr/bin/env python3
"""Attacks on preemption (docs/preemption.md) by a hostile second user, each run as an
unprivileged local user against a real `gpupool up` on a 4-GPU fake node. Every test
asserts the refusal (or that nothing was preempted) and that nothing changed.

Usage: test_preemption.py PATH_TO_GPUPOOL
"""
import os
import subprocess
import unittest

import seclib
import pooltest

# Ignores SIGTERM: a preempted job stays in its grace until SIGKILL or checkpoint-done.
STUBBORN = ["sh", "-c", "trap '' TERM; echo file=$GPUPOOL_PREEMPT_DEADLINE_FILE; "
            "while :; do sleep 0.2; done"]


class PreemptionTest(unittest.TestCase):
    def setUp(self):
        # A pool of its own per test: a stubborn job in its grace outlives a cancel.
        self.env = seclib.Env(extra_args=["--preempt-min-runtime", "1s"])
        self.env.start()

    def tearDown(self):
        self.env.stop()

    def victim(self, user):
        st, body = self.env.submit(user, {"command": STUBBORN, "request": {"gpus": 4},
                                          "preemptible": True, "min_runtime_s": 1,
                                          "preempt_grace_s": 60, "output": "victim.out"})
        self.assertEqual(st, 201, body)
        jid = body["job"]["id"]
        self.env.wait(jid, ("RUNNING",))
        return jid

    def waits(self, user, priority):
        """A 4-GPU job of `user` at `priority`, once a pass has given it its reason."""
        st, body = self.env.submit(user, {"command": ["true"], "request": {"gpus": 4},
                                          "priority": priority})
        self.assertEqual(st, 201, body)
        jid = body["job"]["id"]
        return jid, pooltest.wait_for("a pass over job %d" % jid,
                                      lambda: self.env.job(jid).get("pending_reason"))

    def test_a_priority_of_his_own_choosing_preempts_none_of_another_users_jobs(self):
        """--priority is each user's own choice: bob's 1,000,000 stopped alice's
        preemptible job (both within their fair share), as any user could stop anyone's."""
        e = self.env
        a = self.victim(e.alice)
        b, why = self.waits(e.bob, 1000000)
        self.assertNotIn("preempting", why)
        self.assertNotIn("preempted_by", e.job(a))
        self.assertEqual(e.job(a)["state"], "RUNNING")
        # Alice's own higher priority does preempt her job (once it has run its minimum
        # second): the rule still works, and it was never bob's job that stopped it.
        mine, _ = self.waits(e.alice, 10)
        self.assertEqual(pooltest.wait_for("the preemption", lambda: e.job(a).get("preempted_by")),
                         mine)
        self.assertEqual(e.job(b)["state"], "PENDING")

    def test_another_user_cannot_end_a_preempted_jobs_grace(self):
        e = self.env
        a = self.victim(e.alice)
        self.waits(e.alice, 10)
        pooltest.wait_for("the preemption", lambda: e.job(a).get("preempted_by"))
        st, body, _ = e.api(e.bob, "POST", "/v1/jobs/%d/checkpoint-done" % a)
        self.assertEqual(st, 403, body)
        self.assertNotIn("checkpoint_done", e.job(a))
        self.assertEqual(e.job(a)["state"], "RUNNING")  # still in its 60 s grace
        r = e.cli(e.bob, "checkpoint-done", str(a))
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertNotIn("checkpoint_done", e.job(a))
        # Its owner may.
        st, body, _ = e.api(e.alice, "POST", "/v1/jobs/%d/checkpoint-done" % a)
        self.assertEqual(st, 200, body)
        pooltest.wait_for("the requeue", lambda: e.job(a).get("preemptions") == 1)

    def test_no_other_user_can_open_a_jobs_deadline_file(self):
        """The deadline file was 0644: any user could read it, and lock it so that the
        shim waited for the lock before the SIGTERM and never stopped the job."""
        e = self.env
        self.victim(e.alice)
        out = os.path.join(e.alice.home, "victim.out")
        line = pooltest.wait_for("the job's output", lambda: os.path.exists(out) and [
            x for x in open(out).read().splitlines() if x.startswith("file=/")])
        path = line[0][len("file="):]
        code = ("import fcntl, sys\ntry:\n    f = open(sys.argv[1])\n"
                "    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('OPENED')\n"
                "except OSError as x:\n    print('DENIED', x.errno)\n")
        r = subprocess.run(seclib.as_user_argv(e.bob, [seclib.USER_PYTHON, "-c", code, path]),
                           capture_output=True, text=True)
        self.assertIn("DENIED", r.stdout, r.stdout + r.stderr)
        r = subprocess.run(seclib.as_user_argv(e.alice, [seclib.USER_PYTHON, "-c", code, path]),
                           capture_output=True, text=True)
        self.assertIn("OPENED", r.stdout, r.stdout + r.stderr)  # the job's user reads it

    def test_the_admins_preemption_defaults_cannot_be_dodged(self):
        """The admin makes bob's jobs preemptible after 30 min with a 1 min grace; bob
        asked --preemptible=false, a minimum run time of a year, or a day's grace."""
        e = self.env
        st, body, _ = e.api(None, "PUT", "/v1/limits", {"users": {e.bob.name: {
            "preemptible": True, "min_runtime_s": 1800, "preempt_grace_s": 60}}})
        self.assertEqual(st, 200, body)
        before = len(e.jobs())
        for args, field in ((["--min-runtime", "365d"], "min_runtime_s (--min-runtime)"),
                            (["--grace", "24h"], "preempt_grace_s (--grace)"),
                            (["--grace", "61s"], "preempt_grace_s (--grace)")):
            r = e.cli(e.bob, "submit", "--preemptible", *args, "--", "true")
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn(field, r.stderr)
            self.assertIn("is longer than the", r.stderr)
        for extra in ({"min_runtime_s": 31536000}, {"preempt_grace_s": 86400}):
            st, body = e.submit(e.bob, dict({"command": ["true"], "preemptible": True}, **extra))
            self.assertEqual(st, 400, body)
            self.assertIn(list(extra)[0], body["error"])
        self.assertEqual(len(e.jobs()), before, "a job was created")
        st, body = e.submit(e.bob, {"command": ["true"], "preemptible": False})
        self.assertEqual(st, 201, body)
        self.assertTrue(body["job"]["preemptible"])
        self.assertEqual(body["job"]["min_runtime_s"], 1800)
        # Less than the admin's is his to ask.
        st, body = e.submit(e.bob, {"command": ["true"], "preemptible": True,
                                    "min_runtime_s": 60, "preempt_grace_s": 10})
        self.assertEqual(st, 201, body)
        self.assertEqual(body["job"]["preempt_grace_s"], 10)
        # Nor by naming alice's team's project (any project may be named under the default
        # enforce-projects none), whose entry made its jobs unpreemptible with a long
        # grace: the project's entry came first, so bob's job was never a victim.
        st, body, _ = e.api(None, "PUT", "/v1/limits", {
            "users": {e.bob.name: {"preemptible": True, "min_runtime_s": 1800,
                                   "preempt_grace_s": 60}},
            "projects": {"prod": {"preemptible": False, "preempt_grace_s": 3600,
                                  "members": [e.alice.name]}}})
        self.assertEqual(st, 200, body)
        st, body = e.submit(e.bob, {"command": ["true"], "project": "prod"})
        self.assertEqual(st, 201, body)
        self.assertTrue(body["job"].get("preemptible"), body)
        self.assertEqual(body["job"]["preempt_grace_s"], 60)
        st, body = e.submit(e.bob, {"command": ["true"], "project": "prod",
                                    "preemptible": True, "preempt_grace_s": 3600})
        self.assertEqual(st, 400, body)
        st, body = e.submit(e.alice, {"command": ["true"], "project": "prod"})
        self.assertEqual(st, 201, body)  # its members get their team's entry
        self.assertFalse(body["job"].get("preemptible", False), body)

    def test_preemption_fields_with_wrong_types_or_sizes_are_refused_naming_them(self):
        e = self.env
        before = len(e.jobs())
        for extra, field in (({"min_runtime_s": -5}, "min_runtime_s"),
                             ({"min_runtime_s": "10m"}, "min_runtime_s"),
                             ({"preempt_grace_s": 1e30}, "preempt_grace_s"),
                             ({"preempt_grace_s": 99999999999999999999}, "preempt_grace_s"),
                             ({"preemptible": "yes"}, "preemptible"),
                             ({"preempted_by": 1}, "preempted_by"),
                             ({"checkpoint_done": True}, "checkpoint_done"),
                             ({"preemptions": -1}, "preemptions"),
                             ({"request": {"gpus": 1, "gpu_memory_bytes": -1}},
                              "gpu_memory_bytes"),
                             ({"request": {"gpus": 1, "gpu_memory_bytes": "10Q"}},
                              "gpu_memory_bytes"),
                             ({"request": {"gpus": 1, "gpu_memory_bytes": 1e30}},
                              "gpu_memory_bytes")):
            job = dict({"command": ["true"], "preemptible": True}, **extra)
            st, body = e.submit(e.bob, job)
            self.assertEqual(st, 400, body)
            self.assertIn(field, body["error"])
            if extra.get("preempt_grace_s", 0) > 2**63:
                self.assertIn("is outside the range 0..86400", body["error"])
        # The largest a request may say: refused as more than any GPU here (409).
        st, body = e.submit(e.bob, {"command": ["true"],
                                    "request": {"gpus": 1, "gpu_memory_bytes": 2**63 - 1}})
        self.assertEqual(st, 409, body)
        self.assertIn("GPU memory", body["error"])
        for args in (["--min-runtime", "-5s"], ["--grace", "1e30"], ["--grace", "10y"],
                     ["--min-runtime", "99999999999999999999s"], ["--gpu-mem", "10Q"],
                     ["--gpu-mem", "0"], ["--gpu-mem", "-1G"], ["--gpu-mem", "1e30"]):
            r = e.cli(e.bob, "submit", "--preemptible", *args, "--", "true")
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn(args[0], r.stderr)
        self.assertEqual(len(e.jobs()), before, "a job was created")


if __name__ == "__main__":
    seclib.main()
