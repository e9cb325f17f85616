#!/usr/bin/env bash
# `make run`: show what GPU discovery sees on this machine, then start the whole pool
# (`gpupool up`: controller + local agent + embedded SQLite) in the foreground.
# On a machine without GPUs, `gpupool up` says so and runs with a fake 8-GPU node.
# Extra arguments go to `gpupool up` (e.g. `make run ARGS="--fake examples/nodes/amd-8xmi250x.json"`).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${GPUPOOL_BIN:-build/release/gpupool}  # override to try another build
if [ ! -x "$BIN" ]; then
  echo "run: $BIN is missing: run 'make build' (or 'make run', which builds first)" >&2
  exit 1
fi

echo "== gpupool gpus (this machine)"
"$BIN" gpus 2>/dev/null || echo "(no GPU found: try '$BIN gpus --fake examples/nodes/nvidia-8xh100.json')"
echo
echo "== gpupool up $*"
exec "$BIN" up "$@"
