#!/usr/bin/env bash
# ctest node_check_kit (issue 26): builds the node-check kit with `make node-check-kit` in
# a fresh clone of the source tree whose build is this one (the Makefile's relative
# paths, as a user runs it), checks the kit (size under 48 MiB, contents, every library
# beyond glibc inside it), then runs its run.sh against the fakes as a machine without a
# GPU would: exit 0, a report naming every check, each marked fake, the checks this host
# can run passing, the pool cleaned up. Then once more with a fake nvidia-smi that
# disagrees with the fake NVML: the discovery check must fail, naming the fields; and with
# an nvidia-smi that shows a GPU the kit cannot see, which must be checked for real and fail.
#
#   packaging/node-check/test-kit.sh BUILD_DIR
#
# PyTorch: the jobs use /usr/bin/python3 when it imports torch (CPU only here), else the
# PyTorch parts are skipped with their reason. Without git or make (a source tarball),
# the kit is made with make-kit.sh directly.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
src=$(cd "$here/../.." && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-node-check-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

start=$(date +%s)
if git -C "$src" rev-parse --verify -q HEAD >/dev/null 2>&1 && command -v make >/dev/null; then
  # As in packaging/deb/test-deb.sh: the clone is HEAD plus the uncommitted changes to
  # tracked files; its build/release links to this build's entries, and `-o build` takes
  # that build as made (compiling the clone again would test nothing of the kit).
  clone="$tmp/clone"
  git clone -q "$src" "$clone" || fail "git clone $src failed"
  git -C "$clone" checkout -q --detach "$(git -C "$src" rev-parse HEAD)"
  git -C "$src" diff --binary HEAD >"$tmp/changes.diff"
  if [ -s "$tmp/changes.diff" ]; then
    git -C "$clone" apply --binary "$tmp/changes.diff" || fail "the uncommitted changes do not apply"
  fi
  # Untracked files of the kit itself (a new file not yet committed) come along too.
  (cd "$src" && git ls-files --others --exclude-standard -- packaging/node-check Makefile) |
    while read -r f; do mkdir -p "$clone/$(dirname "$f")" && cp -p "$src/$f" "$clone/$f"; done
  mkdir -p "$clone/build/release"
  for entry in "$build"/*; do ln -s "$entry" "$clone/build/release/"; done
  if ! (cd "$clone" && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -o build node-check-kit) \
    >"$tmp/make-kit.log" 2>&1; then
    cat "$tmp/make-kit.log" >&2
    fail "make node-check-kit in a fresh clone failed"
  fi
  kit="$clone/build/node-check"
  how="make node-check-kit in a fresh clone"
else
  bash "$here/make-kit.sh" "$build" "$tmp/node-check" >"$tmp/make-kit.log" 2>&1 ||
    { cat "$tmp/make-kit.log" >&2; fail "make-kit.sh failed"; }
  kit="$tmp/node-check"
  how="make-kit.sh ($src is no git checkout, or make is missing)"
fi
last=$(tail -n 1 "$tmp/make-kit.log")
case "$last" in "$kit "*) ;; *) fail "the kit build's last line does not name the kit: $last" ;; esac
size=$(du -sb "$kit" | cut -f1)
[ "$size" -le $((48 * 1024 * 1024)) ] || fail "the kit is $size bytes, over 48 MiB"
echo "built the kit with $how in $(($(date +%s) - start)) s: $size bytes ($((size / 1024 / 1024)) MiB)"

# Contents: the binaries, a test binary with real-driver cases, run.sh, the fake.
for f in bin/gpupool bin/gpupool-agent-shim bin/gpupool-exec tests/nvml_backend_test run.sh \
  fake/libnvidia-ml.so.1 fake/nvidia-smi share/nodecheck.py share/nodecheck_lib.py \
  share/nodecheck_checks.py share/torch_job.py; do
  [ -x "$kit/$f" ] || { [ -f "$kit/$f" ] && [ "${f##*.}" = py ]; } || fail "the kit lacks $f"
done
"$kit/tests/nvml_backend_test" --gtest_list_tests | grep -q NvmlRealDriverTest ||
  fail "the kit's nvml_backend_test has no NvmlRealDriverTest"
# Every library beyond glibc is in lib/: with LD_LIBRARY_PATH=lib, ldd resolves each
# ELF's libraries to lib/ or to glibc's own; no glibc library is bundled.
glibc='^(ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv)\.so'
for lib in "$kit"/lib/*; do
  [[ "$(basename "$lib")" =~ $glibc ]] && fail "the kit bundles glibc's $(basename "$lib")"
done
[ -n "$(ls "$kit/lib")" ] || fail "the kit's lib/ is empty"
for elf in "$kit"/bin/* "$kit"/tests/* "$kit/fake/libnvidia-ml.so.1"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [ "$path" != "not" ] || fail "$elf: $name not found"
    [[ "$name" =~ $glibc ]] && continue
    case "$path" in "$kit/lib/"* | "$kit/fake/"*) ;; *) fail "$elf loads $name from $path, outside the kit" ;; esac
  done < <(LD_LIBRARY_PATH="$kit/lib" ldd "$elf")
done
echo "contents: ok ($(ls "$kit/lib" | wc -l) libraries in lib/)"

# The run against the fakes.
py_args=()
if /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
  # Given as a link, as a virtual environment's python is: the jobs must run the link
  # (whose folder makes the environment's packages importable), not the file behind it.
  mkdir -p "$tmp/venv/bin"
  ln -s /usr/bin/python3 "$tmp/venv/bin/python3"
  py_args=(--python "$tmp/venv/bin/python3")
  torch_note="PyTorch from /usr/bin/python3, on the CPU"
else
  torch_note="no PyTorch: the job checks skip"
fi
out="$tmp/report"
t0=$(date +%s.%N)
rc=0
# (A variable standing for a secret in the caller's environment: no file of the report
# may hold it, as reports get shared.)
NODECHECK_TEST_SECRET=s3cr3t-9f7e2d "$kit/run.sh" --out "$out" --mode fake "${py_args[@]}" \
  >"$tmp/run.log" 2>&1 || rc=$?
t1=$(date +%s.%N)
cat "$tmp/run.log"
[ "$rc" -eq 0 ] || fail "run.sh --mode fake exited $rc"
if grep -rl s3cr3t-9f7e2d "$out"; then fail "the report holds the caller's environment"; fi
python3 - "$out" "$torch_note" <<'PY' || fail "the report is not what it should be"
import json, os, sys
out, torch_note = sys.argv[1:]
r = json.load(open(os.path.join(out, "report.json")))
names = [c["name"] for c in r["checks"]]
want = ["discovery", "real-driver-tests", "xid", "telemetry", "pool-job", "isolation",
        "enforcement", "health", "nvml-memory-limit", "gpu-mem-watch"]
assert names == want, names
assert r["mode"] == "fake" and r["fake"] is True, r["mode"]
root = os.geteuid() == 0
torch = torch_note.startswith("PyTorch")
expect = {"discovery": "pass", "real-driver-tests": "pass", "xid": "pass",
          "telemetry": "pass" if root and torch else "skip",
          "pool-job": "pass" if root and torch else "skip",
          "isolation": "pass" if root else "skip",
          "enforcement": "skip", "health": "skip", "nvml-memory-limit": "skip",
          "gpu-mem-watch": "skip"}
bad = []
for c in r["checks"]:
    for k in ("name", "status", "seconds", "details"):
        assert k in c, (c["name"], k)
    assert c["fake"] is True, c["name"]
    assert c["details"].get("summary"), c["name"]
    if c["status"] != expect[c["name"]]:
        bad.append("%s: %s, expected %s: %s" % (c["name"], c["status"], expect[c["name"]],
                                                 c["details"]["summary"]))
assert not bad, bad
md = open(os.path.join(out, "report.md")).read()
assert "FAKE MODE" in md
for n in want:
    assert "## %s:" % n in md, n
fixture = os.path.join(out, r["checks"][0]["details"]["fixture"])
node = json.load(open(fixture))
assert node["schema"] == "gpupool.node/v1" and len(node["gpus"]) == 1, node
assert r["checks"][0]["details"]["replay"] == "byte-identical"
for f in ("discovery/nvidia-smi-query-gpu.out", "xid/samples.jsonl", "real-driver-tests/gtest.json"):
    assert os.path.getsize(os.path.join(out, f)) > 0, f
if root and torch:
    for f in ("telemetry/gpupool-samples.jsonl", "telemetry/nvidia-smi-dmon.txt"):
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    p = r["checks"][3]["details"]["process"]
    assert p["rounds_attributed_to_job"] > 0, p
    assert r["checks"][4]["details"]["used_gpu_hours"]["gpus1"] > 0
    assert r["torch"]["python"].endswith("/venv/bin/python3"), r["torch"]
if root:
    iso = r["checks"][5]["details"]
    for label in ("without_gpu", "with_gpu"):
        assert iso[label]["isolation"], (label, "no supervisor record's isolation note", iso[label])
pool = r.get("pool") or {}
if pool.get("state_dir"):
    assert not os.path.exists(pool["state_dir"]), "the pool's state directory was left behind"
    for pid in os.listdir("/proc"):
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read()
        except OSError:
            continue
        assert pool["state_dir"].encode() not in argv, "a process of the pool outlived it: " + pid
print("report: ok (%s)" % ", ".join("%s %s" % (c["name"], c["status"]) for c in r["checks"]))
PY
echo "run.sh against the fakes: $(python3 -c "print('%.1f' % ($t1 - $t0))") s ($torch_note)"

# A fake nvidia-smi that disagrees with the fake NVML: the discovery check fails and names
# each field that differs; run.sh exits 1.
python3 - "$kit/fake/scenario.json" "$tmp/other.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["driver_version"] = "580.00.01"
s["devices"][0]["name"] = "NVIDIA H100 PCIe"
s["devices"][0]["memory_total"] //= 2
json.dump(s, open(sys.argv[2], "w"))
PY
# (--mode auto here, so that a machine without a GPU is found to be one; a CI host with a
# GPU would run it for real, where the fake nvidia-smi plays no part.)
mode=auto
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then mode=fake; fi
rc=0
FAKE_NVIDIA_SMI_SCENARIO="$tmp/other.json" "$kit/run.sh" --out "$tmp/other" --only discovery \
  --mode "$mode" >"$tmp/other.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$tmp/other.log"; fail "a disagreeing nvidia-smi: run.sh exited $rc, not 1"; }
python3 - "$tmp/other/report.json" <<'PY' || fail "the disagreement is not reported as it should be"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["mode"] == "fake", r["mode"]
assert [c["name"] for c in r["checks"]] == ["discovery"]
c = r["checks"][0]
assert c["status"] == "fail", c
text = " ".join(c["details"]["problems"])
for field in ("name", "memory_total_mib", "driver"):
    assert " %s:" % field in text, (field, text)
assert "pci_bus_id" not in text and "compute_capability" not in text, text
PY
echo "a disagreeing nvidia-smi fails discovery: ok"

# A machine whose nvidia-smi shows a GPU that the kit's gpupool cannot see (here: no
# libnvidia-ml at all) is checked for real and fails, never passed in fake mode.
mkdir -p "$tmp/path"
cp "$kit/fake/nvidia-smi" "$tmp/path/nvidia-smi"
rc=0
PATH="$tmp/path:$PATH" FAKE_NVML_SCENARIO="$kit/fake/scenario.json" "$kit/run.sh" \
  --out "$tmp/blind" --only discovery >"$tmp/blind.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$tmp/blind.log"; fail "a GPU gpupool cannot see: run.sh exited $rc, not 1"; }
python3 - "$tmp/blind/report.json" <<'PY' || fail "a GPU gpupool cannot see is not reported as it should be"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["mode"] == "real" and r["probe"]["nvidia_smi_gpus"] == 1, (r["mode"], r["probe"])
c = r["checks"][0]
assert c["status"] == "fail" and not c["fake"], c
if r["probe"]["nvml_gpus"] == 0:
    assert "gpupool found no NVIDIA GPU" in c["details"]["summary"], c["details"]["summary"]
PY
echo "a GPU only nvidia-smi sees is checked for real and fails: ok"
