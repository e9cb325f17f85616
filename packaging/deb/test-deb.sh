#!/usr/bin/env bash
# ctest deb_package: builds the .deb with `make deb` in a fresh clone of the source tree
# whose build is this one, then checks it: its contents (binaries, units, conffile, maintainer scripts),
# that every key documented in the shipped gpupool.conf is one the daemons accept and
# that the packaged server starts with it, `systemd-analyze verify` on the units (no
# output allowed: it reports unknown keys and bad values but still exits 0), and lintian
# (errors fail; warnings are printed).
#
#   packaging/deb/test-deb.sh BUILD_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)

missing=()
for tool in dpkg-deb dpkg-shlibdeps lintian systemd-analyze git make; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "SKIP: ${missing[*]} missing: apt-get install dpkg-dev lintian systemd git make"
  exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpupool-deb-test.XXXXXX")
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

start=$(date +%s)
src=$(cd "$here/../.." && pwd)
if git -C "$src" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  # `make deb` as it runs in a fresh clone (issue 25.5: the Makefile passes directories
  # relative to the clone's root). The clone is this tree's HEAD plus its uncommitted
  # changes to tracked files (what is under test). Its build/release holds links to this
  # build's entries, so the package is made from this build into the clone's own
  # build/release/deb, and `-o build` takes that build as made: compiling the clone again
  # would cost CI (2 cores) most of the suite's time and test nothing of packaging.
  clone="$tmp/clone"
  git clone -q "$src" "$clone" || fail "git clone $src failed"
  git -C "$clone" checkout -q --detach "$(git -C "$src" rev-parse HEAD)" ||
    fail "the clone lacks $src's HEAD"
  git -C "$src" diff --binary HEAD >"$tmp/changes.diff"
  if [ -s "$tmp/changes.diff" ]; then
    git -C "$clone" apply --binary "$tmp/changes.diff" || fail "the uncommitted changes do not apply to a clone"
  fi
  mkdir -p "$clone/build/release"
  for entry in "$build"/*; do
    [ "$(basename "$entry")" = deb ] || ln -s "$entry" "$clone/build/release/"
  done
  if ! (cd "$clone" && env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -o build deb) \
    >"$tmp/make-deb.log" 2>&1; then
    cat "$tmp/make-deb.log" >&2
    fail "make deb in a fresh clone failed"
  fi
  debs=("$clone"/build/release/deb/gpupool_*.deb)
  [ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "make deb made no package in build/release/deb"
  deb=${debs[0]}
  [ "$(tail -n 1 "$tmp/make-deb.log")" = "$deb" ] ||
    fail "make deb's last line is not the package's path: $(tail -n 1 "$tmp/make-deb.log")"
  echo "built $deb with make deb in a fresh clone ($(($(date +%s) - start)) s)"
else
  # A source tree that is no git checkout (a release tarball): the script alone.
  deb=$(bash "$here/build-deb.sh" "$build" "$tmp/out" | tail -n 1)
  [ -f "$deb" ] || fail "build-deb.sh made no package"
  echo "built $deb with build-deb.sh ($(($(date +%s) - start)) s; $src is no git checkout)"
fi

# Contents.
contents=$(dpkg-deb -c "$deb" | awk '{print $1, $NF}')
for f in ./usr/bin/gpupool ./usr/bin/gpupool-exec ./usr/bin/gpupool-agent-shim \
  ./usr/share/gpupool/gpupool-health-check; do
  grep -qx -- "-rwxr-xr-x $f" <<<"$contents" || fail "$f is missing or not 0755"
done
for f in ./lib/systemd/system/gpupool-server.service ./lib/systemd/system/gpupool-agent.service \
  ./etc/gpupool/gpupool.conf ./usr/share/doc/gpupool/copyright \
  ./usr/share/doc/gpupool/deploy.md.gz ./usr/share/gpupool/examples/nodes/nvidia-8xh100.json; do
  grep -qx -- "-rw-r--r-- $f" <<<"$contents" || fail "$f is missing or not 0644"
done
[ "$(dpkg-deb -f "$deb" Package)" = gpupool ] || fail "the package is not called gpupool"
grep -q 'libc6' <<<"$(dpkg-deb -f "$deb" Depends)" || fail "Depends lacks libc6 (dpkg-shlibdeps)"
dpkg-deb -e "$deb" "$tmp/control"
[ "$(cat "$tmp/control/conffiles")" = /etc/gpupool/gpupool.conf ] ||
  fail "conffiles is not /etc/gpupool/gpupool.conf"
for s in postinst prerm postrm; do
  [ -x "$tmp/control/$s" ] || fail "DEBIAN/$s is missing"
  sh -n "$tmp/control/$s" || fail "DEBIAN/$s is not valid sh"
done
grep -q 'ExecStart=/usr/bin/gpupool server --config /etc/gpupool/gpupool.conf' \
  "$here/gpupool-server.service" || fail "gpupool-server.service does not run the server with --config"
grep -q 'ExecStart=/usr/bin/gpupool agent --config /etc/gpupool/gpupool.conf' \
  "$here/gpupool-agent.service" || fail "gpupool-agent.service does not run the agent with --config"
echo "contents: ok"

# Manual pages: one for each binary and each command `gpupool --help` lists, gzipped
# 0644, each read by groff without a warning.
commands=$("$build/gpupool" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF {print "gpupool-" $1}')
[ "$(wc -w <<<"$commands")" -ge 20 ] || fail "gpupool --help lists only: $commands"
for page in gpupool gpupool-exec gpupool-agent-shim gpupool-sim-timed gpupool-token-create $commands; do
  grep -qx -- "-rw-r--r-- ./usr/share/man/man1/$page.1.gz" <<<"$contents" ||
    fail "the manual page $page.1.gz is missing or not 0644"
done
mkdir -p "$tmp/man"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/man" ./usr/share/man/man1
pages=0
for f in "$tmp/man/usr/share/man/man1"/*.1.gz; do
  warn=$(zcat "$f" | LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z 2>&1) || fail "groff failed on $f"
  [ -z "$warn" ] || fail "groff warns on $(basename "$f"): $warn"
  pages=$((pages + 1))
done
echo "manual pages: $pages, groff clean"

# The shipped configuration: every documented key uncommented is accepted, and the
# packaged binary starts a server with it (command-line options winning over the file).
root="$tmp/root"
dpkg-deb -x "$deb" "$root"
# (admin-group names a group of this machine: the example's need not exist here, and a
# group the machine does not know stops the server.)
sed -E 's/^#([a-z-]+ =)/\1/; s/^admin-group = .*/admin-group = root/' \
  "$root/etc/gpupool/gpupool.conf" >"$tmp/all.conf"
chmod 600 "$tmp/all.conf"
keys=$(grep -cE '^[a-z-]+ =' "$tmp/all.conf")
[ "$keys" -ge 20 ] || fail "gpupool.conf documents only $keys keys"
# (--store on the command line: the file's example names a PostgreSQL host that does not
# exist here.)
"$root/usr/bin/gpupool" server --config "$tmp/all.conf" --state-dir "$tmp/state" --port 0 \
  --store "sqlite:$tmp/state/gpupool.db" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 50); do
  [ -S "$tmp/state/gpupool.sock" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log"; fail "the packaged server did not start with the shipped gpupool.conf (all $keys keys set)"; }
  sleep 0.1
done
[ -S "$tmp/state/gpupool.sock" ] || fail "the packaged server made no socket"
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=""
echo "config: all $keys documented keys accepted"

# systemd-analyze verify, in a root with the package and the host's own units.
cp -rn /lib/systemd/system/. "$root/lib/systemd/system/" 2>/dev/null || true
out=$(systemd-analyze verify --root="$root" gpupool-server.service gpupool-agent.service 2>&1) ||
  fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify reported: $out"
echo "systemd-analyze verify: ok"

# lintian: errors fail.
set +e
lint=$(lintian --tag-display-limit 0 --fail-on error "$deb" 2>&1)
rc=$?
set -e
echo "lintian:"
echo "$lint" | grep -E '^[EWI]:' || echo "  (no tags)"
[ $rc -eq 0 ] || fail "lintian reports errors"
echo "PASS ($(($(date +%s) - start)) s)"
