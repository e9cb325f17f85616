#!/bin/bash
# Device rerun: the kit (fixed venv python), then fault containment with and without MPS
# while gpupool's own sampler (NVML event sets) watches for Xid events.
R=$OUT; P=/root/p; mkdir -p $P
exec > >(tee $R/console.txt) 2>&1
set -x
PY=$(command -v python3); C=.devrun/mps_client.py
cp -r build/node-check /root/nc && timeout 300 /root/nc/run.sh --out /root/ncr --python $PY --budget 280; echo "kit rc=$?"
cp /root/ncr/report.md /root/ncr/report.json $R/ 2>/dev/null
tar -C /root -czf $R/ncr.tar.gz ncr 2>/dev/null
samp() { LD_LIBRARY_PATH=/root/nc/lib timeout 60 /root/nc/bin/gpupool gpus --sample $1 --sample-interval 1 > $P/$2 2>$P/$2.err & s=$!; }
# 1. without MPS: a faulting process beside a working one.
dmesg | grep -i xid > $P/dmesg_before.txt 2>&1
samp 14 xid_plain.jsonl; sleep 1
timeout 60 $PY $C steady 1 10 > $P/plain_steady.json 2>&1 & a=$!
timeout 60 $PY $C faulty 1 10 3 > $P/plain_faulty.json 2>$P/plain_faulty.err & b=$!
wait $a $b $s
dmesg | grep -i -E 'xid|nvrm' > $P/dmesg_plain.txt 2>&1
# 2. under MPS: the same pair.
M=/tmp/mps; mkdir -p $M/pipe $M/log
export CUDA_MPS_PIPE_DIRECTORY=$M/pipe CUDA_MPS_LOG_DIRECTORY=$M/log
timeout 20 nvidia-cuda-mps-control -d; sleep 1
samp 14 xid_mps.jsonl; sleep 1
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4G timeout 60 $PY $C steady 1 10 > $P/mps_steady.json 2>&1 & a=$!
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4G timeout 60 $PY $C faulty 1 10 3 > $P/mps_faulty.json 2>$P/mps_faulty.err & b=$!
wait $a $b $s
echo get_server_list | nvidia-cuda-mps-control > $P/mps_servers.txt 2>&1
# 3. MPS again after the fault: does a new client run?
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4G timeout 60 $PY $C after 1 3 > $P/mps_after.json 2>&1
echo quit | timeout 20 nvidia-cuda-mps-control; sleep 2
cat $M/log/control.log $M/log/server.log > $P/mps_logs.txt 2>&1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
dmesg | grep -i -E 'xid|nvrm' > $P/dmesg_after.txt 2>&1
nvidia-smi > $P/nvsmi_end.txt 2>&1
tar -C /root -czf $R/probe.tar.gz p; ls -la $R; cat $P/*.json
