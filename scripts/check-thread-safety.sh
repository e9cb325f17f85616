#!/usr/bin/env bash
# Clang's thread-safety analysis over the sources whose locking is annotated
# (common/thread_annotations.h): every file that includes common/mutex.h, directly or
# through its own header, is compiled with -fsyntax-only -Wthread-safety -Werror, with the
# include paths and definitions of the release build. A field read without the mutex
# that guards it (GUARDED_BY), or a REQUIRES function called without it, fails the check.
#
# Usage: check-thread-safety.sh BUILD_DIR   (a configured build with compile_commands.json)
# Exit: 0 clean, 1 findings, 77 when clang++ is missing (ctest's skip code).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build/release}
clangxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clangxx" ]; then
  echo "check-thread-safety: clang++ is not installed (scripts/install-deps.sh installs clang)"
  exit 77
fi
cd "$here"
# A source is checked when it, or a header of its own module that it includes (as
# controller_jobs.cc includes controller/controller.h), includes common/mutex.h.
annotated() {
  local f=$1 module inc
  grep -q '"common/mutex.h"' "$f" && return 0
  module=$(dirname "${f#src/}")
  while IFS= read -r inc; do
    [ "$(dirname "$inc")" = "$module" ] && [ -f "src/$inc" ] &&
      grep -q '"common/mutex.h"' "src/$inc" && return 0
  done < <(sed -n 's/^#include "\([^"]*\.h\)".*/\1/p' "$f")
  return 1
}
files=()
while IFS= read -r f; do
  if annotated "$f"; then
    files+=("$f")
  fi
done < <(find src -name '*.cc' ! -name '*_test.cc' | sort)
if [ ${#files[@]} -eq 0 ]; then
  echo "check-thread-safety: no annotated sources found" >&2
  exit 1
fi
# The definitions and include directories the build uses (spdlog's and fmt's modes).
flags=(-std=c++20 -fsyntax-only -Wthread-safety -Werror -Isrc -I"$build"
       -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -DFMT_SHARED)
# First, that the analysis is live: a guarded field read without its mutex must fail
# (were the annotations no-ops, every source would pass without being checked).
probe=$(mktemp --suffix=.cc)
trap 'rm -f "$probe"' EXIT
cat >"$probe" <<'PROBE'
#include "common/mutex.h"
struct Probe {
  gpupool::Mutex mu;
  int n GUARDED_BY(mu) = 0;
  int Read() { return n; }
};
PROBE
if "$clangxx" "${flags[@]}" "$probe" 2>/dev/null; then
  echo "check-thread-safety: an unguarded read passed the analysis: it is not running" >&2
  exit 1
fi
status=0
for f in "${files[@]}"; do
  if ! "$clangxx" "${flags[@]}" "$f"; then
    status=1
  fi
done
if [ $status -eq 0 ]; then
  echo "check-thread-safety: ${#files[@]} annotated sources are clean: ${files[*]}"
fi
exit $status
