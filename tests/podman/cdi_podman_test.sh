#!/usr/bin/env bash
# Real podman consumes gpupool's CDI spec.
#
# Builds stand-in device nodes (mknod with the numbers of /dev/null), a fake 2-GPU node
# file, a CDI spec from `gpupool gpus --format cdi --dev-root <stand-ins>`, and a minimal
# root file system (busybox, or /bin/sh and a few tools with their libraries), then runs
# containers with --device <kind>=<id> and checks that each sees exactly its GPU's nodes,
# the control nodes, the read-only driver library and the spec's environment.
#
# Podman 4.3 cannot be pointed at another CDI directory, so the spec goes to /var/run/cdi
# (tmpfs: gone at reboot even if this script were killed) under a kind that names this
# run only, and is removed on exit. Podman's storage is a private --root/--runroot with
# the vfs driver, so no global container state is touched.
#
# Usage: cdi_podman_test.sh PATH/TO/gpupool. Exit 77 = skipped (ctest SKIP_RETURN_CODE).
set -euo pipefail

GPUPOOL=${1:?usage: cdi_podman_test.sh PATH/TO/gpupool}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root (mknod and rootful podman); run as root to exercise CDI"
command -v podman >/dev/null || skip "podman is not installed: run scripts/install-deps.sh"
command -v runc >/dev/null || skip "runc is not installed: run scripts/install-deps.sh"
[ -x "$GPUPOOL" ] || fail "gpupool binary '$GPUPOOL' not found: build it first"

T=$(mktemp -d /tmp/gpupool-cdi-test.XXXXXX)
VENDOR="gpupool-test-$$.example"
KIND="$VENDOR/gpu"
CDI_DIR=/var/run/cdi
SPEC="$CDI_DIR/gpupool-test-$$.json"
created_cdi_dir=0
cleanup() {
  rm -f "$SPEC"
  if [ "$created_cdi_dir" -eq 1 ]; then rmdir "$CDI_DIR" 2>/dev/null || true; fi
  # Anything podman left under its private root (vfs layers are plain directories).
  rm -rf "$T"
}
trap cleanup EXIT

# --- stand-in device nodes: character devices with /dev/null's numbers -----------------
mkdir -p "$T/dev" "$T/lib"
major=$((16#$(stat -c %t /dev/null)))
minor=$((16#$(stat -c %T /dev/null)))
for n in nvidia0 nvidia1 nvidiactl nvidia-uvm nvidia-uvm-tools; do
  mknod "$T/dev/$n" c "$major" "$minor"
done
echo "stand-in driver library" > "$T/lib/libnvidia-ml.so.999.99"
LIB="$T/lib/libnvidia-ml.so.999.99"

# --- a fake 2-GPU node -----------------------------------------------------------------
UUID0=GPU-0a0a0a0a-1111-2222-3333-444444444444
UUID1=GPU-1b1b1b1b-5555-6666-7777-888888888888
cat > "$T/node.json" <<JSON
{
  "schema": "gpupool.node/v1",
  "hostname": "podman-test",
  "drivers": {"nvidia": {"version": "999.99", "runtime_version": "12.4",
              "libraries": ["$LIB"],
              "control_nodes": ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]}},
  "gpus": [
    {"vendor": "nvidia", "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "$UUID0",
     "pci_bus_id": "0000:18:00.0", "minor_number": 0, "device_nodes": ["/dev/nvidia0"]},
    {"vendor": "nvidia", "index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "$UUID1",
     "pci_bus_id": "0000:2a:00.0", "minor_number": 1, "device_nodes": ["/dev/nvidia1"]}
  ]
}
JSON

# This run's own kind, so no other spec on the machine can clash with it.
"$GPUPOOL" gpus --fake "$T/node.json" --format cdi --dev-root "$T/dev" --cdi-kind "$KIND" \
  > "$T/spec-test.json" || fail "gpupool gpus --format cdi --cdi-kind failed"
grep -q "\"hostPath\": \"$T/dev/nvidia0\"" "$T/spec-test.json" || fail "spec lacks the --dev-root host path"
grep -q "\"kind\": \"$KIND\"" "$T/spec-test.json" || fail "spec lacks the --cdi-kind kind"
if "$GPUPOOL" gpus --fake "$T/node.json" --format cdi --cdi-kind "no-slash" > /dev/null 2> "$T/bad-kind.err"; then
  fail "an invalid --cdi-kind was accepted"
fi
grep -q "no-slash" "$T/bad-kind.err" || fail "the error for a bad --cdi-kind does not name it: $(cat "$T/bad-kind.err")"
if [ ! -d "$CDI_DIR" ]; then mkdir -p "$CDI_DIR"; created_cdi_dir=1; fi
install -m 0644 "$T/spec-test.json" "$SPEC"

# --- a minimal root file system, built locally ----------------------------------------
ROOTFS="$T/rootfs"
mkdir -p "$ROOTFS/bin" "$ROOTFS/proc" "$ROOTFS/sys" "$ROOTFS/dev" "$ROOTFS/etc" "$ROOTFS/tmp"
BUSYBOX=$(command -v busybox || true)
# ldd fails on a static binary, which needs nothing beside it.
if [ -n "$BUSYBOX" ] && ! ldd "$BUSYBOX" >/dev/null 2>&1; then
  cp "$BUSYBOX" "$ROOTFS/bin/busybox"
  for tool in sh ls env cat sort grep touch; do ln -s busybox "$ROOTFS/bin/$tool"; done
else
  # No static busybox: copy a shell and tools with the shared libraries they need.
  for tool in sh ls env cat sort grep touch; do
    src=$(command -v "$tool") || fail "$tool not found to build the root file system"
    cp -L "$src" "$ROOTFS/bin/$tool"
    for lib in $(ldd "$src" | grep -o '/[^ ]*'); do
      mkdir -p "$ROOTFS$(dirname "$lib")"
      cp -Ln "$lib" "$ROOTFS$lib" 2>/dev/null || true
    done
  done
fi

# --- run containers --------------------------------------------------------------------
run_with() {
  podman --root "$T/storage" --runroot "$T/run" --storage-driver vfs \
    run --rm --runtime runc --network none \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    "$@" --rootfs "$ROOTFS" /bin/sh -c \
    "ls /dev; echo ENV; env; echo LIB; cat '$LIB'; touch '$LIB' 2>/dev/null && echo LIB-WRITABLE; true"
}

has() { grep -qx -- "$2" <<<"$1" || fail "$3: expected '$2' in the container's output:
$1"; }
lacks() { ! grep -qx -- "$2" <<<"$1" || fail "$3: did not expect '$2' in the container's output:
$1"; }

check_common() {
  local out=$1 what=$2
  has "$out" nvidiactl "$what"
  has "$out" nvidia-uvm "$what"
  has "$out" nvidia-uvm-tools "$what"
  has "$out" "GPUPOOL_CDI_KIND=$KIND" "$what"
  has "$out" "stand-in driver library" "$what"
  lacks "$out" LIB-WRITABLE "$what (the library must be mounted read-only)"
}

out=$(run_with --device "$KIND=0") || fail "podman run with $KIND=0 failed: $out"
check_common "$out" "GPU 0 by index"
has "$out" nvidia0 "GPU 0 by index"
lacks "$out" nvidia1 "GPU 0 by index"
has "$out" "GPUPOOL_GPU_0=$UUID0" "GPU 0 by index"
lacks "$out" "GPUPOOL_GPU_1=$UUID1" "GPU 0 by index"
echo "ok: --device $KIND=0 sees nvidia0 only"

out=$(run_with --device "$KIND=$UUID1") || fail "podman run with $KIND=$UUID1 failed: $out"
check_common "$out" "GPU 1 by UUID"
has "$out" nvidia1 "GPU 1 by UUID"
lacks "$out" nvidia0 "GPU 1 by UUID"
has "$out" "GPUPOOL_GPU_1=$UUID1" "GPU 1 by UUID"
lacks "$out" "GPUPOOL_GPU_0=$UUID0" "GPU 1 by UUID"
echo "ok: --device $KIND=$UUID1 sees nvidia1 only"

out=$(run_with --device "$KIND=all") || fail "podman run with $KIND=all failed: $out"
check_common "$out" "all GPUs"
has "$out" nvidia0 "all GPUs"
has "$out" nvidia1 "all GPUs"
has "$out" "GPUPOOL_GPU_0=$UUID0" "all GPUs"
has "$out" "GPUPOOL_GPU_1=$UUID1" "all GPUs"
echo "ok: --device $KIND=all sees both GPUs"

out=$(run_with --device "$KIND=7" 2>&1) && fail "an unknown CDI device must be refused: $out"
echo "ok: --device $KIND=7 is refused"
echo "PASS: podman consumed gpupool's CDI spec"
