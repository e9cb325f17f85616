"""The node check's checks (docs/node-check.md): each takes the Context and returns
(status, summary, details), or raises Skip or CheckError; nodecheck.py runs each in a
child process of its own with its time limit."""
import errno
import json
import os
import re
import statistics
import subprocess
import time

from nodecheck_lib import (FAIL, FINAL, MIB, PASS, api, busy_fake_gpu, CheckError, close, dev_str,
                           events, follow_jobs, isolation_note, job, logs, mean, need_pool,
                           need_torch, read_json, run, save_job, set_fake_telemetry, Skip,
                           smi_env, submit, tail, wait_event, wait_job, write, write_json)


# ---- the checks ------------------------------------------------------------------------

def norm_bus(bus):
    """'00000000:1B:00.0' and '0000:1b:00.0' -> (0, 0x1b, 0, 0)."""
    m = re.match(r"^\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)\s*$", bus or "")
    return tuple(int(x, 16) for x in m.groups()) if m else None


def version_tuple(text):
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?", text or "")
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def csv_rows(text):
    rows = []
    for line in text.splitlines():
        if line.strip():
            rows.append([c.strip() for c in line.split(",")])
    return rows


def fixture_name(node):
    gpus = [g for g in node.get("gpus", []) if g.get("vendor") == "nvidia"]
    model = gpus[0]["name"] if gpus else "no-gpu"
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    slug = slug.replace("nvidia-", "", 1)
    driver = (node.get("drivers", {}).get("nvidia") or {}).get("version", "nodriver")
    return "nvidia-%dx%s-%s.json" % (len(gpus), slug, driver)


def check_discovery(ctx):
    d = ctx.dir("discovery")
    details = {}
    rc, out, err = run(ctx.gpupool("gpus", "--json"), env=ctx.kit_env, timeout=30,
                       save=os.path.join(d, "gpupool-gpus"))
    if rc != 0:
        raise CheckError("gpupool gpus --json failed (exit %s): %s" % (rc, tail(err, 800)))
    node = json.loads(out)
    # What discovery said on stderr (its hint about fake nodes left out).
    details["diagnostics"] = [l for l in err.splitlines() if l.startswith("gpupool gpus:")]
    # nvidia-smi knows NVIDIA's GPUs only (sysfs may also list another vendor's).
    gpus = [g for g in node.get("gpus", []) if g.get("vendor") == "nvidia"]
    if not gpus:
        # Why: the NVML backend alone says (auto discovery keeps a missing library quiet).
        _, _, why = run(ctx.gpupool("gpus", "--backend", "nvml", "--json"), env=ctx.kit_env,
                        timeout=30, save=os.path.join(d, "gpupool-gpus-nvml"))
        raise CheckError("gpupool found no NVIDIA GPU: " + tail(why.strip(), 600))
    # The capture as a fixture, and its replay: byte-identical through --fake.
    fixture = os.path.join(d, "fixture", fixture_name(node))
    write(fixture, out)
    details["fixture"] = os.path.relpath(fixture, ctx.out)
    rrc, rout, rerr = run(ctx.gpupool("gpus", "--fake", fixture, "--json"), env=ctx.kit_env,
                          timeout=30, save=os.path.join(d, "replay"))
    problems = []
    if rrc != 0 or rout != out:
        problems.append("the fixture does not replay byte-identical with `gpupool gpus --fake` "
                        "(exit %s; see discovery/replay.out)" % rrc)
    else:
        details["replay"] = "byte-identical"

    smi = ctx.smi()
    if smi is None:
        raise CheckError("nvidia-smi is not on PATH: nothing to compare discovery with")
    senv = smi_env(ctx)
    fields = "index,uuid,name,pci.bus_id,driver_version,memory.total"
    rc, qout, qerr = run(smi + ["--query-gpu=" + fields, "--format=csv,noheader,nounits"],
                         env=senv, timeout=30, save=os.path.join(d, "nvidia-smi-query-gpu"))
    if rc != 0:
        raise CheckError("nvidia-smi --query-gpu failed (exit %s): %s" % (rc, tail(qerr or qout, 500)))
    smi_gpus = {}
    for r in csv_rows(qout):
        if len(r) >= 6:
            smi_gpus[r[1]] = {"index": r[0], "name": r[2], "bus": r[3], "driver": r[4], "mem": r[5]}
    rc, cout, _ = run(smi + ["--query-gpu=uuid,compute_cap", "--format=csv,noheader"], env=senv,
                      timeout=30, save=os.path.join(d, "nvidia-smi-compute-cap"))
    caps = {r[0]: r[1] for r in csv_rows(cout) if len(r) >= 2} if rc == 0 else {}
    if rc != 0:
        details["compute_cap"] = "nvidia-smi cannot query compute_cap (older than R510?): not compared"
    rc, hout, _ = run(smi, env=senv, timeout=30, save=os.path.join(d, "nvidia-smi"))
    m = re.search(r"CUDA Version\s*:?\s*([0-9]+\.[0-9]+)", hout)
    smi_cuda = m.group(1) if m else None

    nv = node.get("drivers", {}).get("nvidia") or {}
    compared = []
    if set(smi_gpus) != {g["uuid"] for g in gpus}:
        problems.append("GPUs differ: nvidia-smi lists %s, gpupool %s" % (
            sorted(smi_gpus), sorted(g["uuid"] for g in gpus)))
    for g in gpus:
        s = smi_gpus.get(g["uuid"])
        if s is None:
            continue
        who = "GPU %s (%s)" % (g["index"], g["uuid"])
        row = {"gpu": g["index"], "uuid": g["uuid"]}

        def cmp(field, ours, theirs, same):
            row[field] = {"gpupool": ours, "nvidia-smi": theirs, "match": bool(same)}
            if not same:
                problems.append("%s %s: gpupool %r, nvidia-smi %r" % (who, field, ours, theirs))
        cmp("index", g["index"], s["index"], str(g["index"]) == s["index"])
        cmp("name", g["name"], s["name"], g["name"] == s["name"])
        cmp("pci_bus_id", g["pci_bus_id"], s["bus"], norm_bus(g["pci_bus_id"]) == norm_bus(s["bus"]))
        ours_mib = g["memory_total_bytes"] // MIB
        try:
            theirs_mib = int(float(s["mem"]))
            # Same NVML figure, but nvidia-smi may report memory without what the driver
            # reserves on some versions: within 1%.
            same_mem = close(ours_mib, theirs_mib, 1, 0.01)
        except ValueError:
            theirs_mib, same_mem = s["mem"], False
        cmp("memory_total_mib", ours_mib, theirs_mib, same_mem)
        cmp("driver", nv.get("version"), s["driver"], nv.get("version") == s["driver"])
        if g["uuid"] in caps:
            cmp("compute_capability", g.get("compute_capability"), caps[g["uuid"]],
                version_tuple(g.get("compute_capability")) == version_tuple(caps[g["uuid"]]))
        compared.append(row)
    if smi_cuda is None:
        details["cuda_version"] = "nvidia-smi printed no CUDA version: not compared"
    else:
        ours = nv.get("runtime_version")
        details["cuda_version"] = {"gpupool": ours, "nvidia-smi": smi_cuda}
        if version_tuple(ours) != version_tuple(smi_cuda):
            problems.append("CUDA version: gpupool %r, nvidia-smi %r" % (ours, smi_cuda))
    details["gpus"] = compared
    if problems:
        details["problems"] = problems
        return FAIL, "%d GPU(s); %d difference(s): %s" % (len(gpus), len(problems), "; ".join(problems[:3])), details
    return PASS, "%d GPU(s) (%s), driver %s, CUDA %s: every field matches nvidia-smi; fixture %s" % (
        len(gpus), gpus[0]["name"], nv.get("version"), nv.get("runtime_version"),
        os.path.basename(fixture)), details


def check_real_driver_tests(ctx):
    d = ctx.dir("real-driver-tests")
    binary = os.path.join(ctx.kit, "tests", "nvml_backend_test")
    report = os.path.join(d, "gtest.json")
    rc, out, err = run([binary, "--gtest_filter=*RealDriver*", "--gtest_output=json:" + report],
                       env=ctx.kit_env, timeout=50, save=os.path.join(d, "nvml_backend_test"))
    g = read_json(report)
    if g is None:
        raise CheckError("the test binary wrote no report (exit %s): %s" % (rc, tail(err or out, 800)))
    cases, failed, skipped = [], [], []
    for suite in g.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = "%s.%s" % (suite.get("name"), t.get("name"))
            result = t.get("result", "COMPLETED")
            fails = [f.get("failure", "") for f in t.get("failures", [])]
            status = "failed" if fails else ("skipped" if result == "SKIPPED" else "passed")
            cases.append({"test": name, "status": status, "failures": fails})
            (failed if fails else skipped if status == "skipped" else []).append(name)
    notes = [l for l in out.splitlines() if l.startswith("note:") or l.startswith("GPU ")]
    details = {"cases": cases, "output": notes}
    if not cases:
        raise CheckError("no *RealDriver* test case ran")
    if failed or rc != 0:
        return FAIL, "%d of %d failed: %s" % (len(failed), len(cases), ", ".join(failed)), details
    if skipped:
        # They skip only without a usable driver: on a GPU machine that is a failure.
        return FAIL, "%d of %d skipped (no usable driver?): %s" % (
            len(skipped), len(cases), ", ".join(skipped)), details
    return PASS, "%d real-driver cases passed: %s" % (len(cases), ", ".join(c["test"] for c in cases)), details


def read_samples(path):
    rounds = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rounds.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rounds


def check_xid(ctx):
    d = ctx.dir("xid")
    path = os.path.join(d, "samples.jsonl")
    rc, out, err = run(ctx.gpupool("gpus", "--sample", "4", "--sample-interval", "0.5"),
                       env=ctx.kit_env, timeout=25, save=os.path.join(d, "sample"))
    write(path, out)
    rounds = read_samples(path)
    if not rounds:
        raise CheckError("gpupool gpus --sample printed nothing (exit %s): %s" % (rc, tail(err, 600)))
    details = {"rounds": len(rounds), "sampler": rounds[0].get("sampler"),
               "took_ms": [round(r.get("took_ms", 0), 3) for r in rounds]}
    problems = []
    if rounds[0].get("note"):
        details["note"] = rounds[0]["note"]
    seen = {}
    for r in rounds:
        if r.get("error"):
            problems.append("round %d: %s" % (r["round"], r["error"]))
        if r.get("took_ms", 0) > 2000:
            problems.append("round %d took %.0f ms: the Xid drain blocked" % (r["round"], r["took_ms"]))
        for s in r.get("samples", []):
            if "xid_errors" not in s or "xid_count" not in s:
                problems.append("GPU %s: no Xid figures (event set not registered)%s" % (
                    s.get("index"), ": " + r["note"] if r.get("note") else ""))
            elif s["xid_count"] > 0:
                seen[s["index"]] = (s["xid_errors"], s["xid_count"])
    problems = sorted(set(problems), key=problems.index)
    details["xid_seen"] = {str(k): {"last_xid": v[0], "count": v[1]} for k, v in seen.items()}
    expected = {}
    if ctx.fake:
        scenario = read_json(ctx.kit_env["FAKE_NVML_SCENARIO"], {})
        for i, dev in enumerate(scenario.get("devices", [])):
            for x in dev.get("xid_events", []):
                expected[i] = x["xid"] if isinstance(x, dict) else x
        got = {k: v[0] for k, v in seen.items()}
        if got != expected:
            problems.append("the fake's scripted Xid events %s were drained as %s" % (expected, got))
    elif seen:
        problems.append("the driver reported Xid errors during the check: %s (see dmesg)" % (
            ", ".join("GPU %s: Xid %s x%s" % (k, v[0], v[1]) for k, v in seen.items())))
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    worst = max(r.get("took_ms", 0) for r in rounds)
    what = ("the scripted Xid %s drained" % expected) if ctx.fake else "no Xid event"
    return PASS, "event sets registered on %d GPU(s); %d non-blocking drains (slowest sample %.1f ms); %s" % (
        len(rounds[0].get("samples", [])), len(rounds), worst, what), details


def parse_dmon(text):
    """nvidia-smi dmon's rows as dicts keyed by its header's column names."""
    cols, rows = None, []
    for line in text.splitlines():
        if line.startswith("#"):
            if cols is None:
                cols = line.lstrip("#").split()
            continue
        vals = line.split()
        if cols and len(vals) == len(cols):
            row = {}
            for c, v in zip(cols, vals):
                try:
                    row[c] = float(v)
                except ValueError:
                    row[c] = None
            rows.append(row)
    return cols or [], rows


def check_telemetry(ctx):
    need_pool(ctx)
    need_torch(ctx)
    smi = ctx.smi()
    if smi is None:
        raise CheckError("nvidia-smi is not on PATH: nothing to compare the telemetry with")
    d = ctx.dir("telemetry")
    burn = ctx.burn_seconds
    j = submit(ctx, "nodecheck-telemetry", ["--gpus", "1"],
               [ctx.torch_python, ctx.job_script, "work", str(burn)])
    jid = j["id"]
    details = {"job": jid}
    wait_job(ctx, jid, ("RUNNING",) + FINAL, 30)
    start = wait_event(ctx, jid, "start", 90)
    if start.get("torch") is None:
        raise CheckError("the job could not import torch: %s" % start.get("error"))
    pid = start["pid"]
    j = job(ctx, jid)
    uuid = j["placement"][0]["gpu_uuids"][0]
    gpu_index = None
    details.update({"pid": pid, "gpu_uuid": uuid, "device": start.get("device"),
                    "torch": start.get("torch")})
    if ctx.fake:
        busy_fake_gpu(ctx, [pid])
    rounds = max(3, int(burn) - 4)
    samples_path = os.path.join(d, "gpupool-samples.jsonl")
    dmon_path = os.path.join(d, "nvidia-smi-dmon.txt")
    senv = smi_env(ctx)
    with open(samples_path, "w") as sf, open(dmon_path, "w") as df:
        ps = subprocess.Popen(ctx.gpupool("gpus", "--sample", str(rounds), "--sample-interval", "1"),
                              env=ctx.kit_env, stdout=sf, stderr=subprocess.PIPE)
        pd = subprocess.Popen(smi + ["dmon", "-s", "pum", "-d", "1", "-c", str(rounds)], env=senv,
                              stdout=df, stderr=subprocess.STDOUT)
        apps = []
        for k in range(2):
            time.sleep(1.5 if k == 0 else max(1.0, rounds / 2.0 - 1.5))
            rc, aout, aerr = run(smi + ["--query-compute-apps=pid,used_memory,gpu_uuid",
                                        "--format=csv,noheader,nounits"], env=senv, timeout=20,
                                 save=os.path.join(d, "nvidia-smi-compute-apps-%d" % k))
            apps.append(csv_rows(aout) if rc == 0 else [])
        try:
            ps.wait(rounds + 20)
            pd.wait(rounds + 20)
        finally:
            for p in (ps, pd):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        sample_err = ps.stderr.read().decode(errors="replace")
    j = wait_job(ctx, jid, FINAL, burn + 60)
    if ctx.fake:
        set_fake_telemetry(ctx)
    end = events(logs(ctx, jid)).get("end", {})
    j = save_job(ctx, d, jid)
    st, nodes = api(ctx.pool["socket"], "GET", "/v1/nodes")
    write_json(os.path.join(d, "nodes.json"), nodes)

    problems = []
    ours = read_samples(samples_path)
    if not ours:
        raise CheckError("gpupool gpus --sample printed nothing: %s" % tail(sample_err, 600))
    with open(dmon_path) as f:
        cols, dmon_rows = parse_dmon(f.read())
    # Our rounds for the job's GPU.
    mine = []
    for r in ours:
        for s in r.get("samples", []):
            if s.get("uuid") == uuid:
                mine.append(s)
                gpu_index = s.get("index")
    if not mine:
        raise CheckError("the sampler reported nothing for GPU %s" % uuid)
    theirs = [row for row in dmon_rows if row.get("gpu") == gpu_index]
    details["rounds"] = {"gpupool": len(mine), "dmon": len(theirs), "dmon_columns": cols}
    if not theirs:
        problems.append("nvidia-smi dmon printed no row for GPU %s" % gpu_index)

    def compare(label, ours_key, dmon_key, abs_tol, rel_tol, floor=None):
        a = [s[ours_key] for s in mine if s.get(ours_key) is not None]
        b = [row[dmon_key] for row in theirs if row.get(dmon_key) is not None]
        entry = {"gpupool_mean": round(mean(a), 1) if a else None,
                 "dmon_mean": round(mean(b), 1) if b else None,
                 "tolerance": "max(%s, %d%%)" % (abs_tol, rel_tol * 100)}
        details[label] = entry
        if not a:
            problems.append("%s: the sampler reported none" % label)
            return
        if not b:
            entry["note"] = "nvidia-smi dmon has no %s column here" % dmon_key
            return
        if not close(mean(a), mean(b), abs_tol, rel_tol):
            problems.append("%s: gpupool %.1f, nvidia-smi dmon %.1f" % (label, mean(a), mean(b)))
        if floor is not None and mean(a) < floor:
            problems.append("%s: %.1f on average under a matrix-product loop (expected >= %s)" % (
                label, mean(a), floor))

    compare("utilization_pct", "util_pct", "sm", 20, 0.0, None if ctx.fake else 50)
    # NVML's v1 memory figure includes what the driver reserves; dmon may not.
    compare("memory_used_mib", "mem_used_mib", "fb", 1024, 0.03)
    compare("power_w", "power_w", "pwr", 40, 0.15)

    # The job's process: seen by the sampler on its GPU, attributed to its job, and in
    # nvidia-smi's list of compute apps with about the same memory.
    procs = [p for s in mine for p in s.get("processes", []) if p.get("pid") == pid]
    attributed = [p for p in procs if p.get("job_id") == jid]
    others = sorted({p.get("job_id", 0) for p in procs if p.get("job_id") != jid})
    smi_mem = [float(r[1]) for rows in apps for r in rows
               if len(r) >= 3 and r[0] == str(pid) and re.match(r"^[0-9.]+$", r[1])]
    smi_pids = sorted({r[0] for rows in apps for r in rows if r})
    ours_mem = [p["used_mib"] for p in procs if p.get("used_mib") is not None]
    ours_util = [p["util_pct"] for p in procs if p.get("util_pct") is not None]
    details["process"] = {
        "pid": pid, "rounds_seen": len(procs), "rounds_attributed_to_job": len(attributed),
        "other_job_ids": others, "nvidia_smi_pids": smi_pids,
        "used_mib": {"gpupool_median": statistics.median(ours_mem) if ours_mem else None,
                     "nvidia-smi": smi_mem},
        "util_pct_mean": round(mean(ours_util), 1) if ours_util else None}
    if not procs:
        problems.append("the job's process %d never appeared in the sampler's process list" % pid)
    elif not attributed:
        problems.append("the job's process %d was never attributed to job %d (job ids seen: %s)" % (
            pid, jid, others))
    if str(pid) not in smi_pids:
        problems.append("nvidia-smi --query-compute-apps did not list the job's process %d (it "
                        "listed %s)" % (pid, smi_pids or "none"))
    elif smi_mem and ours_mem and not close(statistics.median(ours_mem), smi_mem[-1], 256, 0.10):
        problems.append("process memory: gpupool %s MiB, nvidia-smi %s MiB" % (
            statistics.median(ours_mem), smi_mem[-1]))

    # The pool saw it too: the job's utilisation from the agent's telemetry.
    util = j.get("gpu_util") or {}
    details["pool_job_gpu_util"] = util
    details["job_state"] = j["state"]
    details["work"] = {k: end.get(k) for k in ("seconds", "iterations", "tflops", "relative_error")}
    if j["state"] != "SUCCEEDED":
        problems.append("the job ended %s: %s" % (j["state"], j.get("reason")))
    if not util or not util.get("peak_pct"):
        problems.append("the pool recorded no GPU utilisation for the job")
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    return PASS, ("%d s matrix-product loop (%s TFLOPS on %s): utilisation %s vs dmon %s %%, memory %s vs "
                  "%s MiB, power %s vs %s W; process %d attributed to job %d in %d/%d rounds, "
                  "listed by nvidia-smi") % (
        burn, dev_str(end.get("tflops")), start.get("device"),
        dev_str(details["utilization_pct"]["gpupool_mean"]), dev_str(details["utilization_pct"]["dmon_mean"]),
        dev_str(details["memory_used_mib"]["gpupool_mean"]), dev_str(details["memory_used_mib"]["dmon_mean"]),
        dev_str(details["power_w"]["gpupool_mean"]), dev_str(details["power_w"]["dmon_mean"]),
        pid, jid, len(attributed), len(mine)), details


def torch_job_checks(ctx, name, j, start, end, problems, share=None):
    """What a finished torch_job.py must show: its GPU, and real work."""
    uuids = j["placement"][0]["gpu_uuids"] if j.get("placement") else []
    env = start.get("env") or {}
    seen = [u for u in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",") if u]
    if j["state"] != "SUCCEEDED":
        problems.append("%s ended %s: %s" % (name, j["state"], j.get("reason")))
    if len(uuids) != 1:
        problems.append("%s was placed on %s, not one GPU" % (name, uuids))
    if seen != uuids:
        problems.append("%s saw CUDA_VISIBLE_DEVICES=%s, not its GPU %s" % (name, seen, uuids))
    if share is not None and env.get("GPUPOOL_GPU_MILLI") != str(share):
        problems.append("%s saw GPUPOOL_GPU_MILLI=%s, not %s" % (name, env.get("GPUPOOL_GPU_MILLI"), share))
    if not ctx.fake:
        if not start.get("cuda_available"):
            problems.append("%s: torch.cuda.is_available() is false (torch %s, CUDA %s)" % (
                name, start.get("torch"), start.get("torch_cuda")))
        elif start.get("device_count") != 1:
            problems.append("%s: PyTorch sees %s GPUs, not exactly 1" % (name, start.get("device_count")))
        elif start.get("device_uuid") and uuids and start["device_uuid"].lower() != uuids[0].lower():
            problems.append("%s: PyTorch's GPU is %s, not the job's %s" % (name, start["device_uuid"], uuids[0]))
    if not end:
        problems.append("%s printed no result" % name)
    elif not end.get("iterations") or end.get("relative_error") is None or end["relative_error"] > 1e-2:
        problems.append("%s: no real work (iterations %s, relative error %s)" % (
            name, end.get("iterations"), end.get("relative_error")))


def check_pool_job(ctx):
    need_pool(ctx)
    need_torch(ctx)
    d = ctx.dir("pool-job")
    work = str(ctx.work_seconds)
    argv = [ctx.torch_python, ctx.job_script, "work", work]
    whole = submit(ctx, "nodecheck-gpus1", ["--gpus", "1"], argv)["id"]
    pair = [submit(ctx, "nodecheck-share-%d" % k, ["--gpu-share", "0.5"], argv)["id"] for k in (1, 2)]
    details = {"jobs": {"gpus1": whole, "share": pair}}
    problems = []
    follow_jobs(ctx, [whole] + pair, 100)
    results = {}
    for jid in [whole] + pair:
        j = save_job(ctx, d, jid)
        ev = events(logs(ctx, jid))
        results[jid] = (j, ev.get("start", {}), ev.get("end", {}))
        if ev.get("start", {}).get("torch", "") is None:
            raise CheckError("job %d could not import torch: %s" % (jid, ev["start"].get("error")))
    j, start, end = results[whole]
    torch_job_checks(ctx, "the --gpus 1 job %d" % whole, j, start, end, problems)
    details["gpus1"] = {"state": j["state"], "placement": j.get("placement"),
                        "sees": (start.get("env") or {}).get("CUDA_VISIBLE_DEVICES"),
                        "torch": start.get("torch"), "device": start.get("device"),
                        "device_name": start.get("device_name"), "device_uuid": start.get("device_uuid"),
                        "device_count": start.get("device_count"),
                        "tflops": end.get("tflops"), "relative_error": end.get("relative_error")}
    shared = []
    for k, jid in enumerate(pair):
        pj, ps, pe = results[jid]
        torch_job_checks(ctx, "the --gpu-share 0.5 job %d" % jid, pj, ps, pe, problems, share=500)
        shared.append({"id": jid, "state": pj["state"], "placement": pj.get("placement"),
                       "start_us": pj.get("start_time_us"), "end_us": pj.get("end_time_us"),
                       "tflops": pe.get("tflops")})
    details["share"] = shared
    a, b = results[pair[0]][0], results[pair[1]][0]
    if a["state"] == b["state"] == "SUCCEEDED":
        if not (max(a["start_time_us"], b["start_time_us"]) < min(a["end_time_us"], b["end_time_us"])):
            problems.append("the two halves did not run at the same time")
        if ctx.gpu_count == 1 and a["placement"][0]["gpu_uuids"] != b["placement"][0]["gpu_uuids"]:
            problems.append("the two halves were not placed on the one GPU")
        for x in (a, b):
            if x["placement"][0].get("gpu_milli") != 500:
                problems.append("job %d holds %s thousandths, not 500" % (x["id"], x["placement"][0].get("gpu_milli")))
    # Used GPU-hours, from the agent's telemetry: above zero once a sample came in. On
    # the shared GPU each half is charged what its own processes used, so the halves'
    # figures also say that the agent attributed their processes to them.
    deadline = time.time() + 15
    labels = {whole: "gpus1", pair[0]: "share %d" % pair[0], pair[1]: "share %d" % pair[1]}
    used = {}
    while True:
        used = {labels[jid]: (job(ctx, jid).get("gpu_util") or {}).get("used_gpu_hours")
                for jid in labels}
        if all((u or 0) > 0 for u in used.values()) or time.time() > deadline:
            break
        time.sleep(0.5)
    details["used_gpu_hours"] = used
    for label, u in used.items():
        if not u or u <= 0:
            problems.append("the %s job's used GPU-hours are %s, not above zero" % (label, u))
    used = used["gpus1"]
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    return PASS, ("--gpus 1 job saw exactly its GPU %s and did %s TFLOPS on %s; the --gpu-share 0.5 pair "
                  "ran together on %s; used GPU-hours %.6f") % (
        j["placement"][0]["gpu_uuids"][0], dev_str(end.get("tflops")), start.get("device"),
        a["placement"][0]["gpu_uuids"][0] if a.get("placement") else "?", used), details


def check_isolation(ctx):
    need_pool(ctx)
    if ctx.pool.get("no_standin"):
        raise Skip(ctx.pool["no_standin"])
    d = ctx.dir("isolation")
    rc, out, err = run(ctx.gpupool("gpus", "--json"), env=ctx.kit_env, timeout=30)
    if rc != 0:
        raise CheckError("gpupool gpus --json failed: %s" % tail(err, 500))
    nodes = {g["uuid"]: g["device_nodes"][0] for g in json.loads(out).get("gpus", [])
             if g.get("device_nodes")}
    if not nodes:
        raise CheckError("discovery names no GPU device node")
    argv = [ctx.python_self, ctx.job_script, "open", ",".join("%s=%s" % kv for kv in sorted(nodes.items()))]
    without = submit(ctx, "nodecheck-no-gpu", [], argv)["id"]
    with_gpu = submit(ctx, "nodecheck-gpu", ["--gpus", "1"], argv)["id"]
    problems = []
    details = {"device_nodes": nodes, "jobs": {"without_gpu": without, "with_gpu": with_gpu}}
    res = {}
    for jid in (without, with_gpu):
        wait_job(ctx, jid, FINAL, 40)
        j = save_job(ctx, d, jid)
        res[jid] = (j, events(logs(ctx, jid)).get("open"))
    for label, jid in (("without_gpu", without), ("with_gpu", with_gpu)):
        j, ev = res[jid]
        details[label] = {"state": j["state"], "reason": j.get("reason"),
                          "isolation": isolation_note(ctx, jid), "open": ev}
        if j["state"] != "SUCCEEDED" or ev is None:
            problems.append("the job %s ended %s without reporting: %s %s" % (
                label.replace("_", " "), j["state"], j.get("reason"), tail(logs(ctx, jid, "stderr"), 300)))
            continue
        granted = [x for x in ev["devices"] if x["granted"]]
        if len(granted) != (0 if label == "without_gpu" else 1):
            problems.append("the job %s was given %d of the GPUs (CUDA_VISIBLE_DEVICES=%r)" % (
                label.replace("_", " "), len(granted), (ev.get("env") or {}).get("CUDA_VISIBLE_DEVICES")))
        for x in ev["devices"]:
            if not x["granted"]:
                if x.get("opened"):
                    problems.append("the job %s opened %s, a GPU it was not given" % (
                        label.replace("_", " "), x["path"]))
                elif x.get("errno") != errno.EPERM:
                    problems.append("the job %s could not open %s, but for %s (%s), not the cgroup's "
                                    "EPERM" % (label.replace("_", " "), x["path"], x.get("errno_name"),
                                               x.get("error")))
            elif ctx.fake:
                # No driver backs the stand-in node: the cgroup let the open through when
                # it fails for anything but EPERM/EACCES (ENXIO).
                if not x.get("opened") and x.get("errno") in (errno.EPERM, errno.EACCES):
                    problems.append("the job with the GPU was refused %s: %s" % (x["path"], x.get("error")))
            elif not x.get("opened"):
                problems.append("the job with the GPU could not open its %s: %s (%s)" % (
                    x["path"], x.get("errno_name"), x.get("error")))
        if label == "without_gpu" and (ev.get("env") or {}).get("CUDA_VISIBLE_DEVICES") != "":
            problems.append("the job without GPU had CUDA_VISIBLE_DEVICES=%r" % (
                (ev.get("env") or {}).get("CUDA_VISIBLE_DEVICES")))
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    mine = [x for x in res[with_gpu][1]["devices"] if x["granted"]][0]
    got = "opened its %s" % mine["path"] if mine.get("opened") else \
        "got past the cgroup on %s (%s: no driver behind the stand-in node)" % (mine["path"], mine.get("errno_name"))
    return PASS, "a job without GPU got EPERM on %s (%s); a job with a GPU %s%s" % (
        ", ".join(sorted(nodes.values())), details["without_gpu"]["isolation"] or "?", got,
        " and EPERM on the others" if len(nodes) > 1 else ""), details


SHARE_CAP_GIB = 2  # each enforcement job's --gpu-mem


def check_enforcement(ctx):
    """Three --gpu-mem shares on one GPU: under MPS the one that asks for three times its cap
    gets an out-of-memory error near the cap (not a crash or a hang), so does one that drops
    its CUDA_MPS_* variables first (the control daemon's ceiling), and the other, running
    at the same time, carries on."""
    need_pool(ctx)
    need_torch(ctx)
    if ctx.fake:
        raise Skip("the memory cap is enforced by a real GPU's MPS server; fake mode has none")
    d = ctx.dir("enforcement")
    cap = "%dG" % SHARE_CAP_GIB
    greedy = submit(ctx, "nodecheck-greedy", ["--gpu-mem", cap],
                    [ctx.torch_python, ctx.job_script, "alloc", str(3 * SHARE_CAP_GIB), "4"])["id"]
    steady = submit(ctx, "nodecheck-steady", ["--gpu-mem", cap],
                    [ctx.torch_python, ctx.job_script, "alloc", "1", "8"])["id"]
    # A share that drops its MPS variables before CUDA starts: the GPU's control daemon
    # still holds it to the largest share on the GPU (docs/sharing.md, "MPS").
    defiant = submit(ctx, "nodecheck-defiant", ["--gpu-mem", cap],
                     ["env", "-u", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "-u",
                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ctx.torch_python, ctx.job_script,
                      "alloc", str(3 * SHARE_CAP_GIB), "4"])["id"]
    follow_jobs(ctx, [greedy, steady, defiant], 45)
    res = {}
    for label, jid in (("greedy", greedy), ("steady", steady), ("defiant", defiant)):
        j = save_job(ctx, d, jid)
        ev = events(logs(ctx, jid))
        if ev.get("start", {}).get("torch", "") is None:
            raise CheckError("job %d could not import torch: %s" % (jid, ev["start"].get("error")))
        res[label] = {"id": jid, "state": j["state"], "reason": j.get("reason"),
                      "placement": j.get("placement"), "start_us": j.get("start_time_us"),
                      "end_us": j.get("end_time_us"), "env": ev.get("start", {}).get("env"),
                      "alloc": ev.get("alloc"), "end": ev.get("end"),
                      "stderr": tail(logs(ctx, jid, "stderr"), 400)}
    details = {"jobs": res, "cap_gib": SHARE_CAP_GIB}
    mode = (res["greedy"]["env"] or {}).get("GPUPOOL_GPU_ENFORCEMENT")
    details["mode"] = mode
    if mode == "none":
        raise Skip("this node does not enforce GPU shares (GPUPOOL_GPU_ENFORCEMENT=none: no "
                   "nvidia-cuda-mps-control found, or the GPU is in MIG mode; docs/sharing.md)")
    problems = []
    if mode != "mps":
        problems.append("the share saw GPUPOOL_GPU_ENFORCEMENT=%r, not mps" % mode)
    for label in ("greedy", "steady"):
        r = res[label]
        env = r["env"] or {}
        if r["state"] != "SUCCEEDED":
            problems.append("the %s share ended %s: %s %s" % (label, r["state"], r["reason"], r["stderr"]))
        want = "0=%dM" % (SHARE_CAP_GIB * 1024)
        if env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") != want:
            problems.append("the %s share saw CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%r, not %s" % (
                label, env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), want))
        if not r["end"] or not r["end"].get("products"):
            problems.append("the %s share did no work after its allocation" % label)
    g, st = res["greedy"]["alloc"] or {}, res["steady"]["alloc"] or {}
    if g.get("result") != "oom":
        problems.append("the greedy share asked for %d GiB under a %d GiB cap and got %s (%s MiB)" % (
            3 * SHARE_CAP_GIB, SHARE_CAP_GIB, g.get("result"), g.get("allocated_mib")))
    elif g.get("allocated_mib", 0) > SHARE_CAP_GIB * 1024:
        problems.append("the greedy share got %s MiB, past its %d GiB cap" % (g.get("allocated_mib"), SHARE_CAP_GIB))
    if st.get("result") != "ok":
        problems.append("the steady share could not allocate 1 GiB: %s" % st)
    dv = res["defiant"]
    df = dv["alloc"] or {}
    if dv["state"] != "SUCCEEDED":
        problems.append("the share without MPS variables ended %s: %s %s" % (
            dv["state"], dv["reason"], dv["stderr"]))
    if (dv["env"] or {}).get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"):
        problems.append("the share meant to drop its MPS variables still had them")
    if df.get("result") != "oom" or df.get("allocated_mib", 0) > SHARE_CAP_GIB * 1024:
        problems.append("the share that dropped its MPS variables asked for %d GiB and got %s "
                        "(%s MiB): the control daemon's ceiling did not hold it" % (
                            3 * SHARE_CAP_GIB, df.get("result"), df.get("allocated_mib")))
    details["defiant_alloc"] = df
    a, b = res["greedy"], res["steady"]
    together = a["start_us"] and b["start_us"] and max(a["start_us"], b["start_us"]) < min(
        a["end_us"] or 0, b["end_us"] or 0)
    same_gpu = (a["placement"] or [{}])[0].get("gpu_uuids") == (b["placement"] or [{}])[0].get("gpu_uuids")
    details["together"], details["same_gpu"] = bool(together), same_gpu
    if ctx.gpu_count == 1 and not (together and same_gpu):
        problems.append("the two shares did not run on the one GPU at the same time")
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    return PASS, ("MPS: a share capped at %d GiB that asked for %d got an out-of-memory error at %s MiB "
                  "(free %s of %s MiB as CUDA saw it), one that dropped its MPS variables at %s "
                  "MiB, while the share beside them on the same GPU ran %s products") % (
        SHARE_CAP_GIB, 3 * SHARE_CAP_GIB, g.get("allocated_mib"), g.get("free_mib"),
        g.get("total_mib"), df.get("allocated_mib"), (b["end"] or {}).get("products")), details


def driver_has_nvml_memory_limits(ctx):
    """Whether the libnvidia-ml the kit's gpupool loads exports nvmlDeviceSetMemoryLimits_v1
    (R615+), the call NVML's per-cgroup memory limits need (docs/sharing.md)."""
    import ctypes
    try:
        lib = ctypes.CDLL(ctx.kit_env.get("GPUPOOL_NVML_LIBRARY", "libnvidia-ml.so.1"))
    except OSError:
        return False
    return hasattr(lib, "nvmlDeviceSetMemoryLimits_v1")


class OwnPool:
    """A pool of a check's own (`gpupool up` with `flags`, its state and log in `d`), for
    modes the kit's shared pool does not run: `with OwnPool(ctx, d, flags, what) as sub:`
    gives a context whose jobs go to it; the pool is stopped on the way out."""

    def __init__(self, ctx, d, flags, what):
        self.ctx, self.d, self.flags, self.what = ctx, d, flags, what

    def __enter__(self):
        state = os.path.join(self.d, "state")
        os.makedirs(state, exist_ok=True)
        sock = os.path.join(state, "gpupool.sock")
        log_path = os.path.join(self.d, "pool.log")
        log = open(log_path, "ab")
        self.pool = subprocess.Popen(
            self.ctx.gpupool("up", "--config", "", "--state-dir", state, "--port", "0", *self.flags),
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=self.ctx.kit_env,
            start_new_session=True)
        log.close()
        try:
            deadline = time.time() + 30
            while not os.path.exists(sock) or api(sock, "GET", "/v1/nodes", timeout=5)[0] != 200:
                if self.pool.poll() is not None or time.time() > deadline:
                    raise CheckError("the %s pool did not come up: %s" % (
                        self.what, tail(open(log_path, errors="replace").read(), 600)))
                time.sleep(0.2)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return type(self.ctx)(dict(self.ctx.__dict__, pool={"socket": sock, "state_dir": state}))

    def __exit__(self, *exc):
        self.pool.terminate()
        try:
            self.pool.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.pool.kill()
        return False


def check_nvml_memory_limit(ctx):
    """A --gpu-mem share held by NVML's per-cgroup memory limits (`dmem` through NVML): a pool
    of its own runs with --gpu-enforcement dmem and no dmem.capacity, so NVML holds the GPU;
    the share that asks for three times its cap gets an out-of-memory error at the cap."""
    need_torch(ctx)
    if ctx.fake:
        raise Skip("the cap is enforced by a real driver; fake mode has none")
    if os.geteuid() != 0:
        raise Skip("the pool's jobs set NVML limits as root: run the kit as root")
    if not driver_has_nvml_memory_limits(ctx):
        raise Skip("the driver's libnvidia-ml has no nvmlDeviceSetMemoryLimits_v1 (R615+)")
    d = ctx.dir("nvml-memory-limit")
    flags = ("--gpu-enforcement", "dmem", "--dmem-capacity", os.path.join(d, "no-dmem.capacity"),
             "--telemetry-interval", "0")
    with OwnPool(ctx, d, flags, "dmem") as sub:
        jid = submit(sub, "nodecheck-nvml", ["--gpu-mem", "%dG" % SHARE_CAP_GIB],
                     [ctx.torch_python, ctx.job_script, "alloc", str(3 * SHARE_CAP_GIB), "2"])["id"]
        wait_job(sub, jid, FINAL, 45)
        j = save_job(sub, d, jid)
        ev = events(logs(sub, jid))
    mode = (ev.get("start", {}).get("env") or {}).get("GPUPOOL_GPU_ENFORCEMENT")
    a = ev.get("alloc") or {}
    details = {"job": jid, "state": j["state"], "reason": j.get("reason"), "mode": mode, "alloc": a,
               "isolation": j.get("isolation")}
    problems = []
    if j["state"] != "SUCCEEDED":
        problems.append("the share ended %s: %s" % (j["state"], j.get("reason")))
    if mode != "dmem":
        problems.append("the share saw GPUPOOL_GPU_ENFORCEMENT=%r, not dmem" % mode)
    if a.get("result") != "oom" or a.get("allocated_mib", 0) > SHARE_CAP_GIB * 1024:
        problems.append("the share asked for %d GiB under a %d GiB NVML cap and got %s (%s MiB)" % (
            3 * SHARE_CAP_GIB, SHARE_CAP_GIB, a.get("result"), a.get("allocated_mib")))
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    return PASS, ("dmem (NVML): a share capped at %d GiB that asked for %d got an out-of-memory error "
                  "at %s MiB") % (SHARE_CAP_GIB, 3 * SHARE_CAP_GIB, a.get("allocated_mib")), details


def job_peak_mib(ctx, jid):
    """The controller's peak GPU memory of a job (its telemetry points), or None."""
    st, body = api(ctx.pool["socket"], "GET", "/v1/telemetry?job=%d&since_ms=0" % jid)
    if st != 200:
        return None
    peaks = [p.get("mem_used_mib") for p in body.get("points", []) if p.get("mem_used_mib") is not None]
    return max(peaks) if peaks else None


def check_gpu_mem_watch(ctx):
    """The agent's GPU memory watch on a real GPU (docs/sharing.md): a pool of its own with
    shares unenforced (--gpu-enforcement none) and telemetry every second. A --gpu-mem 2G
    share that takes and holds 6 GiB must be killed and FAILED by the watch; one that holds
    exactly its 2 GiB of tensors (plus its CUDA context, which the default 1 GiB slack is
    for) must run to its end, as must one that holds 1 GiB."""
    need_torch(ctx)
    if ctx.fake:
        raise Skip("the watch reads a real GPU's per-process memory; fake mode lists none for "
                   "the kit's jobs")
    if os.geteuid() != 0:
        raise Skip("the pool's jobs need root to run in cgroups the agent can tell apart")
    d = ctx.dir("gpu-mem-watch")
    cap = "%dG" % SHARE_CAP_GIB
    with OwnPool(ctx, d, ("--gpu-enforcement", "none", "--telemetry-interval", "1"), "unenforced") as sub:
        jobs = {label: submit(sub, "nodecheck-watch-" + label, ["--gpu-mem", cap],
                              [ctx.torch_python, ctx.job_script, "hold", str(gib), str(secs)])["id"]
                for label, gib, secs in (("greedy", 3 * SHARE_CAP_GIB, 25),
                                         ("at-ask", SHARE_CAP_GIB, 10), ("under", 1, 10))}
        res = {}
        for label, jid in jobs.items():
            j = wait_job(sub, jid, FINAL, 45)
            save_job(sub, d, jid)
            ev = events(logs(sub, jid))
            res[label] = {"id": jid, "state": j["state"], "reason": j.get("reason"),
                          "alloc": ev.get("alloc"), "end": ev.get("end"),
                          "mode": (ev.get("start", {}).get("env") or {}).get("GPUPOOL_GPU_ENFORCEMENT"),
                          "peak_mib": job_peak_mib(sub, jid)}
    details = {"jobs": res, "cap_gib": SHARE_CAP_GIB}
    problems = []
    g = res["greedy"]
    if g["mode"] != "none":
        problems.append("the shares saw GPUPOOL_GPU_ENFORCEMENT=%r, not none" % g["mode"])
    if g["state"] != "FAILED" or "GPU memory watch" not in (g["reason"] or ""):
        problems.append("the share holding %d GiB of its %d GiB ended %s: %s" % (
            3 * SHARE_CAP_GIB, SHARE_CAP_GIB, g["state"], g["reason"]))
    if g["end"]:
        problems.append("the share holding %d GiB ran to its end: the watch did not stop it" % (
            3 * SHARE_CAP_GIB))
    for label in ("at-ask", "under"):
        r = res[label]
        if r["state"] != "SUCCEEDED" or not r["end"]:
            problems.append("the %s share ended %s: %s" % (label, r["state"], r["reason"]))
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    return PASS, ("the GPU memory watch killed a %d GiB share holding %d GiB (%s); a share holding "
                  "its %d GiB (peak %s MiB with its context) and one holding 1 GiB (peak %s MiB) "
                  "ran to their ends") % (SHARE_CAP_GIB, 3 * SHARE_CAP_GIB, g["reason"], SHARE_CAP_GIB,
                                          res["at-ask"]["peak_mib"], res["under"]["peak_mib"]), details


def xid_gauge(ctx, uuid):
    """The controller's DCGM_FI_DEV_XID_ERRORS for the GPU (its last Xid), or None."""
    st, body = api(ctx.pool["socket"], "GET", "/metrics")
    if st != 200:
        return None
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
    for line in text.splitlines():
        if line.startswith("DCGM_FI_DEV_XID_ERRORS{") and 'UUID="%s"' % uuid in line:
            try:
                return int(float(line.rsplit(" ", 1)[1]))
            except ValueError:
                return None
    return None


HW_FIELDS = ("retired_pages", "retired_pages_pending", "remapped_rows", "remapped_rows_pending",
             "remapped_rows_failed", "hw_slowdown")
# nvidia-smi's names for the readings the agent's default check takes from NVML.
SMI_HW = {"retired_pages_pending": "retired_pages.pending",
          "remapped_rows_pending": "remapped_rows.pending",
          "remapped_rows_failed": "remapped_rows.failure"}


def smi_flag(text):
    t = text.strip().lower()
    if t in ("yes", "active", "1"):
        return True
    if t in ("no", "not active", "0"):
        return False
    return None  # [N/A], [Not Supported], unknown


def hardware_readings(ctx, d):
    """The default health check's readings (issue 29: retired and remapped pages, HW
    slowdown), as the agent samples them through NVML, against nvidia-smi's. Returns
    (details, problems)."""
    rc, out, err = run(ctx.gpupool("gpus", "--sample", "1"), env=ctx.kit_env, timeout=60,
                       save=os.path.join(d, "hw-sample"))
    ours = {}
    for line in out.splitlines():
        try:
            for g in json.loads(line).get("samples", []):
                ours[g.get("uuid")] = {k: g[k] for k in HW_FIELDS if k in g}
        except ValueError:
            continue
    details = {"gpupool": ours}
    problems = []
    if rc != 0 or not ours:
        return details, ["gpupool gpus --sample gave no samples: %s" % tail(err, 300)]
    if not any(ours.values()):
        problems.append("NVML gave none of the hardware health readings (%s) for any GPU" %
                        ", ".join(HW_FIELDS))
    smi = ctx.smi()
    fields = ["uuid"] + list(SMI_HW.values())
    src, sout, serr = run(smi + ["--query-gpu=" + ",".join(fields), "--format=csv,noheader"],
                          env=smi_env(ctx), timeout=30, save=os.path.join(d, "hw-nvidia-smi"))
    theirs = {}
    if src == 0:
        for row in csv_rows(sout):
            if len(row) == len(fields):
                theirs[row[0]] = {k: smi_flag(row[1 + i]) for i, k in enumerate(SMI_HW)}
    details["nvidia_smi"] = theirs
    for uuid, mine in ours.items():
        for key, value in (theirs.get(uuid) or {}).items():
            if value is not None and key in mine and bool(mine[key]) != value:
                problems.append("GPU %s: gpupool reads %s=%s, nvidia-smi %s" % (
                    uuid, key, mine[key], value))
    return details, problems


def check_health(ctx):
    """A real fault on the GPU: a job's device-side assert, which the driver reports as
    Xid 43 (an application error). The agent's event set must see it, the controller must
    record it, the health policy must keep the GPU in service, and the next job must run."""
    need_pool(ctx)
    need_torch(ctx)
    if ctx.fake:
        raise Skip("the fault is a real GPU's (a device-side assert, Xid 43); the fake's scripted "
                   "Xid is checked by the xid check and CI's gpu_health test")
    d = ctx.dir("health")
    # The shipped health program against the real driver: a node fit to take work passes.
    program = os.path.join(ctx.kit, "share", "gpupool-health-check")
    rc, out, err = run([program], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
                       timeout=60, save=os.path.join(d, "health-check"))
    program_result = {"exit": rc, "output": tail(out + err, 800)}
    bad = submit(ctx, "nodecheck-fault", ["--gpus", "1"], [ctx.torch_python, ctx.job_script, "fault"])["id"]
    j = wait_job(ctx, bad, FINAL, 40)
    save_job(ctx, d, bad)
    ev = events(logs(ctx, bad))
    uuid = j["placement"][0]["gpu_uuids"][0] if j.get("placement") else None
    details = {"fault_job": {"id": bad, "state": j["state"], "reason": j.get("reason"),
                             "fault": ev.get("fault")}, "gpu": uuid, "health_program": program_result}
    problems = []
    try:
        details["hardware"], hw_problems = hardware_readings(ctx, d)
        problems += hw_problems
    except Exception as e:  # the rest of the check still runs and says what it saw
        problems.append("reading the hardware health fields failed: %r" % e)
    if rc != 0 or " bad" in out:
        problems.append("the health program (share/gpupool-health-check) did not pass: exit %s: %s" % (
            rc, tail(out + err, 300)))
    if j["state"] != "FAILED" or not (ev.get("fault") or {}).get("error"):
        problems.append("the faulting job ended %s (%s) without CUDA reporting the assert" % (
            j["state"], j.get("reason")))
    ended = time.time()
    xid = None
    while uuid and time.time() < ended + 15:
        xid = xid_gauge(ctx, uuid)
        if xid == 43:
            break
        time.sleep(0.5)
    details["xid_gauge"] = xid
    details["xid_seen_s"] = round(time.time() - ended, 1)
    if xid != 43:
        problems.append("the controller's last Xid of %s is %s, not 43, 15 s after the fault" % (uuid, xid))
    st, nodes = api(ctx.pool["socket"], "GET", "/v1/nodes")
    health = None
    if st == 200:
        for n in nodes.get("nodes", []):
            for g in n.get("gpus", []):
                if g.get("uuid") == uuid:
                    health = g.get("health")
    details["health"] = health
    if health and health.get("state") not in (None, "healthy"):
        problems.append("the health policy took the GPU out of service after an application's "
                        "Xid 43: %s" % health)
    after = submit(ctx, "nodecheck-after-fault", ["--gpus", "1"],
                   [ctx.torch_python, ctx.job_script, "work", "1"])["id"]
    aj = wait_job(ctx, after, FINAL, 40)
    save_job(ctx, d, after)
    details["after_job"] = {"id": after, "state": aj["state"], "reason": aj.get("reason")}
    if aj["state"] != "SUCCEEDED":
        problems.append("the job after the fault ended %s: %s" % (aj["state"], aj.get("reason")))
    if problems:
        details["problems"] = problems
        return FAIL, "; ".join(problems[:3]), details
    return PASS, ("the health program passed, the hardware health readings agree with nvidia-smi; "
                  "a job's device-side assert made Xid 43 on %s: the "
                  "controller had it %.1f s after the job ended, the health policy kept the GPU in "
                  "service (an application error), and the next job ran") % (
                      uuid, details["xid_seen_s"]), details


CHECK_FUNCS = {"discovery": check_discovery, "real-driver-tests": check_real_driver_tests,
               "xid": check_xid, "telemetry": check_telemetry, "pool-job": check_pool_job,
               "isolation": check_isolation, "enforcement": check_enforcement, "health": check_health,
               "nvml-memory-limit": check_nvml_memory_limit, "gpu-mem-watch": check_gpu_mem_watch}
