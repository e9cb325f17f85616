#!/bin/bash
# Device run 4: the kit of main with the MPS single-user rule merged, the health program
# on the real driver, and the shipped health program's own output.
R=$OUT
exec > >(tee $R/console.txt) 2>&1
PY=$(command -v python3)
cp -r build/node-check /root/nc && timeout 330 /root/nc/run.sh --out /root/ncr --python $PY --budget 320; echo "kit rc=$?"
cp /root/ncr/report.md /root/ncr/report.json $R/ 2>/dev/null
/root/nc/share/gpupool-health-check > $R/health-check.txt 2>&1; echo "exit $?" >> $R/health-check.txt
nvidia-smi --query-gpu=index,remapped_rows.pending,remapped_rows.failure,retired_pages.pending,clocks_event_reasons.hw_slowdown,ecc.errors.uncorrected.volatile.total --format=csv >> $R/health-check.txt 2>&1
tar -C /root -czf $R/ncr.tar.gz ncr 2>/dev/null; cat $R/health-check.txt
