#!/usr/bin/env bash
# The gpupool node check (docs/node-check.md). Copy this folder to the machine and run,
# as root:
#
#   ./run.sh --out DIR [--mode auto|real|fake] [--python PATH] [--only CHECK,...]
#
# It writes DIR/report.json and DIR/report.md and the raw captures; exit status 0 when no
# check failed, 1 when one did, 2 for a usage error. `./run.sh --help` lists the options.
# Needs python3 (any; PyTorch for the job checks, see --python). Nothing is installed or
# built, and the GPU's settings are never changed.
set -u
kit=$(cd "$(dirname "$0")" && pwd)
py=${NODECHECK_PYTHON3:-$(command -v python3 || true)}
if [ -z "$py" ]; then
  echo "run.sh: no python3 on PATH: the node check needs python3 (set NODECHECK_PYTHON3)" >&2
  exit 2
fi
exec "$py" "$kit/share/nodecheck.py" --kit "$kit" "$@"
