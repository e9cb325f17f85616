#!/usr/bin/python3
"""The web dashboard for real (docs/monitoring.md, "Dashboard"): a `gpupool server` with two
agents on fake GPU nodes, jobs of two users (running, a half-GPU share, pending with a
reason, finished), then

- the sign-in and session rules over HTTP (urllib): no cookie is 401, a bad or revoked
  token's cookie is refused, the cookie is HttpOnly and SameSite=Strict, a state change
  with only the cookie needs the CSRF header and this origin, a user's cookie cannot read
  another user's job, node and metrics tokens cannot sign in, hostile sign-in bodies get
  clear 4xx answers;
- the pages in a real headless Chromium driven by Selenium: sign-in, the cluster view's
  GPU cells and who holds them, the queue (active jobs by default, every state without
  sending state=all, array ids, wait and run times, sorting by header) with pending
  reasons, a job page with a line its job printed and `gpupool show`'s fields, a failed
  job opening on stderr, the usage plots, headers and time ranges; a user does not see
  another user's job, an admin does; live refresh (a job submitted after the page loaded
  and its state changes appear without a reload; a hidden tab asks nothing); every view
  at 420 px without sideways scroll, words not cut; no console errors (a CSP violation
  would be one); Cancel on a running array's element 0, then on element 1, from its page
  (the queue's link, the button, the confirmation) cancels that element alone, not the
  array whose id is element 0's store id. Screenshots (PNG) at desktop and phone width go
  to the directory given as the second argument (ctest:
  build/release/tests/dashboard/screenshots).

Usage: dashboard_test.py PATH_TO_GPUPOOL [SCREENSHOT_DIR]
Exit 77 (skipped) without root, chromium, chromedriver or python3-selenium.
"""
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
SHOTS = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(
    tempfile.gettempdir(), "gpupool-dashboard-screenshots")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
LOG_LINE = "dashboard-log-line-42"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Http:
    """Plain HTTP to the pool's TCP port, without following redirects."""

    def __init__(self, port):
        self.base = "http://127.0.0.1:%d" % port
        self.host = "127.0.0.1:%d" % port

    def request(self, method, path, body=None, headers=None):
        data = body.encode() if isinstance(body, str) else body
        req = urllib.request.Request(self.base + path, data=data, method=method)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                return r.status, r.read().decode(errors="replace"), r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace"), e.headers

    def login(self, token, origin=None):
        headers = {"Content-Type": "application/json"}
        if origin:
            headers["Origin"] = origin
        return self.request("POST", "/ui/login", json.dumps({"token": token}), headers)

    def cookie_of(self, token):
        status, body, headers = self.login(token)
        assert status == 200, (status, body)
        set_cookie = headers["Set-Cookie"]
        return set_cookie.split(";")[0].split("=", 1)[1], json.loads(body)["csrf"], set_cookie

    def with_cookie(self, method, path, cookie, headers=None, body=None):
        h = {"Cookie": "gpupool_session=" + cookie}
        h.update(headers or {})
        return self.request(method, path, body, h)


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pooltest.make_test_dir("gp-dash-")
        cls.sock = os.path.join(cls.dir, "gpupool.sock")
        cls.port = free_port()
        cls.http = Http(cls.port)
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + cls.sock)
        cls.procs = []
        log = open(os.path.join(cls.dir, "server.log"), "ab")
        cls.procs.append(subprocess.Popen(
            [GPUPOOL, "server", "--state-dir", cls.dir, "--port", str(cls.port)],
            stdout=log, stderr=log, start_new_session=True))
        log.close()
        deadline = time.time() + 20
        while cls.cli("whoami", check=False).returncode != 0:
            if time.time() > deadline:
                raise AssertionError("the server did not come up:\n" + cls.log())
            time.sleep(0.05)
        with open(NODE) as f:
            node = json.load(f)
        for name, gpus in (("node-a", 4), ("node-b", 2)):
            n = dict(node, gpus=node["gpus"][:gpus])
            path = os.path.join(cls.dir, name + ".json")
            with open(path, "w") as f:
                json.dump(n, f)
            state = os.path.join(cls.dir, name)
            os.makedirs(state)
            log = open(os.path.join(cls.dir, name + ".log"), "ab")
            cls.procs.append(subprocess.Popen(
                [GPUPOOL, "agent", "--controller", "unix:" + cls.sock, "--state-dir", state,
                 "--fake", path, "--node-name", name],
                stdout=log, stderr=log, start_new_session=True))
            log.close()
        deadline = time.time() + 30
        while sum(n["state"] == "up" for n in cls.json("nodes")["nodes"]) < 2:
            if time.time() > deadline:
                raise AssertionError("the agents did not register:\n" + cls.log())
            time.sleep(0.05)
        cls.user = cls.token("nobody")
        cls.other = cls.token("daemon")
        cls.admin = cls.token("root")
        cls.uid = {"nobody": 65534, "daemon": 1}
        # Jobs: nobody's running share, running whole GPUs, pending (for the whole-GPU
        # job to succeed), finished; daemon's running job that nobody must not see.
        cls.running = cls.submit("nobody", "--gpu-share", "0.5", "--name", "dash-running",
                                 "--project", "vision", "--time", "2h", "--", "sh", "-c",
                                 "echo %s; sleep 600" % LOG_LINE)
        cls.whole = cls.submit("nobody", "--gpus", "2", "--name", "dash-whole",
                               "--project", "nlp", "--", "sleep", "600")
        cls.pending = cls.submit("nobody", "--gpus", "1", "--name", "dash-pending",
                                 "--after-ok", str(cls.whole), "--", "true")
        cls.done = cls.submit("nobody", "--gpus", "1", "--name", "dash-done", "--", "sh",
                              "-c", "echo finished-line; sleep 1")
        cls.secret = cls.submit("daemon", "--gpus", "1", "--name", "daemon-secret", "--",
                                "sleep", "600")
        # A job that fails, with a line on each stream; an array of two short elements.
        cls.failed = cls.submit("nobody", "--name", "dash-failed", "--cpus", "0.1", "--", "sh",
                                "-c", "echo failed-out-line; echo failed-err-line >&2; exit 3")
        cls.array = cls.submit("nobody", "--name", "dash-array", "--array", "0-1", "--cpus",
                               "0.1", "--", "true")
        for jid, states in ((cls.running, ("RUNNING",)), (cls.whole, ("RUNNING",)),
                            (cls.secret, ("RUNNING",)), (cls.done, ("SUCCEEDED",)),
                            (cls.failed, ("FAILED",)), (cls.array, ("SUCCEEDED",)),
                            (cls.job("%d_1" % cls.array)["id"], ("SUCCEEDED",))):
            pooltest.wait_job(cls.job, jid, states, 60, poll=0.1, log=cls.log)
        deadline = time.time() + 20
        while not cls.job(cls.pending).get("pending_reason"):
            if time.time() > deadline:
                raise AssertionError("job %d has no pending reason" % cls.pending)
            time.sleep(0.1)
        # The running job's line is in its log before the browser looks.
        deadline = time.time() + 20
        while LOG_LINE not in cls.cli("logs", str(cls.running), check=False).stdout:
            if time.time() > deadline:
                raise AssertionError("job %d printed nothing:\n%s" % (cls.running, cls.log()))
            time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes(reversed(cls.procs))
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    @classmethod
    def log(cls):
        out = []
        for name in ("server.log", "node-a.log", "node-b.log"):
            try:
                with open(os.path.join(cls.dir, name), errors="replace") as f:
                    out.append("--- %s\n%s" % (name, f.read()[-3000:]))
            except OSError:
                pass
        return "\n".join(out)

    @classmethod
    def cli(cls, *args, check=True, user=None):
        cmd = [GPUPOOL] + list(args)
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % cls.uid[user], "--regid=%d" % cls.uid[user],
                   "--clear-groups"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, env=cls.env, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError("gpupool %s: %s%s\n%s" % (" ".join(args), r.stdout, r.stderr,
                                                           cls.log()))
        return r

    @classmethod
    def json(cls, *args):
        return json.loads(cls.cli(*(list(args) + ["--json"])).stdout)

    @classmethod
    def job(cls, jid):
        return cls.json("show", str(jid))["job"]

    @classmethod
    def token(cls, user, kind="user"):
        return cls.cli("token", "create", "--user", user, "--kind", kind).stdout.strip()

    @classmethod
    def submit(cls, user, *args):
        out = cls.cli("submit", "--workdir", cls.dir, *args, user=user).stdout
        return int(re.search(r"job (\d+)", out).group(1))  # "Submitted [array ]job N ..."

    # ---- the session rules over HTTP ----

    def test_page_and_assets_carry_strict_headers(self):
        for path, ctype in (("/", "text/html"), ("/ui/app.js", "text/javascript"),
                            ("/ui/app.css", "text/css")):
            status, body, headers = self.http.request("GET", path)
            self.assertEqual(status, 200, path)
            self.assertTrue(headers["Content-Type"].startswith(ctype), headers["Content-Type"])
            csp = headers["Content-Security-Policy"]
            self.assertIn("default-src 'self'", csp)
            self.assertIn("frame-ancestors 'none'", csp)
            self.assertNotIn("unsafe-inline", csp)
            self.assertEqual(headers["X-Content-Type-Options"], "nosniff")
            self.assertEqual(headers["X-Frame-Options"], "DENY")
            self.assertEqual(headers["Cache-Control"], "no-cache")

    def test_no_cookie_or_a_bad_one_is_401(self):
        self.assertEqual(self.http.request("GET", "/v1/jobs")[0], 401)
        self.assertEqual(self.http.with_cookie("GET", "/v1/jobs", "0" * 64)[0], 401)
        self.assertEqual(self.http.with_cookie("GET", "/v1/jobs", "x" * 3000)[0], 401)

    def test_cookie_is_httponly_strict_and_holds_no_token(self):
        cookie, _, set_cookie = self.http.cookie_of(self.user)
        self.assertIn("HttpOnly", set_cookie)
        self.assertIn("SameSite=Strict", set_cookie)
        self.assertIn("Path=/", set_cookie)
        self.assertNotIn(self.user, set_cookie)
        status, body, _ = self.http.with_cookie("GET", "/v1/whoami", cookie)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["user"], "nobody")

    def test_a_revoked_tokens_cookie_is_refused(self):
        token = self.token("nobody")
        cookie, _, _ = self.http.cookie_of(token)
        self.assertEqual(self.http.with_cookie("GET", "/v1/jobs", cookie)[0], 200)
        self.cli("token", "revoke", hashlib.sha256(token.encode()).hexdigest()[:12])
        self.assertEqual(self.http.with_cookie("GET", "/v1/jobs", cookie)[0], 401)
        self.assertEqual(self.http.login(token)[0], 401)

    def test_state_changes_need_the_csrf_header_and_this_origin(self):
        cookie, csrf, _ = self.http.cookie_of(self.user)
        path = "/v1/jobs/%d/cancel" % self.whole
        own = "http://" + self.http.host
        for headers in ({}, {"Origin": own}, {"X-Gpupool-CSRF": csrf},
                        {"X-Gpupool-CSRF": csrf, "Origin": "https://evil.example"},
                        {"X-Gpupool-CSRF": "x" * 64, "Origin": own}):
            status, body, _ = self.http.with_cookie("POST", path, cookie, headers, b"")
            self.assertEqual(status, 403, (headers, body))
        status, body, _ = self.http.with_cookie(
            "POST", "/v1/jobs", cookie, {"X-Gpupool-CSRF": csrf, "Origin": own,
                                         "Content-Type": "application/json"},
            json.dumps({"command": ["true"]}))
        self.assertEqual(status, 403, body)
        self.assertEqual(self.job(self.whole)["state"], "RUNNING")

    def test_a_users_cookie_cannot_read_another_users_job(self):
        cookie, _, _ = self.http.cookie_of(self.user)
        for path in ("/v1/jobs/%d" % self.secret, "/v1/jobs/%d/logs" % self.secret):
            status, body, _ = self.http.with_cookie("GET", path, cookie)
            self.assertEqual(status, 403, body)
        status, body, _ = self.http.with_cookie("GET", "/v1/jobs?all=1", cookie)
        self.assertEqual(status, 200)
        self.assertNotIn("daemon-secret", body)
        self.assertEqual(self.http.with_cookie("GET", "/v1/jobs?user=daemon", cookie)[0], 403)
        admin_cookie, _, _ = self.http.cookie_of(self.admin)
        status, body, _ = self.http.with_cookie("GET", "/v1/jobs/%d" % self.secret, admin_cookie)
        self.assertEqual(status, 200, body)

    def test_node_and_metrics_tokens_cannot_sign_in(self):
        for kind, user in (("node", "node-x"), ("metrics", "nobody")):
            status, body, headers = self.http.login(self.token(user, kind))
            self.assertEqual(status, 403, body)
            self.assertIsNone(headers["Set-Cookie"])

    def test_hostile_sign_in_bodies_get_clear_4xx(self):
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        js = {"Content-Type": "application/json"}
        for body, headers, want in (
                ("x" * (2 << 20), js, 413),  # over the server's 1 MiB cap
                ('{"token": "' + "a" * 5000 + '"}', js, 413),  # over the sign-in cap
                ('{"token": ', js, 400), ("[]", js, 400), ('{"token": 1}', js, 400),
                ("token=%zz", form, 400), ("user=x", form, 400),
                ("token=x", {"Content-Type": "text/plain"}, 415),
                ('{"token": "gpt_00"}', js, 401)):
            status, answer, _ = self.http.request("POST", "/ui/login", body, headers)
            self.assertEqual(status, want, (body[:40], answer[:200]))
            self.assertIn("error", json.loads(answer))
        status, _, _ = self.http.login(self.user, origin="https://evil.example")
        self.assertEqual(status, 403)

    # ---- the pages in a real browser ----

    @staticmethod
    def start_browser():
        """A headless Chromium with a profile of its own, and that profile's directory."""
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        os.makedirs(SHOTS, exist_ok=True)
        print("\nscreenshots: %s" % SHOTS, flush=True)
        profile = tempfile.mkdtemp(prefix="gp-dash-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + profile,
                  "--window-size=1400,1000", "--disable-dev-shm-usage", "--no-first-run"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts), profile

    @staticmethod
    def stop_browser(driver, profile, console):
        """Keeps the browser's last console lines in `console`, then closes it and removes
        its profile."""
        try:
            console.extend(driver.get_log("browser"))
        except Exception:  # the browser is gone
            pass
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)

    def browser_helpers(self, driver, console):
        from selenium.webdriver.common.by import By
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait
        # The page redraws its tables every few seconds: a row read while it is replaced
        # is stale, and the wait looks again.
        wait = WebDriverWait(driver, 20, ignored_exceptions=[StaleElementReferenceException])

        def shot(name):
            driver.save_screenshot(os.path.join(SHOTS, name + ".png"))
            console.extend(driver.get_log("browser"))

        def css(selector):
            return driver.find_elements(By.CSS_SELECTOR, selector)

        def sign_in(token):
            driver.get(self.http.base + "/")
            wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
            driver.find_element(By.ID, "login-token").send_keys(token)
            driver.find_element(By.ID, "login-submit").click()
            wait.until(lambda d: d.find_element(By.ID, "nav").is_displayed())

        def queue_rows():
            """The queue table's rows, read at once: [{id, name, state, cols: {col: text}}]."""
            return driver.execute_script("""
                return [...document.querySelectorAll('#queue-table tbody tr')].map(tr => ({
                  id: Number(tr.dataset.jobId), name: tr.dataset.jobName, state: tr.dataset.state,
                  cols: Object.fromEntries([...tr.children].map(td => [td.dataset.col, td.textContent]))}));""")

        def d_css_attr(selector, attr):
            return driver.execute_script(
                "const e = document.querySelector(arguments[0]); return e && e.getAttribute(arguments[1])",
                selector, attr)

        def click_css(selector):
            """Clicks the element now on the page (a redraw may have replaced the last one)."""
            driver.execute_script("document.querySelector(arguments[0]).click()", selector)

        def job_field(name):
            return driver.execute_script(
                "const e = document.querySelector('#job-fields dd[data-field=\"' + arguments[0] + '\"]');"
                "return e ? e.textContent : null", name)

        self.click_css, self.job_field = click_css, job_field
        return wait, shot, css, sign_in, queue_rows, d_css_attr

    def test_the_pages_in_headless_chromium(self):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        driver, profile = self.start_browser()
        console = []
        try:
            base = self.http.base
            wait, shot, css, sign_in, queue_rows, d_css_attr = self.browser_helpers(driver, console)

            # Not signed in: the sign-in form, and the API answers 401 to the browser too.
            driver.get(base + "/")
            wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
            shot("signin")

            sign_in(self.user)
            self.assertEqual(driver.execute_script("return document.cookie"), "",
                             "the session cookie is HttpOnly: scripts cannot read it")
            self.assertIn("nobody", driver.find_element(By.ID, "me").text)

            # Cluster: 6 GPU cells on two nodes; the half-GPU job's cell half full.
            wait.until(lambda d: len(css(".gpu")) == 6)
            nodes = {e.get_attribute("data-node"): e.get_attribute("class") for e in css(".node")}
            self.assertEqual(nodes, {"node-a": "node up", "node-b": "node up"})
            allocated = sorted(int(e.get_attribute("data-allocated-milli")) for e in css(".gpu"))
            self.assertIn(500, allocated)
            self.assertEqual(sum(allocated), 500 + 2000 + 1000, allocated)  # daemon's counts too
            self.assertIn("6 GPUs", driver.find_element(By.ID, "cluster-summary").text)
            half = [e for e in css(".gpu") if e.get_attribute("data-allocated-milli") == "500"][0]
            fill = half.find_element(By.CSS_SELECTOR, ".fill")
            self.assertAlmostEqual(fill.size["height"] / half.size["height"], 0.5, delta=0.06)
            shot("cluster")

            # Queue: by default nobody's active jobs (not the ended ones) with their states,
            # the pending reason, wait and run times; not daemon's. (Rows are read in one
            # script: the page redraws itself every few seconds.)
            driver.get(base + "/#/queue")
            wait.until(lambda d: d.execute_script("return document.body.dataset.queueRendered"))
            rows = {r["id"]: r for r in queue_rows()}
            self.assertEqual(set(rows), {self.running, self.whole, self.pending})
            self.assertEqual(rows[self.pending]["state"], "PENDING")
            reason = rows[self.pending]["cols"]["reason"]
            self.assertTrue(reason, "the pending job shows no reason")
            self.assertEqual(reason, self.job(self.pending)["pending_reason"])
            headers = [th.text.strip(" ▲▼") for th in css("#queue-table thead th")]
            self.assertIn("wait", headers)
            self.assertIn("run time", headers)
            self.assertRegex(rows[self.running]["cols"]["runtime"], r"^\d+(s|m\d\ds|h\d\dm)$")
            self.assertRegex(rows[self.running]["cols"]["wait"], r"^\d+(s|m\d\ds)$")
            self.assertEqual(rows[self.pending]["cols"]["runtime"], "")
            self.assertNotIn("daemon-secret", driver.page_source)
            shot("queue")
            # Every state: the ended jobs too, array elements as ARRAY_INDEX, and no
            # state=all sent (the API knows no such state).
            driver.execute_script("performance.clearResourceTimings()")
            Select(driver.find_element(By.ID, "filter-state")).select_by_value("all")
            wait.until(lambda d: self.done in {r["id"] for r in queue_rows()})
            sent = driver.execute_script(
                "return performance.getEntriesByType('resource').map(e => e.name)"
                ".filter(n => n.includes('/v1/jobs?'))")
            self.assertTrue(sent)
            self.assertFalse([u for u in sent if "state=" in u or "active=" in u], sent)
            self.assertFalse(css("#queue-error"))
            names = {r["name"]: r for r in queue_rows()}
            for i in (0, 1):
                element = names.get("%d_%d" % (self.array, i))
                self.assertIsNotNone(element, sorted(names))
                self.assertEqual(element["state"], "SUCCEEDED")
                self.assertEqual(element["cols"]["id"], "%d_%d" % (self.array, i))
                # Its link opens the job page by ARRAY_INDEX, not by its store id.
                self.assertTrue(css('#queue-table a[href="#/jobs/%d_%d"]' % (self.array, i)))
            self.assertEqual(names[str(self.failed)]["state"], "FAILED")
            # Sorting by a header: ids newest first, then oldest first; run time.
            ids = lambda: [r["id"] for r in queue_rows()]
            sorted_by = lambda key: d_css_attr('#queue-table th[data-sort="%s"]' % key, "aria-sort")
            self.click_css('#queue-table th[data-sort="id"] button')
            wait.until(lambda d: sorted_by("id") == "descending")
            self.assertIn("sort=id", driver.current_url)
            self.assertEqual(ids(), sorted(ids(), reverse=True))
            self.click_css('#queue-table th[data-sort="id"] button')
            wait.until(lambda d: sorted_by("id") == "ascending")
            self.assertEqual(ids(), sorted(ids()))
            self.click_css('#queue-table th[data-sort="runtime"] button')
            wait.until(lambda d: sorted_by("runtime") == "descending")
            by_runtime = ids()
            # The two 600-second sleepers have run longest; the job never started is last.
            self.assertEqual(set(by_runtime[:2]), {self.running, self.whole}, by_runtime)
            self.assertEqual(by_runtime[-1], self.pending, by_runtime)
            # The server sorts (the whole queue, not the page): the page asked for the order.
            sent = driver.execute_script(
                "return performance.getEntriesByType('resource').map(e => e.name)"
                ".filter(n => n.includes('/v1/jobs?'))")
            self.assertTrue([u for u in sent if "sort=runtime" in u and "order=desc" in u], sent)
            self.assertTrue([u for u in sent if "sort=id" in u and "order=asc" in u], sent)
            shot("queue-all-sorted")
            # Filtered by state.
            driver.get(base + "/#/queue?state=PENDING")
            wait.until(lambda d: [r.get_attribute("data-job-id") for r in
                                  css("#queue-table tbody tr")] == [str(self.pending)])

            # A job page: what `gpupool show` says (the command quoted as a shell needs it,
            # the workdir, time limit, elapsed time, attempts), placement, the line its job
            # printed.
            driver.get(base + "/#/jobs/%d" % self.running)
            wait.until(lambda d: LOG_LINE in d.find_element(By.ID, "job-log").text)
            self.assertEqual(self.job_field("name"), "dash-running")
            shown = self.cli("show", str(self.running)).stdout
            command = re.search(r"^  Command: +(.*)$", shown, re.M).group(1)
            self.assertEqual(command, "sh -c 'echo %s; sleep 600'" % LOG_LINE)
            self.assertEqual(self.job_field("command"), command)
            self.assertEqual(self.job_field("workdir"), self.dir)
            self.assertEqual(self.job_field("time_limit"), "2h00m")
            self.assertEqual(self.job_field("attempt"), "1")
            self.assertRegex(self.job_field("elapsed"), r"^\d+(s|m\d\ds)$")
            self.assertIn("uid 65534", self.job_field("user"))
            self.assertIn("1 CPU", self.job_field("request"))
            self.assertEqual(self.job_field("preemptible"), "no")
            style = driver.execute_script(
                "const s = getComputedStyle(document.querySelector('#job-fields dd'));"
                "return [s.wordBreak, s.overflowWrap]")
            self.assertEqual(style, ["normal", "anywhere"])
            placement = driver.find_element(By.ID, "job-placement").text
            self.assertTrue("node-a" in placement or "node-b" in placement, placement)
            wait.until(lambda d: css("#job-telemetry .no-telemetry, #job-telemetry .too-short, "
                                     "#job-telemetry svg"))
            self.assertEqual(driver.execute_script("return document.getElementById('log-stream').value"),
                             "stdout")
            shot("job")
            # A failed job opens on stderr, where its error is.
            driver.get(base + "/#/jobs/%d" % self.failed)
            wait.until(lambda d: "failed-err-line" in d.find_element(By.ID, "job-log").text)
            self.assertEqual(driver.execute_script("return document.getElementById('log-stream').value"),
                             "stderr")
            self.assertEqual(self.job_field("exit_code"), "3")
            shot("job-failed")
            # A pending job: not started, whatever the nodes report.
            driver.get(base + "/#/jobs/%d" % self.pending)
            wait.until(lambda d: css("#job-telemetry .not-started"))
            self.assertIn("has not started", css("#job-telemetry")[0].text)
            # An array element by its ARRAY_INDEX id.
            driver.get(base + "/#/jobs/%d_1" % self.array)
            wait.until(lambda d: self.job_field("id") and self.job_field("id").startswith("%d_1" % self.array))
            self.assertIn("element 1 of array %d" % self.array, self.job_field("array"))
            # Its GPU utilisation asked for by ARRAY_INDEX too (GET /v1/telemetry?job=).
            wait.until(lambda d: css("#job-telemetry"))
            asked = driver.execute_script(
                "return performance.getEntriesByType('resource').map(e => e.name)"
                ".filter(n => n.includes('/v1/telemetry?job='))")
            self.assertTrue([u for u in asked if u.endswith("job=%d_1" % self.array)], asked)
            # Another user's job: the API's refusal, not the job.
            driver.get(base + "/#/jobs/%d" % self.secret)
            wait.until(lambda d: css("#job-error"))
            self.assertNotIn("daemon-secret", driver.page_source)

            # Usage: bar plots by user and project drawn as SVG.
            driver.get(base + "/#/usage")
            wait.until(lambda d: css("#usage-by-user rect"))
            self.assertTrue(css("#usage-by-project rect"))
            self.assertTrue(css("#usage-per-day rect"))
            labels = [t.text for t in css("#usage-by-project text")]
            self.assertTrue(any("vision" in t for t in labels), labels)
            wait.until(lambda d: css("#pool-telemetry .no-telemetry, #pool-telemetry .too-short, "
                                     "#pool-telemetry svg"))
            # Tables headed by what they count, not "key".
            self.assertEqual(css("#usage-user-table th")[0].text, "user")
            self.assertEqual(css("#usage-project-table th")[0].text, "project")
            self.assertNotIn("key", [th.text for th in css("#usage-user-table th")])
            # The pool's fair-share groups (users here) with their weight and normalised share
            # (weight / the sum of the weights of the groups with GPU-hours): every user
            # weighs 1. Projects are not this pool's groups: no such column.
            self.assertEqual(css("#usage-user-table th")[-1].text, "fair share")
            shares = [tr.find_elements(By.TAG_NAME, "td")[-1].text
                      for tr in css("#usage-user-table tbody tr")]
            self.assertTrue(shares, shares)
            for share in shares:
                self.assertRegex(share, r"^1 \(\d+\.\d%\)$")
            self.assertNotIn("fair share", [th.text for th in css("#usage-project-table th")])
            # nobody's jobs without a project: their own group, named after them and marked
            # so (as limits and fair share by project count them), not a "(none)" row.
            groups = [tr.find_elements(By.TAG_NAME, "td")[0].text
                      for tr in css("#usage-project-table tbody tr")]
            self.assertIn("nobody (user's own)", groups)
            self.assertNotIn("(none)", groups)
            shot("usage")
            # The time-range picker: the last 7 days asks the usage API for them.
            window = lambda: [int(driver.execute_script(
                "return document.getElementById('usage-window').dataset." + k)) for k in ("sinceUs", "untilUs")]
            self.assertAlmostEqual((window()[1] - window()[0]) / 86400e6, 30, delta=0.01)  # the default
            driver.execute_script("performance.clearResourceTimings()")
            Select(driver.find_element(By.ID, "usage-range")).select_by_value("7d")
            wait.until(lambda d: "range=7d" in d.current_url and
                       abs((window()[1] - window()[0]) / 86400e6 - 7) < 0.01)
            since_us, until_us = window()
            sent = driver.execute_script(
                "return performance.getEntriesByType('resource').map(e => e.name)"
                ".filter(n => n.includes('/v1/usage?by=project'))")
            self.assertTrue(sent)
            self.assertIn("since_us=%d&until_us=%d" % (since_us, until_us), sent[-1])
            self.assertAlmostEqual(until_us / 1e6, time.time(), delta=60)
            wait.until(lambda d: css("#usage-by-user rect"))
            # Custom dates: from the day before yesterday to today (whole days, local time).
            today = time.strftime("%Y-%m-%d")
            before = time.strftime("%Y-%m-%d", time.localtime(time.time() - 2 * 86400))
            driver.get(base + "/#/usage?range=custom&since=%s&until=%s" % (before, today))
            wait.until(lambda d: css("#usage-since") and
                       d.find_element(By.ID, "usage-since").get_attribute("value") == before)
            wait.until(lambda d: css("#usage-window") and
                       time.strftime("%Y-%m-%d", time.localtime(window()[0] / 1e6)) == before)
            wait.until(lambda d: css("#usage-by-user rect"))
            shot("usage-custom")

            # Sign out: back to the form; the old session is dead.
            driver.find_element(By.ID, "logout").click()
            wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())

            # An admin sees daemon's job.
            sign_in(self.admin)
            driver.get(base + "/#/queue")
            wait.until(lambda d: d.execute_script("return document.body.dataset.queueRendered"))
            wait.until(lambda d: "daemon-secret" in d.page_source)
            ids = {int(r.get_attribute("data-job-id")) for r in css("#queue-table tbody tr")}
            self.assertIn(self.secret, ids)
            shot("queue-admin")
            driver.get(base + "/#/jobs/%d" % self.secret)
            wait.until(lambda d: css("#job-fields"))
            self.assertIn("daemon-secret", driver.find_element(By.ID, "job-fields").text)
            shot("job-admin")
        finally:
            self.stop_browser(driver, profile, console)
        # No console errors: a CSP violation, a script error, a failed request. The failed
        # requests allowed: GET /v1/telemetry's 404 on a controller without telemetry,
        # which the pages handle ("no telemetry yet"), and the 403 for daemon's job that
        # the user's browser asked for on purpose.
        forbidden = "/v1/jobs/%d - " % self.secret
        errors = [e["message"] for e in console if e["level"] == "SEVERE"
                  and not ("/v1/telemetry" in e["message"] and "404" in e["message"])
                  and not (forbidden in e["message"] and "403" in e["message"])]
        self.assertEqual(errors, [], "console errors in the browser:\n" + "\n".join(errors))
        self.assertFalse([e for e in console if "Content Security Policy" in e["message"]])


    def test_views_refresh_live_pause_when_hidden_and_fit_a_phone(self):
        from selenium.webdriver.common.by import By
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        driver, profile = self.start_browser()
        console = []
        try:
            base = self.http.base
            wait, shot, css, sign_in, queue_rows, d_css_attr = self.browser_helpers(driver, console)
            sign_in(self.user)
            driver.get(base + "/#/queue?state=all")
            wait.until(lambda d: d.execute_script("return document.body.dataset.queueRendered"))
            # The cluster view names who holds each GPU: nobody's jobs by id and user,
            # daemon's job only as another user's.
            driver.get(base + "/#/cluster")
            wait.until(lambda d: len(css(".gpu")) == 6)
            holders = sorted(driver.execute_script(
                "return [...document.querySelectorAll('.gpu')].flatMap(e => "
                "(e.dataset.holders || '').split(' ').filter(Boolean))"))
            self.assertEqual(holders, sorted(["%d:nobody:500" % self.running,
                                              "%d:nobody:1000" % self.whole,
                                              "%d:nobody:1000" % self.whole, "other:1000"]))
            half = [e for e in css(".gpu") if e.get_attribute("data-allocated-milli") == "500"][0]
            self.assertIn("%d nobody" % self.running, half.text)
            self.assertIn("job %d of nobody: 0.50" % self.running, half.get_attribute("title"))
            self.assertEqual(len([e for e in css(".gpu .holder.other")]), 1)
            self.assertFalse(css('.gpu a[href="#/jobs/%d"]' % self.secret))
            self.assertNotIn("daemon", "".join(e.text + e.get_attribute("title") for e in css(".gpu")))

            # Live: a job submitted after the page loaded shows up, and so do its state
            # changes, without a reload of the page.
            driver.get(base + "/#/queue?state=all")
            wait.until(lambda d: d.execute_script("return document.body.dataset.queueRendered"))
            driver.execute_script("window.notReloaded = true")
            self.assertRegex(driver.find_element(By.ID, "live").text, r"^live")
            held = self.submit("nobody", "--hold", "--cpus", "0.1", "--name", "dash-live", "--",
                               "sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick-$i; sleep 1; done")
            slow = WebDriverWait(driver, 30, ignored_exceptions=[StaleElementReferenceException])
            row = lambda: {r["id"]: r for r in queue_rows()}.get(held)
            slow.until(lambda d: row() is not None)
            self.assertEqual(row()["state"], "PENDING")
            self.assertIn("held by nobody", row()["cols"]["reason"])
            self.cli("release", str(held), user="nobody")
            slow.until(lambda d: row()["state"] in ("RUNNING", "SUCCEEDED"))
            self.assertTrue(driver.execute_script("return window.notReloaded === true"),
                            "the page was reloaded")
            self.assertRegex(driver.find_element(By.ID, "live").text, r"updated \d+s ago")
            # Its page follows its log as it grows, reading on from where it was (offset).
            driver.get(base + "/#/jobs/%d" % held)
            driver.execute_script("window.notReloaded = true")
            slow.until(lambda d: "tick-10" in d.find_element(By.ID, "job-log").text)
            self.assertEqual(driver.find_element(By.ID, "job-log").text.split(),
                             ["tick-%d" % i for i in range(1, 11)])
            offsets = driver.execute_script(
                "return performance.getEntriesByType('resource').map(e => e.name)"
                ".filter(n => n.includes('/logs?')).map(n => Number(new URL(n).searchParams.get('offset')))")
            self.assertTrue([o for o in offsets if o > 0], offsets)
            wait.until(lambda d: self.job_field("state") == "SUCCEEDED")
            self.assertTrue(driver.execute_script("return window.notReloaded === true"))
            driver.get(base + "/#/queue?state=all")
            wait.until(lambda d: row() is not None and row()["state"] == "SUCCEEDED")

            # A hidden tab asks nothing and says it is paused; shown again, it refreshes.
            driver.execute_script("""
                Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});
                document.dispatchEvent(new Event('visibilitychange'));
                performance.setResourceTimingBufferSize(10000);""")
            self.assertEqual(d_css_attr("#live", "data-state"), "paused")
            self.assertIn("paused", driver.find_element(By.ID, "live").text)
            time.sleep(1)  # a redraw begun before may still finish
            driver.execute_script("performance.clearResourceTimings()")
            time.sleep(6)  # past one refresh period (5 s): nothing may be asked meanwhile
            asked = driver.execute_script(
                "return performance.getEntriesByType('resource').filter(e => e.name.includes('/v1/')).length")
            self.assertEqual(asked, 0)
            driver.execute_script("""
                Object.defineProperty(document, 'visibilityState', {value: 'visible', configurable: true});
                document.dispatchEvent(new Event('visibilitychange'));""")
            wait.until(lambda d: d.execute_script(
                "return performance.getEntriesByType('resource').filter(e => e.name.includes('/v1/jobs?')).length") > 0)
            wait.until(lambda d: d_css_attr("#live", "data-state") == "live")
            shot("queue-live")

            # Phone width: no view scrolls sideways (a wide table scrolls in its own box).
            driver.set_window_size(420, 900)
            width = driver.execute_script("return window.innerWidth")
            self.assertLessEqual(width, 420)
            fits = "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            for name, path, ready in (
                    ("cluster", "/#/cluster", ".gpu"),
                    ("queue", "/#/queue?state=all", "#queue-table tbody tr"),
                    ("job", "/#/jobs/%d" % self.running, "#job-fields"),
                    ("job-failed", "/#/jobs/%d" % self.failed, "#job-fields"),
                    ("usage", "/#/usage", "#usage-by-user rect")):
                driver.get(base + path)
                wait.until(lambda d: css(ready))
                scroll, client = driver.execute_script(fits)
                self.assertLessEqual(scroll, client, "%s scrolls sideways at %d px" % (name, width))
                shot("phone-" + name)
            # At that width the job's command wraps between words, never inside one (as
            # word-break: break-all did).
            driver.get(base + "/#/jobs/%d" % self.running)
            wait.until(lambda d: self.job_field("command"))
            lines = driver.execute_script("""
                const dd = document.querySelector('#job-fields dd[data-field="command"]');
                const text = dd.firstChild;
                const out = [];
                // Words between spaces and hyphens (a line may end after a hyphen).
                for (const m of text.data.matchAll(/[^ -]+/g)) {
                  const r = document.createRange();
                  r.setStart(text, m.index); r.setEnd(text, m.index + m[0].length);
                  out.push([m[0], new Set([...r.getClientRects()].map(x => Math.round(x.top))).size]);
                }
                return [out, dd.getClientRects()[0].height, parseFloat(getComputedStyle(dd).lineHeight)];""")
            words, height, line = lines
            self.assertGreater(height, 1.5 * line, "the command did not wrap at 420 px: %r" % (lines,))
            self.assertEqual([w for w, n in words if n != 1], [], words)
        finally:
            self.stop_browser(driver, profile, console)
        errors = [e["message"] for e in console if e["level"] == "SEVERE"
                  and not ("/v1/telemetry" in e["message"] and "404" in e["message"])]
        self.assertEqual(errors, [], "console errors in the browser:\n" + "\n".join(errors))

    def test_cancel_on_an_array_element_cancels_that_element_alone(self):
        """Regression: Cancel on element 0 of a running array cancelled the whole array, as
        element 0's store id is the array's own (POST /v1/jobs/ARRAY/cancel); the page
        cancels by ARRAY_INDEX."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions
        from selenium.common.exceptions import StaleElementReferenceException

        array = self.submit("nobody", "--name", "dash-cancel", "--array", "0-2", "--cpus", "0.1",
                            "--", "sh", "-c", "echo element-$GPUPOOL_ARRAY_TASK_ID; sleep 600")
        name = lambda i: "%d_%d" % (array, i)
        ids = [self.job(name(i))["id"] for i in range(3)]  # store ids; ids[0] is the array's
        element = lambda i: self.job(ids[i])
        for i in range(3):
            pooltest.wait_job(self.job, ids[i], ("RUNNING",), 60, poll=0.1, log=self.log)
        driver, profile = self.start_browser()
        console = []
        try:
            wait, shot, css, sign_in, queue_rows, _ = self.browser_helpers(driver, console)

            def click_now(selector):
                """A real click on the element now on the page (a redraw may replace it)."""
                try:
                    driver.find_element(By.CSS_SELECTOR, selector).click()
                    return True
                except StaleElementReferenceException:
                    return False

            def cancel_from_its_page(i):
                """As a user: the queue's link to element i, its page, Cancel, OK."""
                driver.get(self.http.base + "/#/queue")
                link = '#queue-table a[href="#/jobs/%s"]' % name(i)
                wait.until(lambda d: css(link) and click_now(link))
                # Element 0's store id is the array's, so the page does not offer it.
                shown = name(i) if i == 0 else "%s (job %d)" % (name(i), ids[i])
                wait.until(lambda d: self.job_field("id") == shown)
                # Its own log (element 0's store id is the array's: not the array's log).
                wait.until(lambda d: "element-%d" % i in d.find_element(By.ID, "job-log").text)
                wait.until(lambda d: css("#job-cancel") and click_now("#job-cancel"))
                confirm = wait.until(expected_conditions.alert_is_present())
                self.assertEqual(confirm.text, "Cancel job %s?" % name(i))
                confirm.accept()
                pooltest.wait_job(self.job, ids[i], ("CANCELLED",), 30, poll=0.1, log=self.log)

            sign_in(self.user)
            cancel_from_its_page(0)
            # The cancel of element 0 was answered before it ended: a whole-array cancel
            # would have marked the others by now.
            for i in (1, 2):
                j = element(i)
                self.assertEqual((j["state"], j.get("cancel_requested", False)),
                                 ("RUNNING", False), name(i))
            shot("job-array-element-cancelled")
            cancel_from_its_page(1)
            j = element(2)
            self.assertEqual((j["state"], j.get("cancel_requested", False)), ("RUNNING", False))
        finally:
            self.stop_browser(driver, profile, console)
            # The other tests see no active job of this array.
            self.cli("cancel", str(array), check=False)
            for jid in ids:
                pooltest.wait_job(self.job, jid, ("CANCELLED",), 30, poll=0.1, log=self.log)
        errors = [e["message"] for e in console if e["level"] == "SEVERE"
                  and not ("/v1/telemetry" in e["message"] and "404" in e["message"])]
        self.assertEqual(errors, [], "console errors in the browser:\n" + "\n".join(errors))

    # The telemetry contract of issue 17 (GET /v1/nodes' gpus[].telemetry, a job's
    # gpu_util, GET /v1/telemetry's points, usage rows' used_gpu_hours and efficiency),
    # which this controller does not serve yet: a script the browser runs before the
    # page's own (through DevTools, not subject to the CSP) adds them to the API's real
    # answers, and the pages must draw them.
    TELEMETRY_SHIM = """
(() => {
  const real = window.fetch.bind(window);
  const json = (o) => new Response(JSON.stringify(o),
      {status: 200, headers: {'Content-Type': 'application/json'}});
  window.fetch = async (url, opts) => {
    const u = String(url);
    if (u === '/v1/telemetry?job=ONE_SAMPLE_JOB') {  // a job shorter than a sample step
      return json({job: ONE_SAMPLE_JOB, step_s: 60, points: [{t_ms: Date.now() - 60000, util_pct: 42, mem_used_mib: 1000, gpus: 1}]});
    }
    if (u.startsWith('/v1/telemetry')) {
      const now = Date.now();
      return json({points: Array.from({length: 30}, (_, i) => ({
        t_ms: now - (30 - i) * 60000, util_pct: 40 + i, mem_used_mib: 1000 + i, gpus: 6}))});
    }
    const r = await real(url, opts);
    const extend = r.status === 200 && !u.includes('/logs') &&
        (u.startsWith('/v1/nodes') || u.startsWith('/v1/jobs/') || u.startsWith('/v1/usage'));
    if (!extend) return r;
    const body = await r.json();
    if (body.nodes) body.nodes.forEach((n) => n.gpus.forEach((g, i) => {
      g.telemetry = {at_ms: Date.now(), util_pct: 25 * i + 5, mem_used_mib: 2048,
                     mem_total_mib: 40960, power_w: 250, temp_c: 60, xid_errors: 0};
      // GET /v1/nodes' health object of a GPU the Xid policy cordoned (docs/health.md).
      if (n.name === 'node-a') g.enforcement = 'mps';  // docs/sharing.md's modes
      if (n.name === 'node-b') g.enforcement = 'none';
      if (n.name === 'node-b' && i === 1) {
        g.health = {state: 'cordoned', reason: 'Xid 95: uncontained ECC error',
                    evidence: 'Xid 95 x1', since_us: Date.now() * 1000, by: 'policy'};
        Object.assign(g.telemetry, {retired_pages: 4, remapped_rows: 0, hw_slowdown: true,
                                    remapped_rows_failed: false});
      }
    }));
    if (body.job) body.job.gpu_util = {mean_pct: 61.5, peak_pct: 97, peak_mem_mib: 30000,
                                       idle: false, idle_since_ms: 0};
    // The running job as an array's element (97_3, store id 98) preempts it: named so.
    if (body.job && body.job.id === RUNNING_JOB) {
      Object.assign(body.job, {preempted_by: 98, preempted_by_name: '97_3',
                               preempt_deadline_s: Math.floor(Date.now() / 1000) + 60});
      // Its earlier attempts as GET /v1/jobs/ID gives them (docs/preemption.md); a
      // reason is the node's or a preemptor's words, shown as text.
      const at = (Date.now() - 7200 * 1000) * 1000;
      body.job.earlier_attempts = [
        {attempt: 1, ended_by: 'preempted', start_time_us: at, end_time_us: at + 1800e6,
         gpu_hours: 1.5, reason: 'preempted by job 12 of bob <img src=x onerror="window.pwned=1">'},
        {attempt: 2, merged: 3, ended_by: 'gpu_failed', start_time_us: at + 3600e6,
         end_time_us: at + 3660e6, gpu_hours: 0.25, reason: 'Xid 79'}];
    }
    if (body.rows) body.rows.forEach((row) => {
      row.used_gpu_hours = row.gpu_hours / 2; row.efficiency = 0.5;
    });
    return json(body);
  };
})();
"""

    def test_telemetry_is_drawn_when_the_api_has_it(self):
        from selenium.webdriver.common.by import By

        driver, profile = self.start_browser()
        console = []
        try:
            base = self.http.base
            wait, shot, css, sign_in, queue_rows, d_css_attr = self.browser_helpers(driver, console)
            driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {
                "source": self.TELEMETRY_SHIM.replace("ONE_SAMPLE_JOB", str(self.done))
                .replace("RUNNING_JOB", str(self.running))})
            sign_in(self.user)
            wait.until(lambda d: len(css(".gpu")) == 6)
            self.assertEqual(len(css(".gpu .util")), 6)
            utils = sorted(float(e.get_attribute("data-util-pct")) for e in css(".gpu"))
            self.assertEqual(utils, [5, 5, 30, 30, 55, 80])
            self.assertTrue(any("util 80%" in e.text for e in css(".gpu")))
            # Each GPU's health state and reason (issue 29): the cordoned one stands out.
            bad = css(".gpu.health-cordoned")
            self.assertEqual(len(bad), 1)
            self.assertEqual(bad[0].get_attribute("data-node"), "node-b")
            self.assertEqual(bad[0].get_attribute("data-index"), "1")
            self.assertIn("cordoned", bad[0].text)
            self.assertIn("Xid 95: uncontained ECC error", bad[0].get_attribute("title"))
            # Its hardware readings, only what is not all-clear.
            self.assertIn("hardware: 4 retired pages, the hardware slows its clocks",
                          bad[0].get_attribute("title"))
            self.assertEqual(sum("hardware:" in e.get_attribute("title") for e in css(".gpu")), 1)
            self.assertEqual(
                sorted(e.get_attribute("data-health") for e in css(".gpu")),
                ["cordoned"] + ["healthy"] * 5)
            # Each GPU's share enforcement (issue 28 item 4): in its data and tooltip, and
            # per node in words.
            self.assertEqual(sorted(set((e.get_attribute("data-node"), e.get_attribute(
                "data-enforcement")) for e in css(".gpu"))), [("node-a", "mps"), ("node-b", "none")])
            self.assertIn("share enforcement: mps", css('.gpu[data-node="node-a"]')[0].get_attribute("title"))
            self.assertEqual(css('.node[data-node="node-a"] .enforcement')[0].text,
                             "GPU shares: enforced by mps")
            self.assertEqual(css('.node[data-node="node-b"] .enforcement')[0].text,
                             "GPU shares: not enforced (none)")
            listed = css('.node[data-node="node-b"] .health-list')
            self.assertEqual(len(listed), 1)
            self.assertIn("GPU 1 cordoned: Xid 95: uncontained ECC error", listed[0].text)
            shot("cluster-telemetry")

            driver.get(base + "/#/jobs/%d" % self.running)
            wait.until(lambda d: css("#job-telemetry-chart path"))
            gpu_util = driver.find_element(By.ID, "job-gpu-util").text
            self.assertIn("61.5%", gpu_util)
            self.assertIn("30000 MiB", gpu_util)
            # Its preemptor as its user names it, not by its store id.
            preempted = css('#job-fields dd[data-field="preempted_by"]')
            self.assertEqual(len(preempted), 1)
            self.assertTrue(preempted[0].text.startswith("job 97_3; SIGKILL at "), preempted[0].text)
            # Its earlier attempts, oldest first, as `show` lists them; a reason is text.
            rows = [[td.text for td in tr.find_elements(By.CSS_SELECTOR, "td")]
                    for tr in css("#job-attempts tbody tr")]
            self.assertEqual([r[0] for r in rows], ["1", "2-4"])
            self.assertEqual([r[2] for r in rows], ["30m00s", "1m00s"])
            self.assertEqual([r[3] for r in rows], ["1.500", "0.250"])
            self.assertEqual([r[4] for r in rows], ["preempted", "its GPU failed"])
            self.assertIn('<img src=x onerror="window.pwned=1">', rows[0][5])
            self.assertFalse(css("#job-attempts img"))
            self.assertIsNone(driver.execute_script("return window.pwned"))
            shot("job-telemetry")

            # One sample: too short to plot, said so (not an empty plot).
            driver.get(base + "/#/jobs/%d" % self.done)
            wait.until(lambda d: css("#job-telemetry .too-short"))
            self.assertIn("Too short to plot", css("#job-telemetry")[0].text)
            self.assertFalse(css("#job-telemetry svg"))
            # Pending while the nodes report: the job has not started (not "no telemetry").
            driver.get(base + "/#/jobs/%d" % self.pending)
            wait.until(lambda d: css("#job-telemetry .not-started"))
            self.assertIn("has not started", css("#job-telemetry")[0].text)
            self.assertNotIn("No telemetry", css("#job-telemetry")[0].text)
            shot("job-pending-telemetry")

            driver.get(base + "/#/usage")
            wait.until(lambda d: css("#pool-telemetry-chart path"))
            self.assertTrue(css("#usage-by-user .bar2"))
            self.assertIn("50%", driver.find_element(By.ID, "usage-user-table").text)
            shot("usage-telemetry")
        finally:
            self.stop_browser(driver, profile, console)
        errors = [e["message"] for e in console if e["level"] == "SEVERE"]
        self.assertEqual(errors, [], "console errors in the browser:\n" + "\n".join(errors))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (jobs run as their users)")
        sys.exit(77)
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    import importlib.util
    if importlib.util.find_spec("selenium") is None:
        missing.append("python3-selenium")
    if missing:
        print("skipped: %s not found: install Debian's chromium, chromium-driver and "
              "python3-selenium (scripts/install-deps.sh)" % ", ".join(missing))
        sys.exit(77)
    result = unittest.TextTestRunner(verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(DashboardTest))
    sys.exit(0 if result.wasSuccessful() else 1)
