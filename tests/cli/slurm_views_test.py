#!/usr/bin/env python3
"""What a Slurm user types without thinking (issue 30, docs/slurm.md), through the real
`gpupool` binary on a real `gpupool up` with a fake 4-GPU node: array element ids in every
job command and `cancel ARRAY` after its first element ended; limits that inherit the
default field by field and refuse unknown users; records that say who cancelled, name
jobs after their command and end an allocation as its command ended; `queue --name`,
`--format`, `--start`; `cancel --user/--state/--name`, which a user who is no admin may
not aim at others' jobs.

Usage: slurm_views_test.py PATH_TO_GPUPOOL NODE_JSON
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest

GPUPOOL = os.path.abspath(sys.argv.pop(1))
NODE = os.path.abspath(sys.argv.pop(1))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)

NOBODY = 65534


class NoPoolTest(unittest.TestCase):
    """What a newcomer meets before any pool runs."""

    def test_submit_to_a_missing_socket_fails_at_once(self):
        sock = os.path.join(pooltest.make_test_dir("gp-nosock-"), "gpupool.sock")
        start = time.monotonic()
        r = subprocess.run([GPUPOOL, "submit", "--server", "unix:" + sock, "--", "true"],
                           capture_output=True, text=True, timeout=30)
        # At once: no retries (they took 60 s, then 3 s), the socket named, and how to
        # start a pool.
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertEqual(r.stderr, "gpupool: cannot reach the gpupool server at unix:%s: cannot "
                                   "connect: No such file or directory: the socket does not "
                                   "exist, so no gpupool server runs there: start a pool with "
                                   "`gpupool up`, or set --server or GPUPOOL_SERVER to your "
                                   "pool's address\n" % sock)
        pooltest.remove_dir(os.path.dirname(sock))

    def test_fake_cpus_and_memory_are_checked(self):
        d = pooltest.make_test_dir("gp-fakecpus-")
        try:
            for flag, value, why in (("--fake-cpus", "none", "a number of CPUs above 0"),
                                     ("--fake-mem", "12", "a size needs a unit"),
                                     ("--fake-mem", "12K", "'12K' is below the smallest size, "
                                                           "1M")):
                r = subprocess.run([GPUPOOL, "up", "--state-dir", d, "--port", "0", "--fake", NODE,
                                    flag, value], capture_output=True, text=True, timeout=30)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn("%s %s: %s" % (flag, value, why), r.stderr)
            # A node file's "host" object is checked as the rest of the file.
            with open(NODE) as f:
                node = json.load(f)
            node["host"] = {"cpus": -2}
            bad = os.path.join(d, "node.json")
            with open(bad, "w") as f:
                json.dump(node, f)
            r = subprocess.run([GPUPOOL, "gpus", "--fake", bad], capture_output=True, text=True,
                               timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("host.cpus: a number of CPUs", r.stderr)
        finally:
            pooltest.remove_dir(d)

    @unittest.skipIf(os.path.exists("/sys/class/drm"), "a host with DRM devices")
    def test_gpus_is_quiet_on_a_host_without_gpus(self):
        r = subprocess.run([GPUPOOL, "gpus"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("No GPUs found", r.stdout)
        self.assertEqual(r.stderr, "")


class SlurmViewsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("a pool's jobs run as their users: needs root, as tests/integration")
        cls.dir = pooltest.make_test_dir("gp-views-")
        cls.sock = os.path.join(cls.dir, "gpupool.sock")
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + cls.sock)
        with open(os.path.join(cls.dir, "server.log"), "ab") as log:
            cls.server = subprocess.Popen(
                [GPUPOOL, "up", "--state-dir", cls.dir, "--port", "0", "--fake", NODE,
                 "--fake-cpus", "8", "--fake-mem", "64G"],
                stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            r = cls.gp("nodes", "--json")
            if r.returncode == 0 and any(n["state"] == "up" for n in json.loads(r.stdout)["nodes"]):
                return
            time.sleep(0.05)
        cls.tearDownClass()
        raise RuntimeError("no node came up: " + cls.log())

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes([cls.server])
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def log(cls):
        with open(os.path.join(cls.dir, "server.log"), errors="replace") as f:
            return f.read()[-3000:]

    @classmethod
    def gp(cls, *args, user=None, stdin=None):
        cmd = [GPUPOOL] + list(args)
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=cls.env,
                              cwd=cls.dir, input=stdin)

    def ok(self, *args, user=None):
        r = self.gp(*args, user=user)
        self.assertEqual(r.returncode, 0, "gpupool %s: %s%s\n%s" % (
            " ".join(args), r.stdout, r.stderr, self.log()))
        return r

    def submit(self, *args, user=None):
        r = self.ok("submit", "-c", "0.1", *args, user=user)
        m = re.match(r"Submitted (?:array )?job (\d+)", r.stdout)
        self.assertTrue(m, r.stdout)
        return int(m.group(1))

    def job(self, ref):
        return json.loads(self.ok("show", "--json", str(ref)).stdout)["job"]

    def wait(self, ref, states):
        return pooltest.wait_for("job %s in %s" % (ref, states),
                                 lambda: (lambda j: j if j["state"] in states else None)(
                                     self.job(ref)))

    def test_a_fake_node_offers_the_cpus_and_memory_it_was_given(self):
        node = json.loads(self.ok("nodes", "--json").stdout)["nodes"][0]
        self.assertEqual((node["cpu_milli"], node["memory_mib"]), (8000, 65536))

    def test_a_second_agent_replaying_the_file_has_gpus_of_its_own(self):
        state = os.path.join(self.dir, "agent-extra")
        # The file's own CPUs and memory (its "host" object) are what the node offers.
        with open(NODE) as f:
            node = json.load(f)
        node["host"] = {"cpus": 3, "memory_bytes": 4 << 30}
        replay = os.path.join(self.dir, "node-host.json")
        with open(replay, "w") as f:
            json.dump(node, f)
        with open(os.path.join(self.dir, "agent-extra.log"), "ab") as log:
            agent = subprocess.Popen(
                [GPUPOOL, "agent", "--controller", "unix:" + self.sock, "--state-dir", state,
                 "--fake", replay, "--node-name", "extra", "--telemetry-interval", "0"],
                stdout=log, stderr=log, start_new_session=True)
        try:
            nodes = pooltest.wait_for("the second node", lambda: (lambda n: n if len(n) == 2 else None)(
                {n["name"]: [g["uuid"] for g in n["gpus"]]
                 for n in json.loads(self.ok("nodes", "--json").stdout)["nodes"]
                 if n["state"] == "up"}))
            self.ok("node", "drain", "extra", "--reason", "a test's second agent")
            extra = [n for n in json.loads(self.ok("nodes", "--json").stdout)["nodes"]
                     if n["name"] == "extra"][0]
            self.assertEqual((extra["cpu_milli"], extra["memory_mib"]), (3000, 4096))
            with open(NODE) as f:
                in_file = [g["uuid"] for g in json.load(f)["gpus"]]
            first = [name for name in nodes if name != "extra"][0]
            self.assertEqual(nodes[first], in_file)  # under the file's own host name
            self.assertEqual(len(set(nodes["extra"]) & set(in_file)), 0, nodes)
            self.assertEqual([u[12:] for u in nodes["extra"]], [u[12:] for u in in_file])
            self.assertEqual(len(set(u[:12] for u in nodes["extra"])), 1)
        finally:
            pooltest.stop_processes([agent])

    def test_array_elements_everywhere_and_cancel_after_the_first_ended(self):
        # Element 0 ends at once; the others wait on a file that never comes.
        array = self.submit("-a", "0-3", "--", "sh", "-c",
                            'echo out-$GPUPOOL_ARRAY_TASK_ID; [ $GPUPOOL_ARRAY_TASK_ID = 0 ] '
                            '|| exec sleep 300')
        self.assertEqual(self.wait("%d_0" % array, pooltest.FINAL_STATES)["state"], "SUCCEEDED")
        self.assertEqual(self.ok("logs", "%d_0" % array).stdout, "out-0\n")
        shown = self.ok("show", "%d_1" % array).stdout
        self.assertIn("element 1 of array %d" % array, shown)
        one = self.wait("%d_1" % array, ("RUNNING",))["id"]
        r = self.ok("exec", "--job", "%d_1" % array, "--", "sh", "-c", "echo in $GPUPOOL_JOB_ID")
        self.assertEqual(r.stdout, "in %d\n" % one)
        r = self.gp("hold", "%d_2" % array)
        if self.job("%d_2" % array)["state"] == "PENDING":
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, "Held job %d_2\n" % array)
            self.ok("release", "%d_2" % array)
        else:  # it started first: refused, naming the element (once)
            self.assertRegex(r.stderr, r"^gpupool: job %d_2 is \w+; " % array)
        r = self.ok("cancel", str(array))
        self.assertRegex(r.stdout, r"^Cancelled array %d: \d+ queued and \d+ running elements? "
                                   r"\(.*1 had already ended\)\n$" % array)
        for i in range(1, 4):
            self.assertEqual(self.wait("%d_%d" % (array, i), pooltest.FINAL_STATES)["state"],
                             "CANCELLED")

    def test_limits_inherit_the_default_and_name_real_users(self):
        try:
            self.ok("limits", "set", "--default", "--max-queued", "2")
            self.ok("limits", "set", "--user", "root", "--max-gpus", "8")
            a = self.submit("-H", "--", "true")
            b = self.submit("-H", "--", "true")
            # root's own GPU limit keeps the default's max_queued.
            r = self.gp("submit", "-H", "--", "true")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("user root has 2 jobs queued; 1 more would pass the limit (max_queued 2)",
                          r.stderr)
            self.ok("cancel", str(a), str(b))
            shown = self.ok("limits").stdout
            self.assertRegex(shown, r"user root +8 +default +default\n")
            r = self.gp("limits", "set", "--user", "nosuchuser", "--max-gpus", "1")
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertEqual(r.stderr, "gpupool: limits.users.nosuchuser: there is no user "
                                       "'nosuchuser' on the controller host; limits apply to the "
                                       "login names jobs run as: give an existing one (`getent "
                                       "passwd NAME`), or create the account first\n")
            self.assertNotIn("nosuchuser", self.ok("limits").stdout)
        finally:
            self.gp("limits", "set", "--default", "--max-queued", "none")
            self.gp("limits", "set", "--user", "root", "--max-gpus", "none")

    def test_records_say_who_and_why(self):
        # An admin's cancel says who cancelled.
        victim = self.submit("--", "sleep", "300", user=NOBODY)
        self.wait(victim, ("RUNNING",))
        self.ok("cancel", str(victim))
        j = self.wait(victim, pooltest.FINAL_STATES)
        self.assertEqual(j["state"], "CANCELLED")
        self.assertEqual(j["reason"], "cancelled by root (ended by SIGTERM)")
        # An allocation whose command ends well ends SUCCEEDED, one that fails FAILED.
        for code, state in ((0, "SUCCEEDED"), (3, "FAILED")):
            r = self.gp("alloc", "-c", "0.1", "--", "sh", "-c", "echo $GPUPOOL_JOB_ID; exit %d" % code)
            self.assertEqual(r.returncode, code, r.stderr)
            j = self.wait(int(r.stdout.split()[0]), pooltest.FINAL_STATES)
            self.assertEqual((j["state"], j["exit_code"]), (state, code), j["reason"])
        # Jobs without --name are named after their script or command, as Slurm's.
        self.assertEqual(j["name"], "alloc")
        self.assertEqual(self.job(victim)["name"], "sleep")
        script = os.path.join(self.dir, "train.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\ntrue\n")
        os.chmod(script, 0o755)
        self.assertEqual(self.job(self.submit(script))["name"], "train.sh")
        self.assertEqual(self.job(self.submit("-J", "mine", script))["name"], "mine")

    def test_queue_name_format_and_start(self):
        a = self.submit("-H", "-J", "viewa", "--", "true")
        b = self.submit("-H", "-J", "viewb", "--project", "proj1", "--", "true")
        try:
            r = self.ok("queue", "--name", "viewb", "--format", "id,NAME,project,state,time_limit")
            self.assertEqual([line.split() for line in r.stdout.splitlines()], [
                ["ID", "NAME", "PROJECT", "STATE", "TIME_LIMIT"],
                [str(b), "viewb", "proj1", "PENDING", "none"]])
            r = self.ok("queue", "-n", "viewa,viewb", "-o", "id")
            self.assertEqual(r.stdout.split()[1:], [str(a), str(b)])
            r = self.gp("queue", "--format", "id,bogus")
            self.assertEqual(r.returncode, 2)
            self.assertIn("--format id,bogus: unknown field 'bogus'; the fields are id,user,name,",
                          r.stderr)
            # Held jobs have no planned start: the scheduler says so honestly.
            r = self.ok("queue", "--start", "--name", "viewa")
            self.assertEqual(r.stdout.splitlines()[0].split(),
                             ["ID", "USER", "NAME", "STATE", "GPUS", "START", "REASON"])
            self.assertIn(" N/A (not in the plan, which covers the first 100 pending jobs that "
                          "may start) ", r.stdout.splitlines()[1])
        finally:
            self.gp("cancel", str(a), str(b))

    def test_queue_sort_orders_the_whole_list_on_the_server(self):
        jobs = [self.submit("-H", "-J", name, "--priority", str(prio), "--", "true")
                for name, prio in (("sortb", 5), ("sorta", 9), ("sortc", 5))]
        try:
            def order(*sort):
                r = self.ok("queue", "-n", "sorta,sortb,sortc", "-o", "id,name", *sort)
                return [line.split()[1] for line in r.stdout.splitlines()[1:]]
            self.assertEqual(order(), ["sortb", "sorta", "sortc"])  # by id
            self.assertEqual(order("--sort=-priority,name"), ["sorta", "sortb", "sortc"])
            self.assertEqual(order("--sort", "priority,-id"), ["sortc", "sortb", "sorta"])
            self.assertEqual(order("-S", "name"), ["sorta", "sortb", "sortc"])
            # Paged: the server sorts the whole list, then takes the page.
            r = self.ok("queue", "--json", "-n", "sorta,sortb,sortc", "--sort=-name")
            self.assertEqual([j["name"] for j in json.loads(r.stdout)["jobs"]],
                             ["sortc", "sortb", "sorta"])
            r = self.gp("queue", "--sort", "colour")
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("--sort: unknown field 'colour'; use id, user, name, project, state, "
                          "priority, gpus, nodes, submitted, start, ended, wait, runtime, "
                          "time_limit (-FIELD for descending)", r.stderr)
        finally:
            self.gp("cancel", *map(str, jobs))

    def test_nodes_say_who_holds_each_gpu(self):
        mine = self.submit("-G", "1", "--", "sleep", "300", user=NOBODY)
        roots = self.submit("-G", "2", "--", "sleep", "300")
        try:
            self.wait(mine, ("RUNNING",))
            self.wait(roots, ("RUNNING",))
            node = self.job(mine)["placement"][0]["node"]
            # A user sees their own job and user, and of another user's only that it is one.
            shown = self.ok("nodes", user=NOBODY).stdout
            held = shown[shown.index("GPUs held (job, user, share):\n"):].splitlines()[1:4]
            self.assertEqual(sorted(line.split(": ", 1)[1] for line in held),
                             ["%d nobody" % mine, "another user's job", "another user's job"],
                             shown)
            # An admin sees every job and user; `node show` has them per GPU.
            shown = self.ok("nodes").stdout
            self.assertIn(": %d nobody\n" % mine, shown)
            self.assertEqual(shown.count(": %d root\n" % roots), 2, shown)
            one = self.ok("node", "show", node, user=NOBODY).stdout.splitlines()
            header = [i for i, line in enumerate(one) if line.startswith("GPU ")][0]
            self.assertTrue(one[header].endswith("  HELD BY"), one)
            cells = [line.split("  ")[-1].strip() for line in one[header + 1:header + 5]]
            self.assertEqual(sorted(cells), sorted(["%d nobody" % mine, "another user's job",
                                                    "another user's job", "-"]), one)
        finally:
            self.gp("cancel", str(mine), str(roots))

    def test_queue_start_plans_each_pending_job_in_queue_order(self):
        # Every GPU held for up to 10 minutes. In queue order, as the scheduler plans them
        # from the time limits (every 5 s): a 4-GPU job for 5 minutes when the first ends
        # (EASY's reservation too); then two 2-GPU jobs when it ends, one with a limit and
        # one without; a last 4-GPU job never, as the one without a limit holds 2 GPUs.
        first = self.submit("-G", "4", "-t", "10", "--", "sleep", "300")
        started = self.wait(first, ("RUNNING",))["start_time_us"] // 1000000
        big = self.submit("-G", "4", "-t", "5", "-J", "big", "--", "true")
        mid = self.submit("-G", "2", "-t", "5", "-J", "mid", "--", "true")
        endless = self.submit("-G", "2", "-J", "endless", "--", "true")
        last = self.submit("-G", "4", "-J", "last", "--", "true")
        try:
            pooltest.wait_for("a planned start for every job before the last", lambda: all(
                "start_estimate_us" in self.job(j) for j in (big, mid, endless)), timeout=60)
            self.assertEqual([self.job(j)["start_estimate_us"] // 1000000 - started
                              for j in (big, mid, endless)], [600, 900, 900])
            self.assertEqual(self.job(last)["start_estimate_note"],
                             "a job in its way has no time limit")
            rows = {line.split()[0]: line for line in self.ok("queue", "--start").stdout.splitlines()}
            self.assertRegex(rows[str(big)], r" big +PENDING +4 +\d{4}-\d\d-\d\dT\d\d:\d\d:"
                                             r"\d\dZ \(in (9m\d\ds|10m00s)\)( |$)")
            self.assertRegex(rows[str(mid)], r" mid +PENDING +2 +\S+Z \(in 1[45]m\d\ds\)( |$)")
            self.assertRegex(rows[str(last)], r" last +PENDING +4 +N/A \(a job in its way has "
                                              r"no time limit\)( |$)")
            self.assertNotIn(str(first), rows)  # running: not in --start's list
        finally:
            self.gp("cancel", str(first), str(big), str(mid), str(endless), str(last))

    def test_cancel_by_user_state_and_name(self):
        mine = [self.submit("-H", "-J", "sweep", "--", "true", user=NOBODY) for _ in range(2)]
        other = self.submit("-H", "-J", "sweep", "--", "true")
        # Another user's jobs: admins only; nothing is cancelled.
        r = self.gp("cancel", "--user", "root", "--name", "sweep", user=NOBODY)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("cancel --user root: only admins may cancel other users' jobs", r.stderr)
        self.assertEqual(self.job(other)["state"], "PENDING")
        r = self.gp("cancel", "--state", "SUCCEEDED", user=NOBODY)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--state SUCCEEDED: ended jobs cannot be cancelled", r.stderr)
        # Their own: every pending one of that name, not root's.
        r = self.ok("cancel", "--state", "PENDING", "--name", "sweep", user=NOBODY)
        self.assertEqual(r.stdout, "".join("Cancelled job %d\n" % j for j in mine))
        for j in mine:
            self.assertEqual(self.job(j)["state"], "CANCELLED")
        self.assertEqual(self.job(other)["state"], "PENDING")
        # An admin aims at one user's jobs.
        r = self.ok("cancel", "--user", "root", "-n", "sweep")
        self.assertEqual(r.stdout, "Cancelled job %d\n" % other)
        r = self.gp("cancel", "--name", "sweep", "12")
        self.assertEqual(r.returncode, 2)
        self.assertIn("give job ids or --user/--state/--name, not both", r.stderr)


if __name__ == "__main__":
    unittest.main()
