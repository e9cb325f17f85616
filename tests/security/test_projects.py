#!/usr/bin/env python3
"""Attacks on projects (docs/security.md, "Projects") by a hostile second user, run as an
unprivileged local user against a real `gpupool up --enforce-projects members` on a
4-GPU fake node: `--project` was free text, so bob could charge alice's project (use up
its limits, take its QoS) or a project no one made (under fair share by project, a fresh
share). Every test asserts the refusal, its message, and that no job was stored. A second
pool, under the default `enforce-projects none`, takes the look-alike names of projects
that only jobs name.

Usage: test_projects.py PATH_TO_GPUPOOL
"""
import json
import os
import unittest

import seclib
import pooltest


class ProjectsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.env = seclib.Env(extra_args=["--enforce-projects", "members"])
        cls.env.start()
        e = cls.env
        # Alice's team: one job queued at once, so that one of bob's would lock her out.
        r = e.cli(None, "limits", "set", "--project", "vision", "--members", e.alice.name,
                  "--max-queued", "1")
        assert r.returncode == 0, r.stdout + r.stderr

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()

    def refused(self, st, body, what):
        self.assertEqual(st, 403, body)
        self.assertIn(what, body["error"])
        self.assertTrue(body["error"].startswith("project (--project): "), body)

    def test_bob_cannot_charge_alices_project_by_any_path(self):
        e = self.env
        before = len(e.jobs())
        not_member = "gpsec-bob is not a member of project 'vision'"
        for extra in ({}, {"array": "0-3"}, {"interactive": "alloc", "command": []}):
            job = dict({"command": ["true"], "project": "vision"}, **extra)
            st, body = e.submit(e.bob, job)
            self.refused(st, body, not_member)
            self.assertIn("gpupool limits set --project vision --add-member gpsec-bob",
                          body["error"])
        r = e.cli(e.bob, "submit", "--project", "vision", "--", "true")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn(not_member, r.stderr)
        # A script's #GPUPOOL lines go the same way.
        script = os.path.join(e.bob.home, "job.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n#GPUPOOL --project vision\ntrue\n")
        os.chown(script, e.bob.uid, e.bob.gid)
        os.chmod(script, 0o755)
        r = e.cli(e.bob, "submit", script)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn(not_member, r.stderr)
        r = e.cli(e.bob, "run", "--project", "vision", "--", "true")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertEqual(len(e.jobs()), before, "a job was created")
        # Nor may he make himself a member.
        r = e.cli(e.bob, "limits", "set", "--project", "vision", "--add-member", e.bob.name)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        st, limits, _ = e.api(e.bob, "GET", "/v1/limits")
        self.assertEqual(limits["projects"]["vision"]["members"], [e.alice.name])
        # Alice's project is still hers: her job is its one queued job (max_queued 1).
        st, body = e.submit(e.alice, {"command": ["true"], "project": "vision"})
        self.assertEqual(st, 201, body)

    def test_two_admins_interleaved_limits_edits_both_land(self):
        """Lost updates: two admins' read-modify-writes of the limits read one revision and
        the second PUT undid the first's change. Now the second is refused (409, naming
        If-Match) with nothing changed, and applied again to a fresh read it lands too."""
        e = self.env
        st, a_read, a_h = e.api(None, "GET", "/v1/limits")  # admin A reads
        self.assertEqual(st, 200, a_read)
        st, b_read, b_h = e.api(None, "GET", "/v1/limits")  # admin B reads the same
        etag = {k.lower(): v for k, v in a_h.items()}["etag"]
        self.assertEqual(etag, '"%d"' % a_read["revision"])
        self.assertEqual({k.lower(): v for k, v in b_h.items()}["etag"], etag)
        a_read["projects"]["lost-a"] = {"max_gpus": 1}
        st, body, _ = e.api(None, "PUT", "/v1/limits", a_read, headers={"If-Match": etag})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["revision"], a_read["revision"] + 1)
        b_read["projects"]["lost-b"] = {"max_gpus": 2}
        st, body, _ = e.api(None, "PUT", "/v1/limits", b_read)  # its body names its revision
        self.assertEqual(st, 409, body)
        self.assertIn("the limits changed since they were read", body["error"])
        self.assertIn("If-Match", body["error"])
        # B's `limits set` reads again and applies its change to what it reads.
        r = e.cli(None, "limits", "set", "--project", "lost-b", "--max-gpus", "2")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        st, limits, _ = e.api(e.bob, "GET", "/v1/limits")
        self.assertEqual(limits["projects"]["lost-a"], {"max_gpus": 1})
        self.assertEqual(limits["projects"]["lost-b"], {"max_gpus": 2})
        self.assertEqual(limits["revision"], a_read["revision"] + 2)

    def test_bob_cannot_make_up_a_project_to_dodge_his_share(self):
        e = self.env
        before = len(e.jobs())
        st, body = e.submit(e.bob, {"command": ["true"], "project": "bob-fresh-share"})
        self.refused(st, body, "there is no project 'bob-fresh-share'")
        self.assertIn("you are a member of no project", body["error"])
        r = e.cli(e.bob, "submit", "--project", "bob-fresh-share", "--array", "0-9", "--",
                  "true")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertEqual(len(e.jobs()), before, "a job was created")
        # Without --project (or naming himself) his jobs charge his own name, as ever.
        st, body = e.submit(e.bob, {"command": ["true"]})
        self.assertEqual(st, 201, body)
        self.assertEqual(body["job"].get("project", ""), "")
        st, body = e.submit(e.bob, {"command": ["true"], "project": e.bob.name})
        self.assertEqual(st, 201, body)

    def test_membership_outlives_a_restart_and_root_is_no_exception(self):
        e = self.env
        st, body = e.submit(None, {"command": ["true"], "project": "vision", "workdir": "/"})
        self.refused(st, body, "root is not a member of project 'vision'")
        e.restart_server()
        r = e.cli(None, "limits")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("MEMBERS", r.stdout)
        self.assertIn(e.alice.name, r.stdout)
        st, body = e.submit(e.bob, {"command": ["true"], "project": "vision"})
        self.refused(st, body, "gpsec-bob is not a member of project 'vision'")
        r = e.cli(None, "limits", "set", "--project", "vision", "--add-member", "gpsec-nosuch")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("limits.projects.vision.members: there is no user 'gpsec-nosuch'", r.stderr)

    def test_a_queued_job_waits_once_its_user_leaves_the_project(self):
        """Jobs keep their project; one queued (here held, then released) after its user
        left the project waits with the reason, and starts once an admin adds them back."""
        e = self.env
        r = e.cli(e.alice, "submit", "--hold", "--project", "vision", "--json", "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        jid = json.loads(r.stdout)["job"]["id"]
        r = e.cli(None, "limits", "set", "--project", "vision", "--remove-member", e.alice.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            self.assertEqual(e.cli(e.alice, "release", str(jid)).returncode, 0)
            why = pooltest.wait_for("the project gate's reason", lambda: (
                e.job(jid).get("pending_reason", "").startswith("waits: ") and
                e.job(jid)["pending_reason"]))
            self.assertIn("gpsec-alice may not charge project 'vision' (enforce-projects "
                          "members)", why)
            self.assertEqual(e.job(jid)["state"], "PENDING")
        finally:
            r = e.cli(None, "limits", "set", "--project", "vision", "--add-member", e.alice.name)
            self.assertEqual(r.returncode, 0, r.stderr)
        e.wait(jid, ("SUCCEEDED",))

    def test_a_project_named_after_bob_must_list_bob(self):
        """A careless admin made project 'gpsec-bob' for alice's team: bob, no member,
        charged it with `--project gpsec-bob` (naming oneself is always allowed), its
        limits and QoS. The admin is told instead, and nothing is set."""
        e = self.env
        r = e.cli(None, "limits", "set", "--project", e.bob.name, "--members", e.alice.name,
                  "--max-gpus", "1")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("limits.projects.gpsec-bob.members: 'gpsec-bob' is also a login name",
                      r.stderr)
        st, limits, _ = e.api(e.bob, "GET", "/v1/limits")
        self.assertNotIn(e.bob.name, limits["projects"])

    def test_bob_cannot_escape_his_default_project_by_naming_himself(self):
        """The admin put bob in project 'bobs-team' (his default, max_gpus 1): bob named
        himself (`--project gpsec-bob`, always allowed) to run outside it, with a fair
        share of his own by project and none of the team's limits. Refused now."""
        e = self.env
        for args in (["--project", "bobs-team", "--members", e.bob.name, "--max-gpus", "1"],
                     ["--user", e.bob.name, "--default-project", "bobs-team"]):
            r = e.cli(None, "limits", "set", *args)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        try:
            before = len(e.jobs())
            st, body = e.submit(e.bob, {"command": ["true"], "project": e.bob.name})
            self.refused(st, body, "'gpsec-bob' is your own name, and your jobs charge your "
                         "default project 'bobs-team'")
            r = e.cli(e.bob, "submit", "--project", e.bob.name, "--", "true")
            self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
            self.assertEqual(len(e.jobs()), before, "a job was created")
            st, body = e.submit(e.bob, {"command": ["true"]})
            self.assertEqual(st, 201, body)
            self.assertEqual(body["job"]["project"], "bobs-team")
        finally:  # bob as the other tests expect him: in no project
            for args in (["--user", e.bob.name, "--default-project", "none"],
                         ["--project", "bobs-team", "--remove-member", e.bob.name]):
                r = e.cli(None, "limits", "set", *args)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_names_that_move_the_cursor_are_refused(self):
        """Escape sequences in a project's name reached every terminal that lists the
        queue, usage or limits, or reads a refusal: refused, and not echoed."""
        e = self.env
        before = len(e.jobs())
        # And names that print like another's ("vision" with a zero-width space, or a
        # space at its end) or reversed (U+202E).
        for name in ("red\x1b[31m", "x" * 65, "vision\u200b", "vision ", "\u202enoisiv"):
            st, body = e.submit(e.bob, {"command": ["true"], "project": name})
            self.assertEqual(st, 400, body)
            self.assertTrue(body["error"].startswith("project: a project name of 1..64 bytes"),
                            body)
            self.assertNotIn(name, body["error"])
        # Letters of two scripts: "v\u0456sion" (a Cyrillic \u0456) lists like "vision".
        st, body = e.submit(e.bob, {"command": ["true"], "project": "v\u0456sion"})
        self.assertEqual(st, 400, body)
        self.assertTrue(body["error"].startswith(
            "project: a project name mixes Latin, Greek or Cyrillic letters"), body)
        self.assertEqual(len(e.jobs()), before, "a job was created")
        st, body, _ = e.api(None, "PUT", "/v1/limits",
                            {"projects": {"red\x1b[31m": {"max_gpus": 1}}})
        self.assertEqual(st, 400, body)
        self.assertNotIn("\x1b", body["error"])
        r = e.cli(None, "limits", "set", "--project", "none", "--members", e.alice.name)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("limits.projects.none: `gpupool limits set` reads 'none' as nothing",
                      r.stderr)

    def test_bob_cannot_name_the_cyrillic_look_alike_of_a_project(self):
        """Whole-script confusables: "\u0441\u043e\u0441\u043e" is all Cyrillic (so not of
        two scripts) and listed like alice's "coco" in the queue, usage and the dashboard.
        Refused (400, not echoed) before the membership check, and so is an entry of it."""
        e = self.env
        r = e.cli(None, "limits", "set", "--project", "coco", "--members", e.alice.name)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        before = len(e.jobs())
        look_alike = "\u0441\u043e\u0441\u043e"
        for name in (look_alike, "C0C0"):
            st, body = e.submit(e.bob, {"command": ["true"], "project": name})
            self.assertEqual(st, 400, body)
            self.assertTrue(body["error"].startswith(
                "project: the project name prints like that of another project"), body)
            self.assertNotIn(name, body["error"])
        r = e.cli(e.bob, "submit", "--project", look_alike, "--", "true")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("prints like that of another project", r.stderr)
        self.assertEqual(len(e.jobs()), before, "a job was created")
        r = e.cli(None, "limits", "set", "--project", look_alike, "--members", e.bob.name)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("limits.projects: a new project name prints like that of another entry",
                      r.stderr)
        self.assertNotIn(look_alike, r.stderr)
        st, limits, _ = e.api(e.bob, "GET", "/v1/limits")
        self.assertNotIn(look_alike, limits["projects"])


class LookAlikeProjectsWithoutEnforcementTest(seclib.PoolTestCase):
    """Under enforce-projects none (the default) with no entries: once alice's jobs charge
    "coco", bob's all-Cyrillic "\u0441\u043e\u0441\u043e" is refused, as it would list with
    hers in the queue, `usage --by project` and the dashboard though charged apart."""

    def test_bob_cannot_name_the_look_alike_of_alices_project(self):
        e = self.env
        st, body = e.submit(e.alice, {"command": ["true"], "project": "coco"})
        self.assertEqual(st, 201, body)
        e.wait(body["job"]["id"], ("SUCCEEDED",))  # ended: still a project the pool lists
        look_alike = "\u0441\u043e\u0441\u043e"
        st, body = e.submit(e.bob, {"command": ["true"], "project": look_alike})
        self.assertEqual(st, 400, body)
        self.assertTrue(body["error"].startswith(
            "project: the project name prints like that of another project"), body)
        self.assertNotIn(look_alike, body["error"])
        self.assertEqual([j["project"] for j in e.jobs()], ["coco"])
        # A name of its own in one script is a name like any other.
        own = "\u0437\u0440\u0435\u043d\u0438\u0435"
        st, body = e.submit(e.bob, {"command": ["true"], "project": own})
        self.assertEqual(st, 201, body)


if __name__ == "__main__":
    seclib.main()
