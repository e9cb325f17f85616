#!/usr/bin/env python3
"""GET /metrics scraped by a real Prometheus (Debian's `prometheus`): a `gpupool up` on a
fake 4-GPU node with a running and a failed job, a metrics token
(`gpupool token create --kind metrics`), `promtool check metrics` on what it serves, and
PromQL queries through Prometheus's HTTP API that must return the pool's numbers.

The fake node carries a telemetry profile (docs/node-schema.md) with scripted GPU figures
and the agent samples every second (issue 17): `gpupool show`, `gpupool usage` and the
dcgm-exporter series (DCGM_FI_DEV_*) must report them.

Usage: prometheus_test.py PATH_TO_GPUPOOL   (ctest passes the built binary)
Exit 77 (skipped) without root or without prometheus/promtool; the message says which.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testlib"))
import pooltest  # noqa: E402  (tests/testlib)
NODE = os.path.join(HERE, "..", "integration", "node-4gpu.json")
UTIL = 77
MEM_MIB = 1234


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_get(url, token=None, timeout=10):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("Content-Type", "")


class PrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pooltest.make_test_dir("gp-prom-")
        cls.port = free_port()
        cls.env = dict(os.environ, GPUPOOL_SERVER="unix:" + os.path.join(cls.dir, "gpupool.sock"))
        # Every GPU at a scripted 77% with 1234 MiB used of 40960, 250.5 W, 61 C, its last
        # Xid 63 (one so far: a page retirement, which the health policy ignores, so that
        # the job goes on) and 2 uncorrected ECC errors.
        with open(NODE) as f:
            node = json.load(f)
        node["telemetry"] = {"step_s": 1, "gpus": {
            str(g["index"]): {"util_pct": [UTIL], "mem_used_mib": [MEM_MIB], "power_w": [250.5],
                              "temp_c": [61], "xid_errors": [63], "xid_count": [1],
                              "ecc_uncorrected": [2]} for g in node["gpus"]}}
        node_file = os.path.join(cls.dir, "node.json")
        with open(node_file, "w") as f:
            json.dump(node, f)
        log = open(os.path.join(cls.dir, "server.log"), "ab")
        cls.pool = subprocess.Popen([GPUPOOL, "up", "--state-dir", cls.dir, "--port",
                                     str(cls.port), "--fake", node_file,
                                     "--telemetry-interval", "1"],
                                    stdout=log, stderr=log, start_new_session=True)
        cls.prom = None
        deadline = time.time() + 30
        while " up " not in cls.cli("nodes").stdout:
            if time.time() > deadline:
                raise AssertionError("the pool did not come up")
            time.sleep(0.1)
        r = cls.cli("token", "create", "--user", "prometheus", "--kind", "metrics")
        assert r.returncode == 0, r.stderr
        cls.token = r.stdout.strip()
        r = cls.cli("token", "create", "--user", "nobody")
        assert r.returncode == 0, r.stderr
        cls.user_token = r.stdout.strip()
        r = cls.cli("token", "create", "--user", "root")
        assert r.returncode == 0, r.stderr
        cls.admin_token = r.stdout.strip()
        cls.running = int(cls.cli("submit", "--gpus", "1", "--", "sleep", "300").stdout.split()[-1])
        cls.failed = int(cls.cli("submit", "--", "false").stdout.split()[-1])
        for jid, state in ((cls.running, "RUNNING"), (cls.failed, "FAILED")):
            pooltest.wait_job(cls.job, jid, (state,), 30)
        # Two samples of the running job's GPU: its figures and a used GPU time.
        deadline = time.time() + 30
        while cls.job(cls.running).get("gpu_util", {}).get("used_gpu_hours", 0) <= 0:
            if time.time() > deadline:
                raise AssertionError("no GPU telemetry for job %d: %s"
                                     % (cls.running, cls.job(cls.running)))
            time.sleep(0.2)

    @classmethod
    def cli(cls, *args):
        return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True,
                              env=cls.env, timeout=60, cwd=cls.dir)

    @classmethod
    def job(cls, jid):
        j = json.loads(cls.cli("show", str(jid), "--json").stdout)
        return j.get("job", j)

    @classmethod
    def tearDownClass(cls):
        pooltest.stop_processes([cls.prom, cls.pool])
        pooltest.kill_leftovers(cls.dir)
        pooltest.remove_dir(cls.dir)

    def test_metrics_pass_promtool_and_need_a_metrics_token(self):
        url = "http://127.0.0.1:%d/metrics" % self.port
        status, body, ctype = http_get(url, self.token)
        self.assertEqual(status, 200, body)
        self.assertTrue(ctype.startswith("text/plain"), ctype)
        check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                               text=True)
        # promtool's only complaints may be its style lints about dcgm-exporter's own label
        # names (modelName, UUID, Hostname) and its counter DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
        # (upper-case _TOTAL), kept as dcgm-exporter has them so that its dashboards work;
        # a parse error or any other problem fails.
        lints = (r"DCGM_FI_DEV_[A-Z_]+ label names should be written in 'snake_case' "
                 r"not 'camelCase'",
                 r'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter metrics should have "_total" suffix')
        problems = [line for line in (check.stdout + check.stderr).splitlines()
                    if line.strip() and not any(re.fullmatch(lint, line.strip())
                                                for lint in lints)]
        self.assertEqual(problems, [], check.stdout + check.stderr)
        self.assertIn("DCGM_FI_DEV_GPU_UTIL{", body)
        gpupool_only = "".join(line + "\n" for line in body.splitlines()
                               if "DCGM_FI_DEV_" not in line)
        check = subprocess.run(["promtool", "check", "metrics"], input=gpupool_only,
                               capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertIn('gpupool_jobs{state="RUNNING"} 1\n', body)
        self.assertIn("gpupool_gpus 4\n", body)
        self.assertEqual(http_get(url)[0], 401)
        status, body, _ = http_get(url, self.user_token)
        self.assertEqual(status, 403)
        self.assertIn("metrics tokens and admins", body)

    def test_show_nodes_and_usage_report_the_scripted_telemetry(self):
        util = self.job(self.running)["gpu_util"]
        self.assertEqual(util["mean_pct"], UTIL)
        self.assertEqual(util["peak_pct"], UTIL)
        self.assertEqual(util["peak_mem_mib"], MEM_MIB)
        self.assertFalse(util["idle"])
        shown = self.cli("show", str(self.running)).stdout
        self.assertIn("GPU util:   mean 77%, peak 77%, peak memory 1.2 GiB", shown)
        nodes = json.loads(self.cli("nodes", "--json").stdout)["nodes"]
        t = nodes[0]["gpus"][0]["telemetry"]
        self.assertEqual((t["util_pct"], t["mem_used_mib"], t["mem_total_mib"], t["power_w"],
                          t["temp_c"]), (UTIL, MEM_MIB, 40960, 250.5, 61))
        # The table `gpupool nodes` prints has the same sample per GPU (docs/monitoring.md).
        table = self.cli("nodes").stdout
        sampled = table[table.index("GPUs, latest sample:\n"):].splitlines()
        self.assertEqual(sampled[1].split()[:5], ["NODE", "GPU", "ALLOC", "UTIL", "MEMORY"])
        row = [line.split() for line in sampled[2:] if line.split()[:2] == [nodes[0]["name"], "0"]]
        self.assertEqual(len(row), 1, table)
        self.assertEqual((row[0][3], row[0][4], row[0][8], row[0][9]),
                         ("77%", "1.2/40.0", "61", "C"), table)
        rows = json.loads(self.cli("usage", "--json").stdout)["rows"]
        root = [r for r in rows if r["key"] == "root"][0]
        self.assertGreater(root["used_gpu_hours"], 0)
        self.assertLess(root["used_gpu_hours"], root["gpu_hours"])
        self.assertGreater(root["efficiency"], 0)
        csv = self.cli("usage", "--csv").stdout.splitlines()
        self.assertEqual(csv[0], "user,gpu_hours,used_gpu_hours,efficiency,jobs")
        series = json.loads(self.cli_get("/v1/telemetry?job=%d" % self.running))
        self.assertEqual(series["points"][-1]["util_pct"], UTIL)

    @classmethod
    def cli_get(cls, path):
        status, body, _ = http_get("http://127.0.0.1:%d%s" % (cls.port, path), cls.admin_token)
        assert status == 200, body
        return body

    def test_a_real_prometheus_scrapes_the_pool(self):
        token_file = os.path.join(self.dir, "metrics.token")
        with open(token_file, "w") as f:
            f.write(self.token)
        web = free_port()
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: gpupool
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: %s
    static_configs:
      - targets: ["127.0.0.1:%d"]
""" % (token_file, self.port))
        log = open(os.path.join(self.dir, "prometheus.log"), "ab")
        type(self).prom = subprocess.Popen(
            ["prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" +
             os.path.join(self.dir, "tsdb"), "--web.listen-address=127.0.0.1:%d" % web],
            stdout=log, stderr=log, start_new_session=True)

        def query(expr):
            url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (web, urllib.parse.quote(expr))
            try:
                status, body, _ = http_get(url, timeout=5)
            except OSError:
                return None
            if status != 200:
                return None
            result = json.loads(body)["data"]["result"]
            return float(result[0]["value"][1]) if result else None

        deadline = time.time() + 60
        while query('up{job="gpupool"}') != 1.0:
            if time.time() > deadline:
                with open(os.path.join(self.dir, "prometheus.log"), errors="replace") as f:
                    raise AssertionError("Prometheus never scraped the pool:\n" + f.read()[-3000:])
            time.sleep(0.25)
        self.assertEqual(query("gpupool_gpus"), 4.0)
        self.assertEqual(query("gpupool_gpus_allocated"), 1.0)
        self.assertEqual(query('gpupool_jobs{state="RUNNING"}'), 1.0)
        self.assertEqual(query('gpupool_jobs{state="FAILED"}'), 1.0)
        self.assertEqual(query('gpupool_nodes{state="up"}'), 1.0)
        self.assertGreater(query('gpupool_allocated_gpu_seconds_total{user="root"}'), 0.0)
        self.assertGreater(query("gpupool_scheduling_pass_seconds_count"), 0.0)
        self.assertGreater(query('sum(gpupool_api_request_duration_seconds_count{route="/v1/jobs"})'),
                           0.0)
        # dcgm-exporter's series, with the job holding the GPU.
        job = 'hpc_job="%d",user="root"' % self.running
        self.assertEqual(query("DCGM_FI_DEV_GPU_UTIL{%s}" % job), float(UTIL))
        self.assertEqual(query("DCGM_FI_DEV_FB_USED{%s}" % job), float(MEM_MIB))
        self.assertEqual(query("DCGM_FI_DEV_FB_FREE{%s}" % job), float(40960 - MEM_MIB))
        self.assertEqual(query("DCGM_FI_DEV_POWER_USAGE{%s}" % job), 250.5)
        self.assertEqual(query("DCGM_FI_DEV_GPU_TEMP{%s}" % job), 61.0)
        self.assertEqual(query("DCGM_FI_DEV_XID_ERRORS{%s}" % job), 63.0)
        self.assertEqual(query("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{%s}" % job), 2.0)
        self.assertEqual(query("count(DCGM_FI_DEV_GPU_UTIL)"), 4.0)
        self.assertEqual(query('count(DCGM_FI_DEV_GPU_UTIL{modelName="NVIDIA A100-SXM4-40GB",'
                               'device=~"nvidia[0-3]",UUID=~"GPU-.+",Hostname!=""})'), 4.0)
        self.assertGreater(query('gpupool_used_gpu_seconds_total{user="root"}'), 0.0)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skipped: needs root (the agent runs jobs as their users)")
        sys.exit(77)
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            print("skipped: %s not found: install Debian's prometheus (scripts/install-deps.sh)"
                  % tool)
            sys.exit(77)
    result = unittest.TextTestRunner(verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(PrometheusTest))
    sys.exit(0 if result.wasSuccessful() else 1)
