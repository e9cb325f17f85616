#!/usr/bin/env python3
"""Runs the FGD paper's published campaign with `gpupool sim saturation` and compares.

Table 1: the default openb workload, the six published policies x seeds 42-51 plus our
policy: unallocated GPU % at 100% arrived (mean +- standard deviation over seeds, and
min..max) against ../shared/traces/fgd-published, and fragmentation at 100% arrived.
Table 2: our policy against FGD on every variant workload.
Also records the wall time and peak RSS of the 60-run campaign (via /usr/bin/time -v).
Python 3 standard library only. Skips (exit 0) when the shared traces are absent.
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time

PUBLISHED = ["random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd"]
LABELS = {"random": "01-Random", "dotprod": "02-DotProd", "gpuclustering": "03-GpuClustering",
          "gpupacking": "04-GpuPacking", "bestfit": "05-BestFit", "fgd": "06-FGD"}
VARIANTS = ["gpushare40", "gpuspec10", "multigpu20", "cpu100"]


def label(policy):
    return LABELS.get(policy, "07-" + policy)


def read_at(path, column, workload=None):
    """{(workload, label): [value at `column` for each seed]} from a result CSV."""
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if workload and row["workload"] != workload:
                continue
            v = row.get(column, "")
            if v == "":
                continue
            out.setdefault((row["workload"], row["sc_policy"]), []).append(float(v))
    return out


def stats(values):
    if not values:
        return None
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.mean(values), sd, min(values), max(values)


def run(cmd, timed):
    """Runs cmd; returns (stdout, wall seconds, peak RSS in MB or None)."""
    if timed and os.path.exists("/usr/bin/time"):
        cmd = ["/usr/bin/time", "-v"] + cmd
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        sys.exit("campaign: command failed: " + " ".join(cmd))
    rss = None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    if m:
        rss = int(m.group(1)) / 1024.0
    return p.stdout, wall, rss


def fmt(s, unalloc=True):
    if s is None:
        return "n/a"
    mean, sd, lo, hi = s
    return f"{mean:.2f} ± {sd:.2f} ({lo:.2f}–{hi:.2f})"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpupool", default=os.path.join(root, "build", "release", "gpupool"))
    ap.add_argument("--traces", default=os.path.join(root, "..", "shared", "traces"))
    ap.add_argument("--out", default=os.path.join(root, "build", "campaign"))
    ap.add_argument("--ours", default="fgd-strand-lookahead-open", help="our policy's name")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--skip-variants", action="store_true")
    a = ap.parse_args()

    openb = os.path.join(a.traces, "openb")
    published = os.path.join(a.traces, "fgd-published")
    if not os.path.isdir(openb) or not os.path.isdir(published):
        print(f"campaign: skipped: {a.traces} (openb trace and fgd-published) is absent")
        return 0
    if not os.access(a.gpupool, os.X_OK):
        sys.exit(f"campaign: {a.gpupool} is not built; run `make build` or pass --gpupool")
    nodes = os.path.join(openb, "openb_node_list_gpu_node.csv")

    def sat(workload, policies, out_dir, timed):
        cmd = [a.gpupool, "sim", "saturation", "--nodes", nodes,
               "--pods", os.path.join(openb, f"openb_pod_list_{workload}.csv"),
               "--policy", ",".join(policies), "--seeds", a.seeds, "--out-dir", out_dir,
               "--jobs", str(a.jobs), "--json"]
        return run(cmd, timed)

    # Table 1: the published 60-run campaign, timed on its own, then ours.
    d_pub = os.path.join(a.out, "default-published")
    d_ours = os.path.join(a.out, "default-ours")
    _, wall, rss = sat("default", PUBLISHED, d_pub, True)
    _, wall_ours, rss_ours = sat("default", [a.ours], d_ours, True)
    w = "openb_pod_list_default"
    pub_u = read_at(os.path.join(published, "allo.csv"), "100", w)
    pub_f = read_at(os.path.join(published, "frag.csv"), "100", w)
    our_u, our_f = {}, {}
    for d in (d_pub, d_ours):
        our_u.update(read_at(os.path.join(d, "allo.csv"), "100", w))
        our_f.update(read_at(os.path.join(d, "frag.csv"), "100", w))
    unalloc = lambda vals: [100.0 - v for v in vals]  # noqa: E731

    print(f"## default workload, seeds {a.seeds}: unallocated GPU % at 100% arrived\n")
    print("| policy | ours: mean ± sd (min–max) | published: mean ± sd (min–max) | diff | "
          "frag % at 100 (ours) | frag % at 100 (published) |")
    print("|---|---|---|---|---|---|")
    summary = {"campaign_wall_s": wall, "campaign_peak_rss_mb": rss, "rows": []}
    for p in PUBLISHED + [a.ours]:
        key = (w, label(p))
        o = stats(unalloc(our_u.get(key, [])))
        pb = stats(unalloc(pub_u.get(key, []))) if p in LABELS else None
        fo = stats(our_f.get(key, []))
        fp = stats(pub_f.get(key, [])) if p in LABELS else None
        diff = f"{o[0] - pb[0]:+.2f}" if o and pb else (
            f"{o[0] - stats(unalloc(pub_u[(w, '06-FGD')]))[0]:+.2f} vs FGD" if o else "n/a")
        fo_s = f"{fo[0]:.2f}" if fo else "n/a"
        fp_s = f"{fp[0]:.2f}" if fp else "n/a"
        print(f"| {p} | {fmt(o)} | {fmt(pb)} | {diff} | {fo_s} | {fp_s} |")
        summary["rows"].append({"policy": p, "ours": o, "published": pb})
    print(f"\nPublished campaign (6 policies x {a.seeds}): wall {wall:.1f} s, peak RSS "
          f"{rss if rss is None else round(rss, 1)} MB, {a.jobs} jobs; our policy alone: "
          f"wall {wall_ours:.1f} s, peak RSS {rss_ours if rss_ours is None else round(rss_ours, 1)} MB\n")

    if not a.skip_variants:
        print(f"## our policy ({a.ours}) vs FGD on every workload: unallocated GPU % at 100%\n")
        print("| workload | FGD (ours) | FGD (published) | "
              f"{a.ours} | {a.ours} − FGD published |")
        print("|---|---|---|---|---|")
        rows = [("default", our_u)]
        for v in VARIANTS:
            d = os.path.join(a.out, v)
            sat(v, ["fgd", a.ours], d, False)
            rows.append((v, read_at(os.path.join(d, "allo.csv"), "100")))
        for v, data in rows:
            wv = f"openb_pod_list_{v}"
            fgd_o = stats(unalloc(data.get((wv, "06-FGD"), [])))
            fgd_p = stats(
                unalloc(read_at(os.path.join(published, "allo.csv"), "100", wv).get(
                    (wv, "06-FGD"), [])))
            o = stats(unalloc(data.get((wv, label(a.ours)), [])))
            diff = f"{o[0] - fgd_p[0]:+.2f}" if o and fgd_p else "n/a"
            print(f"| {v} | {fmt(fgd_o)} | {fmt(fgd_p)} | {fmt(o)} | {diff} |")
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
