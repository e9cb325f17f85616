#!/usr/bin/env bash
# Tests scripts/check-layers.sh: it passes on a copy of the tree, and fails, naming the
# file and line, on each kind of planted bad include (a lower module including a higher
# one, cli/ included by a daemon part, I/O in a no-io module), on a folder that is not a
# module, and on rules it cannot read.
#   tests/layers/check_layers_test.sh [REPO_ROOT]
set -uo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
check=$top/scripts/check-layers.sh
rules=$top/docs/architecture.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# run CMD...: runs it once, keeping its exit status and output for `expect`.
run() {
  out=$("$@" 2>&1)
  rc=$?
}
# expect RC PATTERN: the last run exited with RC and its output contains PATTERN.
expect() {
  if [ "$rc" != "$1" ] || [[ "$out" != *"$2"* ]]; then
    echo "FAIL: exit $rc (wanted $1), output lacks '$2':"
    echo "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok: exit $1, '$2'"
  fi
}

cp -r "$top/src" "$tmp/src"
run "$check" "$tmp/src" "$rules"
expect 0 "every include follows"

# Each kind of bad include, planted at once in one copy (one run of the script); each
# must be reported with its file.
plant() { mkdir -p "$(dirname "$tmp/src/$1")" && echo "$2" >>"$tmp/src/$1"; }
plant sched/resources.h '#include "controller/controller.h"'  # a lower module, a higher one
plant server/server.h '#include "cli/commands.h"'             # a daemon part, the CLI
plant agent/runtime/agent_loop.cc '#include "server/server.h"'
plant agent/launcher.h '#include "agent/runtime/agent_loop.h"'
plant envcheck/elf_file.h '#include "gpu/gpu_info.h"'        # only needs.* may
plant sched/task.cc '#include <fstream>'                     # I/O in a no-io module
plant sim/curves.cc '#include "common/file_util.h"'
plant daemon/x.cc 'int x;'                                   # not a module
run "$check" "$tmp/src" "$rules"
for want in 'src/sched/resources.h:' 'of module controller/' 'src/server/server.h:' \
    'of module cli/' 'src/agent/runtime/agent_loop.cc:' 'of module server/' \
    'src/agent/launcher.h:' 'of module agent/runtime/' 'src/envcheck/elf_file.h:' \
    'src/sched/task.cc:' '<fstream> is I/O' 'src/sim/curves.cc:' \
    '"common/file_util.h" is I/O' 'src/daemon/: not a module' '9 include(s) break'; do
  expect 1 "$want"
done

echo "no rules here" >"$tmp/empty.md"
run "$check" "$tmp/src" "$tmp/empty.md"
expect 2 'no layer rules'

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
