#!/usr/bin/env python3
"""`gpupool sim` as a user meets it (issue 15, part A item 5), on a tiny made-up trace:
`sim policies` lines its descriptions up however long a name is; `sim saturation` needs
--out-dir only without --json, says so when neither is given, and prints its JSON
numbers rounded (3.74, not 3.739999999999995); `--plot` draws the FGD figure as SVG;
`sim timed` applies limits (`--limits-file`), array throttles and holds as a pool does,
and replays GPU failures from an events file, with bad rows and flags named; the
experiments `--fair-order service` and `--preempt-by service` change who starts; an
ordering or preemption option without the queue or `--preemption` it needs is refused.

Usage: sim_cli_test.py PATH_TO_GPUPOOL
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import xml.dom.minidom

GPUPOOL = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else "gpupool"


def run(*args):
    return subprocess.run([GPUPOOL] + list(args), capture_output=True, text=True, timeout=60)


class SimCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="gp-sim-")
        cls.nodes = os.path.join(cls.dir, "nodes.csv")
        cls.pods = os.path.join(cls.dir, "pods.csv")
        with open(cls.nodes, "w") as f:
            f.write("sn,cpu_milli,memory_mib,gpu,model\n")
            for i in range(3):
                f.write("n%d,32000,262144,%d,V100M16\n" % (i, 2 + i))
        with open(cls.pods, "w") as f:
            f.write("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
            for i in range(300):  # enough demand for the curves to reach 100% arrived
                gpus = i % 3  # 0: a CPU task, 1: a shared GPU, 2: two whole GPUs
                milli = {0: 0, 1: 333, 2: 1000}[gpus]
                f.write("p%d,%d,1024,%d,%d\n" % (i, 100 + 7 * i, gpus, milli))

    def test_saturation_plot_is_an_svg_with_a_line_and_band_per_policy(self):
        plot = os.path.join(self.dir, "saturation.svg")
        r = run("sim", "saturation", "--nodes", self.nodes, "--pods", self.pods, "--policy",
                "bestfit,fgd", "--seeds", "1-3", "--plot", plot)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wrote " + plot, r.stdout)
        doc = xml.dom.minidom.parse(plot)  # well-formed XML, or this raises
        svg = doc.documentElement
        self.assertEqual(svg.tagName, "svg")
        paths = svg.getElementsByTagName("path")
        lines = [p for p in paths if p.getAttribute("class") == "line"]
        bands = [p for p in paths if p.getAttribute("class") == "band"]
        # Two panels (unallocated GPUs, fragmentation), one line and band per policy.
        self.assertEqual(len(lines), 4)
        self.assertGreaterEqual(len(bands), 4)
        names = sorted(l.getElementsByTagName("title")[0].firstChild.data for l in lines)
        self.assertEqual(names, ["bestfit", "bestfit", "fgd", "fgd"])
        titles = [t.firstChild.data for t in svg.getElementsByTagName("text")
                  if t.getAttribute("class") == "title"]
        self.assertIn("Unallocated GPUs", titles)
        self.assertIn("GPU fragmentation", titles)
        # Every point is a finite coordinate inside the picture.
        width, height = float(svg.getAttribute("width")), float(svg.getAttribute("height"))
        for p in lines:
            for x, y in re.findall(r"[ML](-?[0-9.]+),(-?[0-9.]+)", p.getAttribute("d")):
                self.assertTrue(0 <= float(x) <= width and 0 <= float(y) <= height, (x, y))
        # --plot alone is enough (no --out-dir, no --json); a bad path is a clear error.
        bad = run("sim", "saturation", "--nodes", self.nodes, "--pods", self.pods, "--plot",
                  os.path.join(self.dir, "no", "such", "dir", "x.svg"))
        self.assertEqual(bad.returncode, 1)
        self.assertIn("--plot", bad.stderr)

    def test_timed_plot_draws_allocation_jobs_and_delay_over_time(self):
        trace = os.path.join(self.dir, "timed.csv")
        with open(trace, "w") as f:
            f.write("job_id,user,submit_time,duration,gpus_per_task\n")
            for i in range(60):  # 4 GPUs, 2-GPU jobs of 30 min, one every 5 min: a queue builds
                f.write("j%d,u%d,%d,1800,2\n" % (i, i % 3, 300 * i))
        plot = os.path.join(self.dir, "timed.svg")
        r = run("sim", "timed", "--trace", trace, "--format", "generic", "--cluster", "2x2",
                "--plot", plot)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wrote " + plot, r.stdout)
        svg = xml.dom.minidom.parse(plot).documentElement
        titles = [t.firstChild.data for t in svg.getElementsByTagName("text")
                  if t.getAttribute("class") == "title"]
        for want in ("GPU allocation", "Jobs", "Queueing delay"):
            self.assertIn(want, titles)
        lines = {p.getElementsByTagName("title")[0].firstChild.data: p.getAttribute("d")
                 for p in svg.getElementsByTagName("path") if p.getAttribute("class") == "line"}
        self.assertEqual(sorted(lines), ["allocated", "mean delay of the jobs submitted then",
                                         "pending", "running"])
        for name, d in lines.items():
            self.assertGreater(len(re.findall(r"[ML]", d)), 10, name)

    def test_timed_applies_limits_arrays_and_holds_like_a_pool(self):
        trace = os.path.join(self.dir, "admission.csv")
        with open(trace, "w") as f:
            f.write("job_id,user,submit_time,duration,gpus_per_task,array,array_max_running,"
                    "held_for\n")
            for i in range(3):  # one GPU each; at most one at a time
                f.write("e%d,ann,0,100,1,sweep,1,\n" % i)
            f.write("big0,bob,0,100,2,,,\nbig1,bob,0,100,2,,,\n")  # bob: 2 GPUs at most
            f.write("late,cy,0,100,1,,,50\n")  # held for 50 s
        limits = os.path.join(self.dir, "limits.json")
        with open(limits, "w") as f:  # what `gpupool limits --json` prints
            json.dump({"default": {}, "users": {"bob": {"max_gpus": 2}}, "projects": {}}, f)
        out = os.path.join(self.dir, "admission")
        r = run("sim", "timed", "--trace", trace, "--cluster", "1x8", "--start-rule", "skip",
                "--limits-file", limits, "--out-dir", out, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "jobs.csv")) as f:
            rows = f.read().splitlines()
        header = rows[0].split(",")
        start = {c[header.index("id")]: int(c[header.index("start_s")])
                 for c in (row.split(",") for row in rows[1:])}
        self.assertEqual(start, {"e0": 0, "e1": 100, "e2": 200, "big0": 0, "big1": 100,
                                 "late": 50})
        with open(limits, "w") as f:
            f.write('{"users": {"bob": {"max_gpus": "two"}}}')
        r = run("sim", "timed", "--trace", trace, "--cluster", "1x8", "--limits-file", limits)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--limits-file " + limits + ": limits.users.bob.max_gpus", r.stderr)

    def test_timed_replays_gpu_failures_from_an_events_file(self):
        trace = os.path.join(self.dir, "fail.csv")
        with open(trace, "w") as f:
            f.write("job_id,user,submit_time,duration,gpus_per_task,requeue\n")
            f.write("a,u,0,1000,4,0\nb,u,0,1000,4,1\n")
        events = os.path.join(self.dir, "events.csv")
        with open(events, "w") as f:  # Xid 79 on each node: cordon-node
            f.write("time_s,node,gpu,xid\n100,node-0000,0,79\n100,node-0001,0,79\n")
        r = run("sim", "timed", "--trace", trace, "--cluster", "2x4", "--gpu-failure-events",
                events, "--gpu-repair-time", "500", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        summary = json.loads(r.stdout)
        self.assertEqual(summary["gpu_failures"], {"cordon-node": 2, "total": 2})
        self.assertEqual(summary["failed_jobs_by_gpu_failure"], 1)  # a
        self.assertEqual(summary["requeues_by_gpu_failure"], 1)  # b: its trace flag
        self.assertEqual(summary["gpu_hours_lost_to_failures"], round(2 * 4 * 100 / 3600, 3))
        self.assertEqual(summary["gpu_hours_out_of_service"], round(8 * 500 / 3600, 3))
        self.assertEqual(summary["makespan_s"], 1600)  # b again from 600, when repaired
        r = run("sim", "timed", "--trace", trace, "--cluster", "2x4", "--gpu-failure-events",
                events, "--gpu-repair-time", "500")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("GPU failures 2 Xids (cordon-node 2): 1 jobs failed, 1 requeued", r.stdout)
        with open(events, "a") as f:
            f.write("200,node-0009,0,79\n")
        r = run("sim", "timed", "--trace", trace, "--cluster", "2x4", "--gpu-failure-events",
                events)
        self.assertEqual(r.returncode, 1)
        self.assertIn(events + ":4: field 'node': unknown node 'node-0009'", r.stderr)
        r = run("sim", "timed", "--trace", trace, "--cluster", "2x4", "--gpu-failure-rate", "1",
                "--gpu-failure-mix", "79:lots")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--gpu-failure-mix", r.stderr)

    def test_timed_fair_order_service_and_preempt_by_service(self):
        def starts(trace, cluster, *flags):
            out = os.path.join(self.dir, "svc")
            r = run("sim", "timed", "--trace", trace, "--cluster", cluster, "--out-dir", out,
                    "--json", *flags)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "jobs.csv")) as f:
                rows = f.read().splitlines()
            header = rows[0].split(",")
            return {c[header.index("id")]: int(c[header.index("start_s")])
                    for c in (row.split(",") for row in rows[1:])}

        # One GPU: at 1000 both groups hold none; by share bob's older b1 goes first, by
        # service alice's a1 (nothing of her 100 s served; bob 1,000 of 1,900 s).
        trace = os.path.join(self.dir, "service.csv")
        with open(trace, "w") as f:
            f.write("job_id,user,submit_time,duration,gpus_per_task\n")
            f.write("b0,bob,0,1000,1\nb1,bob,100,50,1\na1,alice,900,50,1\n")
        self.assertEqual(starts(trace, "1x1", "--queue", "fair")["a1"], 1050)
        self.assertEqual(
            starts(trace, "1x1", "--queue", "fair", "--fair-order", "service")["a1"], 1000)
        # By fair-share attainment: bob got 1,000 GPU-s of the 950 he was entitled to,
        # alice none of her 50.
        self.assertEqual(
            starts(trace, "1x1", "--queue", "fair", "--fair-order", "attainment")["a1"], 1000)
        # Two GPUs: alice's 2-GPU job is above her share (1), so only the service rule
        # lets her stop bob's b1 (better served, over his share) when b2 comes at 4000.
        with open(trace, "w") as f:
            f.write("job_id,user,submit_time,duration,gpus_per_task\n")
            f.write("b1,bob,0,100000,2\na,alice,10,100,2\nb2,bob,4000,100,1\n")
        flags = ["--preemption", "--checkpoint-interval", "1000"]
        self.assertEqual(starts(trace, "1x2", *flags)["a"], 100000)
        self.assertEqual(starts(trace, "1x2", *flags, "--preempt-by", "service")["a"], 4000)
        self.assertEqual(starts(trace, "1x2", *flags, "--preempt-by", "attainment")["a"], 4000)
        r = run("sim", "timed", "--trace", trace, "--cluster", "1x2", "--queue", "fair",
                "--preemption", "--fair-order", "attainment", "--preempt-by", "service")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--fair-order attainment and --preempt-by service: both measure", r.stderr)
        r = run("sim", "timed", "--trace", trace, "--cluster", "1x2", "--queue", "fair",
                "--fair-order", "service", "--fair-sjf-bound", "2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--fair-order service and --fair-sjf-bound", r.stderr)
        r = run("sim", "timed", "--trace", trace, "--cluster", "1x2", "--queue", "fair",
                "--fair-sjf-penalty", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--fair-sjf-penalty stretches the order of --fair-sjf-bound: add "
                      "--fair-sjf-bound K", r.stderr)
        # An option that orders or preempts says what it needs instead of doing nothing.
        for flags, needs in (
                (["--fair-shortest-first"], "--fair-shortest-first orders the fair-share "
                 "queue: add --queue fair (the queue is fifo)"),
                (["--queue", "sjf", "--fair-order", "service"], "--fair-order orders the "
                 "fair-share queue: add --queue fair (the queue is sjf)"),
                (["--fair-sjf-bound", "2"], "--fair-sjf-bound orders"),
                (["--fair-sjf-penalty", "1"], "--fair-sjf-penalty orders"),
                (["--fair-starving-after", "60"], "--fair-starving-after orders"),
                (["--min-runtime", "60"], "--min-runtime requires --preemption"),
                (["--preempt-by", "service"], "--preempt-by requires --preemption"),
                (["--preempt-shares", "demand"], "--preempt-shares requires --preemption"),
                (["--preempt-starving-after", "60"], "--preempt-starving-after requires"),
                (["--preempt-wait-budget", "60"], "--preempt-wait-budget requires"),
                (["--preempt-max-times", "1"], "--preempt-max-times requires"),
                (["--preempt-resume", "first"], "--preempt-resume requires"),
                (["--preemption", "--preempt-service-gap", "0.1"],
                 "--preempt-service-gap needs --preempt-by service")):
            r = run("sim", "timed", "--trace", trace, "--cluster", "1x2", *flags)
            self.assertEqual(r.returncode, 2, (flags, r.stdout, r.stderr))
            self.assertIn(needs, r.stderr, flags)

    def test_sim_policies_lines_up_long_names(self):
        r = run("sim", "policies")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l for l in r.stdout.splitlines() if l]
        names = [l.split()[0] for l in lines]
        width = max(len(n) for n in names)
        self.assertGreater(width, 20)  # a name longer than the old fixed column
        for line, name in zip(lines, names):
            # Every description starts in the same column, two spaces after the widest name.
            self.assertEqual(line[width:width + 2], "  ", line)
            self.assertNotEqual(line[width + 2], " ", line)

    def test_docs_name_the_policy_default_stands_for(self):
        # docs/sim.md once named an old default; it must name what `default` is today.
        line = [l for l in run("sim", "policies").stdout.splitlines() if l.startswith("default ")]
        self.assertEqual(len(line), 1)
        target = line[0].split("alias of ", 1)[1].split(":", 1)[0]
        docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "sim.md")
        with open(docs) as f:
            text = f.read()
        self.assertIn("| %s (ours, `default`) |" % target, text)

    def test_saturation_needs_out_dir_only_without_json(self):
        r = run("sim", "saturation", "--nodes", self.nodes, "--pods", self.pods, "--seeds", "1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--out-dir", r.stderr)
        self.assertIn("--json", r.stderr)
        r = run("sim", "saturation", "--nodes", self.nodes, "--pods", self.pods, "--seeds", "1",
                "--policy", "fgd,bestfit", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        summary = json.loads(r.stdout)
        self.assertNotIn("out_dir", summary)
        self.assertEqual(len(summary["runs"]), 2)
        self.assertNotIn("allo.csv", os.listdir(self.dir))  # no files without --out-dir
        # Rounded: no number with more than four decimals, and the curves have values.
        self.assertIsNone(re.search(r"\d\.\d{5,}", r.stdout), r.stdout)
        for run_ in summary["runs"]:
            self.assertIsInstance(run_["frag_pct_at_100"], float, r.stdout)

    def test_saturation_writes_files_with_out_dir(self):
        out = os.path.join(self.dir, "out")
        r = run("sim", "saturation", "--nodes", self.nodes, "--pods", self.pods, "--seeds", "1",
                "--policy", "fgd", "--out-dir", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["allo.csv", "frag.csv", "frag_ratio.csv"])


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(1 if result.failures or result.errors else 0)
