#!/usr/bin/env bash
# Builds the Debian package gpupool_VERSION_ARCH.deb from an existing CMake build, without
# compiling anything: `cmake --install` stages the binaries, this adds the systemd units,
# the conffile /etc/gpupool/gpupool.conf, the docs and the maintainer scripts, computes
# Depends with dpkg-shlibdeps and runs `dpkg-deb --build`.
#
#   packaging/deb/build-deb.sh [BUILD_DIR [OUT_DIR]]   (defaults: build/release, BUILD_DIR/deb)
#
# Prints the path of the .deb on its last line. GPUPOOL_DEB_VERSION overrides the version
# (default: the CMake project version).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# Both directories made absolute now: later steps run elsewhere (dpkg-shlibdeps in a
# temporary directory), and `make deb` passes them relative to the source tree.
build=$(cd "${1:-$src/build/release}" && pwd)
out=${2:-$build/deb}
mkdir -p "$out"
out=$(cd "$out" && pwd)

for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture cmake gzip; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "build-deb: $tool is missing: apt-get install dpkg-dev cmake" >&2
    exit 1
  fi
done
for bin in gpupool gpupool-exec gpupool-agent-shim; do
  if [ ! -x "$build/$bin" ]; then
    echo "build-deb: $build/$bin is missing: build it first (make build)" >&2
    exit 1
  fi
done

version=${GPUPOOL_DEB_VERSION:-$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")}
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
stage="$out/stage"
rm -rf "$stage"
mkdir -p "$stage"
umask 022

# Binaries and data, as the CMake install rules say (stripped: symbols stay in the build).
DESTDIR="$stage" cmake --install "$build" --prefix /usr --strip >/dev/null

install -D -m 0644 "$here/gpupool-server.service" "$stage/lib/systemd/system/gpupool-server.service"
install -D -m 0644 "$here/gpupool-agent.service" "$stage/lib/systemd/system/gpupool-agent.service"
install -D -m 0644 "$here/gpupool.conf" "$stage/etc/gpupool/gpupool.conf"

doc="$stage/usr/share/doc/gpupool"
install -D -m 0644 "$here/copyright" "$doc/copyright"
date=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)}")
sed -e "s/@VERSION@/$version/" -e "s/@DATE@/$date/" "$here/changelog" | gzip -9n >"$doc/changelog.gz"
for f in README.md docs/deploy.md docs/cli.md docs/api.md docs/security.md; do
  [ -f "$src/$f" ] && gzip -9n <"$src/$f" >"$doc/$(basename "$f").gz"
done

# Manual pages: one per command, made by the packaged binary from its own command line
# (src/cli/man_page.h; `man gpupool-submit`), and the shim's, written by hand.
man="$stage/usr/share/man/man1"
mkdir -p "$man"
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)} \
  "$stage/usr/bin/gpupool" man-pages --out "$man"
install -m 0644 "$here/gpupool-agent-shim.1" "$man/"
gzip -9n "$man"/*.1

# Control files.
mkdir -p "$stage/DEBIAN"
install -m 0755 "$here/postinst" "$here/prerm" "$here/postrm" "$stage/DEBIAN/"
echo /etc/gpupool/gpupool.conf >"$stage/DEBIAN/conffiles"
chmod 0644 "$stage/DEBIAN/conffiles"

# Depends: what the ELF files need, as Debian's shlibs say (dpkg-shlibdeps wants a
# debian/control beside it).
shl=$(mktemp -d)
trap 'rm -rf "$shl"' EXIT
mkdir "$shl/debian"
printf 'Source: gpupool\n\nPackage: gpupool\nArchitecture: any\n' >"$shl/debian/control"
elves=()
for f in "$stage"/usr/bin/*; do elves+=("-e$f"); done
if ! shlibs=$(cd "$shl" && dpkg-shlibdeps -O "${elves[@]}" 2>"$shl/errors"); then
  echo "build-deb: dpkg-shlibdeps failed:" >&2
  cat "$shl/errors" >&2
  exit 1
fi
depends=$(sed -n 's/^shlibs:Depends=//p' <<<"$shlibs")
if [ -z "$depends" ]; then
  echo "build-deb: dpkg-shlibdeps found no dependencies" >&2
  exit 1
fi

size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
  -e "s/@DEPENDS@/$depends/" "$here/control.in" >"$stage/DEBIAN/control"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
  xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"

deb="$out/gpupool_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
