#!/usr/bin/env bash
# `make run`: until the pool itself exists, show what GPU discovery sees on this machine.
# On a machine without GPUs it says so and replays an example node instead, so a new
# user sees every part of the output (GPUs, topology, driver lines) either way.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${GPUPOOL_BIN:-build/release/gpupool}  # override to try another build
EXAMPLE=examples/nodes/nvidia-8xh100.json
if [ ! -x "$BIN" ]; then
  echo "run: $BIN is missing: run 'make build' (or 'make run', which builds first)" >&2
  exit 1
fi

echo "== gpupool gpus (this machine)"
status=0
"$BIN" gpus || status=$?
if [ "$status" -ne 0 ]; then
  echo "run: 'gpupool gpus' failed with exit code $status (see the message above)" >&2
fi

# The JSON form says unambiguously whether any GPU was found.
if ! "$BIN" gpus --json 2>/dev/null | grep -q '"vendor"'; then
  echo
  echo "== This machine has no GPU that gpupool can see, so here is a captured node replayed:"
  echo "== $BIN gpus --fake $EXAMPLE"
  "$BIN" gpus --fake "$EXAMPLE"
  echo
  echo "Other formats: add --format classad | gres | cdi | json; other nodes: ls examples/nodes"
fi
exit "$status"
