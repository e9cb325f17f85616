#!/bin/bash
# Device check for issue 26/28/29: probes (read-only), the MPS two-client probe, the node-check kit.
R=$OUT; mkdir -p /root/p; P=/root/p
exec > >(tee $R/console.txt) 2>&1
set -x
PY=$(command -v python3)
{ date -u; uname -a; cat /etc/os-release | head -3; ldd --version | head -1; nvidia-smi; nvidia-smi -L;
  nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,driver_version,memory.total,compute_cap,mig.mode.current,compute_mode,ecc.mode.current --format=csv;
  nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE;
  ls -l /dev/nvidia* /dev/nvidia-caps 2>&1; mount | grep cgroup; cat /sys/fs/cgroup/cgroup.controllers; cat /sys/fs/cgroup/cgroup.subtree_control;
  ls /sys/fs/cgroup/ | head -50; cat /sys/fs/cgroup/dmem.capacity 2>&1; grep -i dmem /proc/cgroups /proc/filesystems 2>&1;
  ls /sys/module/nvidia*/ -d; modinfo nvidia 2>&1 | head -5; cat /proc/driver/nvidia/version;
  which nvidia-cuda-mps-control nvidia-cuda-mps-server nvidia-modprobe unshare podman; $PY -c 'import torch,sys;print(sys.version, torch.__version__, torch.version.cuda, torch.cuda.is_available())';
  dmesg 2>&1 | grep -i -E 'nvrm|xid' | tail -20; } > $P/probe.txt 2>&1
# MPS probe: private pipe/log dirs, two clients with pinned memory limits.
M=/tmp/mps; mkdir -p $M/pipe $M/log
export CUDA_MPS_PIPE_DIRECTORY=$M/pipe CUDA_MPS_LOG_DIRECTORY=$M/log
if timeout 20 nvidia-cuda-mps-control -d; then
  sleep 1
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2G CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 $PY .devrun/mps_client.py greedy 6 8 > $P/mps_greedy.json 2>$P/mps_greedy.err & g=$!
  CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4G CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 90 $PY .devrun/mps_client.py modest 1 8 > $P/mps_modest.json 2>$P/mps_modest.err & m=$!
  sleep 3; nvidia-smi > $P/mps_nvsmi.txt 2>&1; echo get_server_list | nvidia-cuda-mps-control >> $P/mps_nvsmi.txt 2>&1
  wait $g $m
  echo quit | timeout 20 nvidia-cuda-mps-control; sleep 2
  cat $M/log/control.log $M/log/server.log > $P/mps_logs.txt 2>&1
else echo "mps-control failed rc=$?" > $P/mps_greedy.json; fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
pgrep -a nvidia-cuda-mps; nvidia-smi --query-compute-apps=pid,name --format=csv
cp -r build/node-check /root/nc && timeout 390 /root/nc/run.sh --out /root/ncr --python $PY --budget 360; echo "kit rc=$?"
cp /root/ncr/report.md /root/ncr/report.json $R/ 2>/dev/null
tar -C /root -czf $R/ncr.tar.gz ncr 2>/dev/null; tar -C /root -czf $R/probe.tar.gz p; ls -la $R
