#!/usr/bin/env python3
"""The node check's pool job (packaging/node-check): what a user's PyTorch job does, as
seen from inside the job.

    torch_job.py work SECONDS   one JSON line on start (pid, what the job sees), matrix
                                products for SECONDS, one JSON line at the end (results)
    torch_job.py alloc GIB SECONDS
                                allocates up to GIB GiB on its GPU in 256 MiB pieces (an
                                out-of-memory error is caught and reported, as a program
                                under a memory cap would meet it), frees it, then matrix
                                products for SECONDS; one JSON line each
    torch_job.py hold GIB SECONDS
                                as alloc, but keeps what it got while it does the products,
                                as a job that uses its memory does
    torch_job.py fault          a device-side assert (an out-of-bounds index) on its GPU,
                                which the driver reports as Xid 43; exit 4 once CUDA said so
    torch_job.py open UUID=PATH[,UUID=PATH...]
                                tries to open each GPU's device node; one JSON line
                                saying, per GPU, whether it is the job's (in
                                CUDA_VISIBLE_DEVICES) and what open() said (no torch)

Lines are printed as they happen (flushed), so the checker can read the pid from the
job's log while the work runs. Exit status 0 whenever the job could report; a missing
PyTorch is reported, not raised (exit 3).
"""
import errno
import json
import os
import re
import sys
import time


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


def visible():
    return {k: os.environ.get(k) for k in (
        "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "GPUPOOL_GPU_MILLI", "GPUPOOL_JOB_ID",
        "GPUPOOL_GPU_ENFORCEMENT", "GPUPOOL_GPU_MEM_LIMIT_BYTES", "CUDA_MPS_PIPE_DIRECTORY",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")}


def alloc(gib, seconds, keep=False):
    try:
        import torch
    except Exception as e:
        say(event="start", pid=os.getpid(), torch=None, error="cannot import torch: %s" % e,
            env=visible())
        return 3
    say(event="start", pid=os.getpid(), torch=torch.__version__, env=visible())
    if not torch.cuda.is_available():
        say(event="alloc", result="no-cuda")
        return 0
    pieces, got = [], 0
    result, message = "ok", None
    try:
        while got < gib * 1024:
            pieces.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
            got += 256
    except torch.cuda.OutOfMemoryError as e:
        result, message = "oom", str(e).splitlines()[0][:300]
    except RuntimeError as e:
        result, message = "error", str(e)[:300]
    free, total = torch.cuda.mem_get_info()
    say(event="alloc", result=result, allocated_mib=got, asked_mib=int(gib * 1024),
        message=message, free_mib=free >> 20, total_mib=total >> 20)
    if not keep:
        del pieces
        torch.cuda.empty_cache()
    a = torch.randn(2048, 2048, device="cuda")
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        a @ a
        torch.cuda.synchronize()
        n += 1
    say(event="end", pid=os.getpid(), products=n, seconds=round(time.time() - t0, 3))
    return 0


def fault():
    try:
        import torch
    except Exception as e:
        say(event="start", pid=os.getpid(), torch=None, error="cannot import torch: %s" % e,
            env=visible())
        return 3
    say(event="start", pid=os.getpid(), torch=torch.__version__, env=visible())
    x = torch.zeros(10, device="cuda")
    try:
        x[torch.tensor([1 << 30], device="cuda")].sum().item()
    except Exception as e:  # torch.AcceleratorError in 2.x: cudaErrorAssert
        say(event="fault", error=str(e).splitlines()[0][:300])
        return 4
    say(event="fault", error=None)
    return 0


def open_devices(spec):
    mine = {u for u in (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",") if u}
    devices = []
    for item in spec.split(","):
        uuid, _, path = item.partition("=")
        d = {"uuid": uuid, "path": path, "granted": uuid in mine}
        try:
            os.close(os.open(path, os.O_RDWR))
            d["opened"] = True
        except OSError as e:
            d.update(opened=False, errno=e.errno, errno_name=errno.errorcode.get(e.errno, "?"),
                     error=e.strerror)
        devices.append(d)
    say(event="open", devices=devices, env=visible())
    return 0


def work(seconds):
    start = time.time()
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install's OSError
        say(event="start", pid=os.getpid(), torch=None, error="cannot import torch: %s" % e,
            env=visible())
        return 3
    cuda = torch.cuda.is_available()
    info = {"torch": torch.__version__, "cuda_available": cuda,
            "torch_cuda": getattr(torch.version, "cuda", None)}
    if cuda:
        count = torch.cuda.device_count()
        info["device_count"] = count
        props = torch.cuda.get_device_properties(0)
        info["device_name"] = props.name
        info["memory_mib"] = props.total_memory // (1 << 20)
        info["capability"] = "%d.%d" % (props.major, props.minor)
        uuid = getattr(props, "uuid", None)  # in PyTorch 2.x; its text form has varied
        if uuid is not None:
            m = re.search(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                          r"[0-9a-fA-F]{12}", str(uuid))
            if m:
                info["device_uuid"] = "GPU-" + m.group(0).lower()
            else:
                info["device_uuid_raw"] = str(uuid)[:200]
    device = torch.device("cuda:0" if cuda else "cpu")
    # Large enough to keep an H100 busy, small enough for a CPU in fake mode.
    n = 8192 if cuda else 512
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    if cuda:
        torch.cuda.synchronize()
    say(event="start", pid=os.getpid(), device=str(device), n=n,
        import_s=round(time.time() - start, 3), env=visible(), **info)

    # Real work, checked: a slice of the product against the CPU's.
    rows = 64
    got = (a[:rows] @ b).float().cpu()
    want = a[:rows].float().cpu() @ b.float().cpu()
    err = float((got - want).abs().max() / max(1e-9, float(want.abs().max())))

    iterations = 0
    t0 = time.time()
    deadline = t0 + seconds
    c = None
    while time.time() < deadline:
        for _ in range(8):
            c = a @ b
        if cuda:
            torch.cuda.synchronize()
        iterations += 8
    took = time.time() - t0
    peak_mib = torch.cuda.max_memory_allocated(0) // (1 << 20) if cuda else None
    tflops = 2.0 * n ** 3 * iterations / max(took, 1e-9) / 1e12
    say(event="end", pid=os.getpid(), seconds=round(took, 3), iterations=iterations,
        tflops=round(tflops, 3), relative_error=err, checksum=float(c[0, 0]) if c is not None
        else None, peak_allocated_mib=peak_mib)
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "work":
        return work(float(argv[2]))
    if len(argv) == 4 and argv[1] == "alloc":
        return alloc(float(argv[2]), float(argv[3]))
    if len(argv) == 4 and argv[1] == "hold":
        return alloc(float(argv[2]), float(argv[3]), keep=True)
    if len(argv) == 2 and argv[1] == "fault":
        return fault()
    if len(argv) == 3 and argv[1] == "open":
        return open_devices(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
