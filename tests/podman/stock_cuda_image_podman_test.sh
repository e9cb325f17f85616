#!/usr/bin/env bash
# Issue 15 A.1, "stock CUDA images would not find the driver in a container": real podman,
# gpupool's CDI spec and its hook, and an image laid out as a stock CUDA image is (glibc,
# ldconfig, /etc/ld.so.conf including /etc/ld.so.conf.d, a linker cache).
#
# The driver is two stand-in libraries built by the tests with the driver's names and
# SONAMEs (libcuda.so.550.54.15 -> SONAME libcuda.so.1, libnvidia-ml likewise), described
# by a fake node file; the spec is `gpupool gpus --format cdi` of that node. Inside the
# container, as an unprivileged user: `ldconfig -p` must list libcuda.so.1 and
# libnvidia-ml.so.1, and dlopen("libcuda.so.1") must succeed. As a control, the same spec
# without its hook (what gpupool wrote before) must leave dlopen failing, so this test
# can tell the difference.
#
# Podman 4.3 reads specs only from /var/run/cdi and /etc/cdi: the spec goes to
# /var/run/cdi (tmpfs) under a kind naming this run, and is removed on exit. Podman's
# storage is private (--root/--runroot, vfs).
#
# Usage: stock_cuda_image_podman_test.sh GPUPOOL LIBCUDA LIBNVIDIA_ML DLOPEN_PROBE.
# Exit 77 = skipped (ctest SKIP_RETURN_CODE).
set -euo pipefail

[ $# -eq 4 ] || { echo "usage: $0 GPUPOOL LIBCUDA LIBNVIDIA_ML DLOPEN_PROBE" >&2; exit 2; }
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
for f in "$@"; do [ -e "$f" ] || fail "'$f' not found: build it first"; done
GPUPOOL=$(realpath "$1")
LIBCUDA=$(realpath "$2")
LIBNVML=$(realpath "$3")
PROBE=$(realpath "$4")
# Static binaries (static-pie too) list no libraries.
is_static() { ! ldd "$1" 2>/dev/null | grep -q '=>'; }

[ "$(id -u)" -eq 0 ] || skip "needs root (mknod and rootful podman)"
command -v podman >/dev/null || skip "podman is not installed: run scripts/install-deps.sh"
command -v runc >/dev/null || skip "runc is not installed: run scripts/install-deps.sh"
BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] && is_static "$BUSYBOX" ||
  skip "a static busybox is needed to build the test image (busybox-static)"
LDCONFIG=
for l in /sbin/ldconfig.real /sbin/ldconfig /usr/sbin/ldconfig; do
  if [ -x "$l" ] && is_static "$l"; then LDCONFIG=$l; break; fi
done
[ -n "$LDCONFIG" ] || skip "no static ldconfig on this host to put in the test image"
command -v python3 >/dev/null || skip "python3 is needed to edit the spec"

T=$(mktemp -d /tmp/gpupool-stock-cuda.XXXXXX)
chmod 755 "$T"
KIND="gpupool-stock-cuda-$$.example/gpu"
CONTROL_KIND="gpupool-stock-cuda-nohook-$$.example/gpu"
SPEC=/var/run/cdi/gpupool-stock-cuda-$$.json
CONTROL_SPEC=/var/run/cdi/gpupool-stock-cuda-nohook-$$.json
IMAGE="localhost/gpupool-stock-cuda-$$:1"
PODMAN=(podman --root "$T/storage" --runroot "$T/run" --storage-driver vfs)
cleanup() {
  rm -f "$SPEC" "$CONTROL_SPEC"
  "${PODMAN[@]}" rm --all --force --time 0 >/dev/null 2>&1 || true
  "${PODMAN[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$T"
}
trap cleanup EXIT

# --- stand-in device nodes and the fake node ------------------------------------------
mkdir -p "$T/dev"
major=$((16#$(stat -c %t /dev/null)))
minor=$((16#$(stat -c %T /dev/null)))
for n in nvidia0 nvidiactl nvidia-uvm nvidia-uvm-tools; do
  mknod -m 0666 "$T/dev/$n" c "$major" "$minor"
done
LIBDIR=$(dirname "$LIBCUDA")
cat > "$T/node.json" <<JSON
{
  "schema": "gpupool.node/v1",
  "hostname": "stock-cuda-test",
  "drivers": {"nvidia": {"version": "550.54.15", "runtime_version": "12.4",
              "libraries": ["$LIBCUDA", "$LIBNVML"],
              "control_nodes": ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]}},
  "gpus": [
    {"vendor": "nvidia", "index": 0, "name": "NVIDIA H100 80GB HBM3",
     "uuid": "GPU-0a0a0a0a-1111-2222-3333-444444444444", "pci_bus_id": "0000:18:00.0",
     "minor_number": 0, "device_nodes": ["/dev/nvidia0"]}
  ]
}
JSON

"$GPUPOOL" gpus --fake "$T/node.json" --format cdi --dev-root "$T/dev" --cdi-kind "$KIND" \
  > "$T/spec.json" || fail "gpupool gpus --format cdi failed"
grep -q '"hookName": "createContainer"' "$T/spec.json" || fail "the spec has no hook: $(cat "$T/spec.json")"
grep -q "\"cdiVersion\": \"0.5.0\"" "$T/spec.json" || fail "unexpected cdiVersion"
# The control: the same spec without its hook, under a kind of its own.
python3 - "$T/spec.json" "$T/control.json" "$KIND" "$CONTROL_KIND" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
del spec["containerEdits"]["hooks"]
spec["kind"] = sys.argv[4]
json.dump(spec, open(sys.argv[2], "w"), indent=2)
PY
mkdir -p /var/run/cdi
install -m 0644 "$T/spec.json" "$SPEC"
install -m 0644 "$T/control.json" "$CONTROL_SPEC"

# --- an image laid out as a stock CUDA (Ubuntu) image is ------------------------------
R="$T/rootfs"
mkdir -p "$R"/{bin,sbin,proc,sys,dev,tmp,usr/local/bin,etc/ld.so.conf.d}
cp "$BUSYBOX" "$R/bin/busybox"
for tool in sh ls cat grep env id; do ln -s busybox "$R/bin/$tool"; done
cp "$LDCONFIG" "$R/sbin/ldconfig"
cp "$PROBE" "$R/usr/local/bin/dlopen-probe"
# The probe's C library and loader, at the paths the probe names them by.
for lib in $(ldd "$PROBE" | grep -o '/[^ ]*'); do
  mkdir -p "$R$(dirname "$lib")"
  cp -L "$lib" "$R$lib"
done
echo "include /etc/ld.so.conf.d/*.conf" > "$R/etc/ld.so.conf"
echo "/usr/local/lib" > "$R/etc/ld.so.conf.d/libc.conf"
"$LDCONFIG" -r "$R" || fail "cannot build the image's linker cache"
"$LDCONFIG" -p -C "$R/etc/ld.so.cache" | grep -q libcuda && fail "the image already has a libcuda"
tar -C "$R" -cf "$T/rootfs.tar" .
"${PODMAN[@]}" import --quiet "$T/rootfs.tar" "$IMAGE" >/dev/null || fail "podman import failed"

run_in() {
  "${PODMAN[@]}" run --rm --runtime runc --network none --pull never \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    --user 65534:65534 --cap-drop all --security-opt no-new-privileges \
    --device "$1" "$IMAGE" /bin/sh -c \
    'ldconfig -p; echo PROBE; dlopen-probe libcuda.so.1 libnvidia-ml.so.1; echo "probe exit $?"'
}

# --- with gpupool's hook --------------------------------------------------------------
out=$(run_in "$KIND=0" 2>&1) || fail "podman run with the hook failed:
$out"
grep -Eq "^[[:space:]]*libcuda\.so\.1 \(libc6[^)]*\) => $LIBDIR/libcuda\.so\.1$" <<<"$out" ||
  fail "ldconfig -p in the container does not list libcuda.so.1 in $LIBDIR:
$out"
grep -Eq "^[[:space:]]*libnvidia-ml\.so\.1 \(libc6[^)]*\) => $LIBDIR/libnvidia-ml\.so\.1$" <<<"$out" ||
  fail "ldconfig -p in the container does not list libnvidia-ml.so.1:
$out"
grep -qx "dlopen libcuda.so.1: ok (cuInit -> 100)" <<<"$out" ||
  fail "dlopen(\"libcuda.so.1\") failed in the container:
$out"
grep -q "^dlopen libnvidia-ml.so.1: ok" <<<"$out" || fail "dlopen(\"libnvidia-ml.so.1\") failed:
$out"
grep -qx "probe exit 0" <<<"$out" || fail "the probe failed:
$out"
echo "ok: with the hook, ldconfig -p lists libcuda.so.1 and dlopen(\"libcuda.so.1\") succeeds"

# --- the control: the spec without the hook, as gpupool wrote it before ----------------
out=$(run_in "$CONTROL_KIND=0" 2>&1) || fail "podman run without the hook failed:
$out"
grep -q "libcuda.so.1" <<<"$(sed -n '/^PROBE$/q;p' <<<"$out")" &&
  fail "without the hook libcuda.so.1 is in the cache anyway: this test cannot tell:
$out"
grep -q "^dlopen libcuda.so.1: .*cannot open shared object file" <<<"$out" ||
  fail "without the hook dlopen(\"libcuda.so.1\") should fail:
$out"
echo "ok: without the hook (the spec before the fix) dlopen(\"libcuda.so.1\") fails"
echo "PASS: a stock CUDA image finds the driver through gpupool's CDI spec"
