#!/usr/bin/env bash
# Installs, only when missing, every Debian package that building, testing and running
# gpupool needs. Safe to run again and again: it asks apt only about what is absent.
set -euo pipefail

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config make git
  # compiler cache: CMake compiles through it when present (cmake/ccache.cmake)
  ccache
  # clang's thread-safety analysis of the annotated locking (scripts/check-thread-safety.sh)
  clang
  # libraries (see the README's dependency table for why each)
  nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev libsqlite3-dev
  libmicrohttpd-dev libssl-dev
  # the PostgreSQL store (libpq) and the real server its conformance tests start
  libpq-dev postgresql-15
  # the daemons' INI configuration file (/etc/gpupool/gpupool.conf)
  libinih-dev
  # `make deb`: dpkg-shlibdeps computes the package's Depends; the deb_package test checks
  # the package with lintian and its units with systemd-analyze
  dpkg-dev lintian systemd
  # tests and benchmarks; python3-jsonschema checks docs/openapi.json (openapi_schema_test.py)
  libgtest-dev libgmock-dev libbenchmark-dev python3 python3-jsonschema
  # multi-node jobs for real (tests/multinode): PyTorch, Open MPI and mpi4py from Debian
  python3-torch openmpi-bin python3-mpi4py
  # containers: the CDI tests run real podman with runc
  podman runc
  # podman run --init (the default for container jobs): catatonit as PID 1
  catatonit
  # a static busybox makes the minimal root file system of the CDI podman test
  busybox-static
  # GET /metrics checked by promtool and scraped by a real Prometheus (tests/metrics)
  prometheus
  # the web dashboard's pages driven in a real headless Chromium (tests/dashboard,
  # bench/pool/dashboard_paint.py)
  chromium chromium-driver python3-selenium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run this script as root (or install sudo) to install them" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
