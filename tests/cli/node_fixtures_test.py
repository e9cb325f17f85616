#!/usr/bin/env python3
"""Every node captured on a real machine and committed under tests/fixtures/nodes/ (the
node check's discovery capture, docs/node-check.md) replays through `gpupool gpus
--fake`: byte-identical as JSON, and without an error in every other format. Exit 77
(skipped) while the folder holds no capture.

Usage: node_fixtures_test.py PATH_TO_GPUPOOL FIXTURES_DIR
"""
import json
import os
import subprocess
import sys

FORMATS = ["table", "classad", "gres", "cdi"]


def main(gpupool, folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith(".json")) if os.path.isdir(folder) else []
    if not files:
        print("SKIP: no node captures in %s yet (docs/node-check.md says how to add one)" % folder)
        return 77
    failures = []
    for name in files:
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            text = f.read()
        try:
            node = json.loads(text)
        except ValueError as e:
            failures.append("%s: not JSON: %s" % (name, e))
            continue
        if node.get("schema") != "gpupool.node/v1" or not node.get("gpus"):
            failures.append("%s: not a gpupool.node/v1 capture with GPUs" % name)
            continue
        r = subprocess.run([gpupool, "gpus", "--fake", path, "--json"], capture_output=True, timeout=60)
        if r.returncode != 0 or r.stdout != text:
            failures.append("%s: does not replay byte-identical (exit %d): %s" % (
                name, r.returncode, r.stderr.decode(errors="replace")[-300:]))
        for fmt in FORMATS:
            r = subprocess.run([gpupool, "gpus", "--fake", path, "--format", fmt], capture_output=True,
                               timeout=60)
            if r.returncode != 0 or not r.stdout:
                failures.append("%s: --format %s failed (exit %d): %s" % (
                    name, fmt, r.returncode, r.stderr.decode(errors="replace")[-300:]))
        print("%s: %d GPU(s), replayed in %d formats" % (name, len(node["gpus"]), len(FORMATS) + 1))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(os.path.abspath(sys.argv[1]), sys.argv[2]))
