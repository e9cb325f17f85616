#!/bin/bash
# Device run 3: the kit with the MPS enforcement and Xid-43 health checks; then whether a
# client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT can exceed the daemon's default.
R=$OUT; P=/root/p; mkdir -p $P
exec > >(tee $R/console.txt) 2>&1
PY=$(command -v python3); C=.devrun/mps_client.py
cp -r build/node-check /root/nc && timeout 330 /root/nc/run.sh --out /root/ncr --python $PY --budget 320; echo "kit rc=$?"
cp /root/ncr/report.md /root/ncr/report.json $R/ 2>/dev/null
tar -C /root -czf $R/ncr.tar.gz ncr 2>/dev/null
M=/tmp/mps3; mkdir -p $M/pipe $M/log
export CUDA_MPS_PIPE_DIRECTORY=$M/pipe CUDA_MPS_LOG_DIRECTORY=$M/log
timeout 20 nvidia-cuda-mps-control -d; sleep 1
echo "set_default_device_pinned_mem_limit 0 2G" | nvidia-cuda-mps-control > $P/set_default.txt 2>&1
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G timeout 60 $PY $C raise 6 1 > $P/raise_env8g_default2g.json 2>&1
timeout 60 $PY $C noenv 6 1 > $P/noenv_default2g.json 2>&1
echo quit | timeout 20 nvidia-cuda-mps-control; sleep 1
cat $M/log/control.log > $P/mps3_control.log 2>&1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
dmesg | grep -i -E 'xid' > $P/dmesg.txt 2>&1
tar -C /root -czf $R/probe.tar.gz p; cat $P/*.json
