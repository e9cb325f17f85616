#!/usr/bin/env bash
# Builds the node-check kit (docs/node-check.md) from an existing release build, without
# compiling anything: a self-contained folder to copy to a GPU machine that has no
# compiler and no package mirror, and run there as `./run.sh --out DIR`.
#
#   packaging/node-check/make-kit.sh [BUILD_DIR [OUT_DIR]]   (defaults: build/release, build/node-check)
#
# OUT_DIR is replaced. It gets bin/ (gpupool, gpupool-agent-shim, gpupool-exec), tests/
# (the gtest binaries with real-driver cases), lib/ (every shared library those need
# beyond glibc, as ldd finds them here; the binaries run with LD_LIBRARY_PATH=lib), fake/
# (a fake libnvidia-ml.so.1, its scenario and a fake nvidia-smi, for machines without a
# GPU), share/ (the check itself), run.sh and kit.json. Binaries are stripped copies.
# Fails when the kit exceeds 48 MiB. Prints the kit's path and size on its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build/release}" && pwd)
out=${2:-$src/build/node-check}
max_bytes=$((48 * 1024 * 1024))

# The binaries the kit carries, relative to the build.
bins=(gpupool gpupool-agent-shim gpupool-exec)
tests=(src/gpu/nvml/nvml_backend_test)
fake_nvml=tests/fakelib/nvml/normal/libnvidia-ml.so.1
for f in "${bins[@]}" "${tests[@]}" "$fake_nvml"; do
  if [ ! -f "$build/$f" ]; then
    echo "make-kit: $build/$f is missing: build the release preset first (make build)" >&2
    exit 1
  fi
done
for tool in ldd python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "make-kit: $tool is missing" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"/{bin,lib,tests,fake,share}
out=$(cd "$out" && pwd)
umask 022

copy_binary() {  # copy_binary SRC DEST: a stripped copy when strip is here
  install -m 0755 "$1" "$2"
  if command -v strip >/dev/null 2>&1; then strip --strip-unneeded "$2"; fi
}
for b in "${bins[@]}"; do copy_binary "$build/$b" "$out/bin/$b"; done
for t in "${tests[@]}"; do copy_binary "$build/$t" "$out/tests/$(basename "$t")"; done
copy_binary "$build/$fake_nvml" "$out/fake/libnvidia-ml.so.1"
install -m 0644 "$here/fake-h100.json" "$out/fake/scenario.json"
install -m 0755 "$here/fake-nvidia-smi" "$out/fake/nvidia-smi"
install -m 0644 "$here/nodecheck.py" "$here/nodecheck_lib.py" "$here/nodecheck_checks.py" \
  "$here/torch_job.py" "$out/share/"
install -m 0755 "$here/standin-dev.sh" "$out/share/standin-dev.sh"
install -m 0755 "$here/../health-check/gpupool-health-check" "$out/share/gpupool-health-check"
install -m 0755 "$here/run.sh" "$out/run.sh"

# Shared libraries beyond glibc: glibc's own (the target's is newer, and glibc is
# backward compatible) stay out, everything else ldd resolves here goes to lib/ under
# the name the binaries ask for. libstdc++ and libgcc_s go too: the binaries were built
# with this machine's GCC.
glibc='^(ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libmvec|libthread_db|libBrokenLocale|libnss_[a-z0-9_]+|libc_malloc_debug|libmemusage|libpcprofile|libSegFault)\.so(\.[0-9]+)*$'
declare -A copied=()
for elf in "$out"/bin/* "$out"/tests/* "$out"/fake/libnvidia-ml.so.1; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      echo "make-kit: $elf needs $name, which is not found here" >&2
      exit 1
    fi
    [[ "$name" =~ $glibc ]] && continue
    [ -n "${copied[$name]:-}" ] && continue
    install -m 0644 "$(readlink -f "$path")" "$out/lib/$name"
    copied[$name]=$path
  done < <(ldd "$elf")
done

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
commit=$(git -C "$src" describe --always --dirty 2>/dev/null || echo unknown)
glibc_version=$(ldd --version 2>&1 | sed -n '1s/.* //p')
os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")
# Size before kit.json itself (a few hundred bytes).
size=$(du -sb "$out" | cut -f1)
python3 - "$out" "$version" "$commit" "$glibc_version" "$os" "$size" <<'PY'
import datetime, json, os, sys
out, version, commit, glibc, os_name, size = sys.argv[1:]
files = lambda d: sorted(os.listdir(os.path.join(out, d)))
kit = {"schema": "gpupool.node-check-kit/v1", "version": version, "commit": commit,
       "built_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "built_on": "%s, glibc %s" % (os_name, glibc), "glibc_min": glibc,
       "binaries": files("bin"), "tests": files("tests"), "libraries": files("lib"),
       "size_bytes": int(size)}
with open(os.path.join(out, "kit.json"), "w") as f:
    json.dump(kit, f, indent=2)
    f.write("\n")
PY
size=$(du -sb "$out" | cut -f1)
if [ "$size" -gt "$max_bytes" ]; then
  echo "make-kit: the kit is $size bytes, over the 48 MiB limit ($max_bytes)" >&2
  exit 1
fi
echo "$out $size bytes ($((size / 1024 / 1024)) MiB)"
