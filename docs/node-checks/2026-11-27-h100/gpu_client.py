# One GPU client: allocate ALLOC_GIB (256 MiB pieces), then matmuls for WORK_S seconds;
# with FAULT_AFTER > 0, trigger a device-side assert (out-of-bounds index) after that many seconds.
import os, sys, time, json
role = sys.argv[1]; alloc_gib = float(sys.argv[2]); work_s = float(sys.argv[3])
fault_after = float(sys.argv[4]) if len(sys.argv) > 4 else 0
out = {"role": role, "env": {k: v for k, v in os.environ.items() if k.startswith("CUDA_MPS")}}
t0 = time.time()
try:
    import torch
    torch.cuda.init()
    out["device"] = torch.cuda.get_device_name(0)
    bufs = []; got = 0.0
    try:
        while got < alloc_gib:
            bufs.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda")); got += 0.25
        out["alloc"] = "ok"
    except torch.cuda.OutOfMemoryError as e:
        out["alloc"] = "oom"; out["oom_message"] = str(e).splitlines()[0][:200]
    out["allocated_gib"] = got
    del bufs; torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    out["mem_get_info_gib"] = [round(free / 2**30, 2), round(total / 2**30, 2)]
    a = torch.randn(4096, 4096, device="cuda"); n = 0
    end = time.time() + work_s; faulted = False
    while time.time() < end:
        if fault_after and not faulted and time.time() - t0 > fault_after:
            faulted = True; out["fault_at_s"] = round(time.time() - t0, 2)
            x = torch.zeros(10, device="cuda"); idx = torch.tensor([1 << 30], device="cuda")
            y = x[idx]; torch.cuda.synchronize()
        b = a @ a; torch.cuda.synchronize(); n += 1
    out["matmuls"] = n; out["status"] = "done"
except Exception as e:
    out["status"] = "exception"; out["error_at_s"] = round(time.time() - t0, 2)
    out["matmuls_before_error"] = locals().get("n"); out["error"] = repr(e)[:300]
out["seconds"] = round(time.time() - t0, 2)
print(json.dumps(out), flush=True)
