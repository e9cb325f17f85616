#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets into OUT/<target>/ (see README.md).

Network targets: HTTP answers as gpupool's server writes them (Content-Length, chunked,
errors), the request bodies of docs/api.md for each wire message (its selector byte
first, as wire_messages_fuzzer.cc numbers them), and #GPUPOOL scripts.

Seeds: the nvcc-built fixtures in tests/fixtures/envcheck (whole ELF files for
elf_inspect, their .nv_fatbin sections for fatbinary) and small hand-made inputs: ELF
files with .nv_fatbin / .hip_fatbin / .dynamic sections, fatbinary containers, clang
offload bundles, and truncated copies. Standard library only.
"""
import json
import pathlib
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "envcheck"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def sections_of(elf):
    """{name: bytes} of a little-endian ELF64 file."""
    shoff, = struct.unpack_from("<Q", elf, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 58)
    raw = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    _, _, _, _, str_off, str_size = raw[shstrndx]
    names = elf[str_off:str_off + str_size]
    out = {}
    for name, _type, _flags, _addr, off, size in raw:
        out[names[name:names.index(b"\0", name)].decode()] = elf[off:off + size]
    return out


def fatbin_entry(kind, arch, flags=0, version=0, payload=b"\0" * 16):
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 64, len(payload))
    struct.pack_into("<II", header, 24, version, arch)
    struct.pack_into("<I", header, 40, flags)
    return bytes(header) + payload


def fatbin(*entries):
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def bundle(*targets):
    """A clang offload bundle whose entries hold 16 bytes each."""
    header_size = len(BUNDLE_MAGIC) + 8 + sum(24 + len(t) for t in targets)
    out = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(targets)))
    for i, t in enumerate(targets):
        out += struct.pack("<QQQ", header_size + 16 * i, 16, len(t)) + t
    return bytes(out) + b"\xaa" * (16 * len(targets))


def elf(sections, soname=None):
    """A minimal ELF64 shared object with the given {name: bytes} sections."""
    sections = dict(sections)
    types = {name: 1 for name in sections}  # SHT_PROGBITS
    links = {}
    if soname is not None:
        dynstr = b"\0" + soname + b"\0"
        sections[".dynstr"] = dynstr
        types[".dynstr"] = 3
        sections[".dynamic"] = struct.pack("<qQqQ", 14, 1, 0, 0)  # DT_SONAME, DT_NULL
        types[".dynamic"] = 6
    names = [""] + list(sections) + [".shstrtab"]
    shstrtab = b"\0".join(n.encode() for n in names) + b"\0"
    sections[".shstrtab"] = shstrtab
    types[".shstrtab"] = 3
    body = bytearray(64)
    placed = {}
    for name, data in sections.items():
        while len(body) % 8:
            body.append(0)
        placed[name] = (len(body), len(data))
        body += data
    while len(body) % 8:
        body.append(0)
    shoff = len(body)
    index = {n: i for i, n in enumerate(names)}
    if soname is not None:
        links[".dynamic"] = index[".dynstr"]
    body += bytes(64)  # SHT_NULL
    for name in names[1:]:
        off, size = placed[name]
        name_off = shstrtab.index(name.encode() + b"\0")
        body += struct.pack("<IIQQQQIIQQ", name_off, types[name], 2, 0, off, size,
                            links.get(name, 0), 0, 8, 16 if types[name] == 6 else 0)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0, 64,
                                 len(names), index[".shstrtab"])
    body[0:64] = header
    return bytes(body)


NODE_FIXTURE = ROOT / "tests" / "fixtures" / "nodes" / "nvidia-1xh100-80gb-hbm3-580.159.04.json"
JOB = {"name": "train", "command": ["python3", "train.py", "--epochs", "3"],
       "workdir": "/home/alice/run", "env": {"CUDA_CACHE_DISABLE": "1"},
       "request": {"gpus": 2, "cpu_milli": 8000, "memory_bytes": 34359738368, "tasks": 1},
       "time_limit_s": 3600, "priority": 0, "output": "%x-%j.out",
       "mounts": [{"source": "/data", "target": "/data", "read_only": True}],
       "dependencies": [{"job_id": 7, "kind": "after-ok"}], "submit_key": "k-1"}
# The order of wire_messages_fuzzer.cc's kMessages: each seed starts with its index.
WIRE = {
    "registration": (0, {
        "protocol": "1.3", "node": "gpu-01", "address": "10.0.0.5",
        "info": json.loads(NODE_FIXTURE.read_text()), "cpu_milli": 64000,
        "memory_mib": 515000, "running": [{"job_id": 12, "task_index": 0, "attempt": 1}],
        "ended": [{"job_id": 11, "task_index": 0, "attempt": 0}], "health_pending": True}),
    "event-batch": (1, {
        "node": "gpu-01",
        "events": [{"job_id": 12, "attempt": 1, "task_index": 0, "kind": "started",
                    "time_us": 1700000000000000, "master_port": 29500},
                   {"job_id": 11, "attempt": 0, "task_index": 0, "kind": "exited",
                    "time_us": 1700000000500000, "exit_code": 1, "timed_out": False,
                    "cancelled": False, "reason": "exit code 1",
                    "stdout_path": "/home/a/11.out", "stderr_path": "/home/a/11.err"}],
        "exec": [{"id": 3, "started": True, "ended": True, "exit_code": 0,
                  "output_complete": True, "stdout": "aGVsbG8K", "stderr": ""}]}),
    "telemetry-batch": (2, {
        "node": "gpu-01",
        "samples": [{"index": 0, "uuid": "GPU-1", "at_ms": 1700000000000, "util_pct": 97.5,
                     "mem_used_mib": 70000, "mem_total_mib": 81559, "power_w": 650.0,
                     "temp_c": 71, "xid_errors": 0, "xid_count": 0, "ecc_uncorrected": 0,
                     "retired_pages": 0, "retired_pages_pending": False,
                     "remapped_rows": 1, "remapped_rows_pending": False,
                     "remapped_rows_failed": False, "hw_slowdown": False,
                     "jobs": [{"job_id": 12, "gpu_milli": 1000}],
                     "processes": [{"pid": 4242, "job_id": 12, "used_mib": 69000,
                                    "util_pct": 97}]}],
        "health": {"at_ms": 1700000000000, "passed": False, "node_reason": "",
                   "gpus": [{"index": 0, "reason": "dcgmi diag level 1 failed"}],
                   "output": "GPU 0: fail"}}),
    "exec-output": (3, {"stdout_offset": 0, "stdout": "aGVsbG8gd29ybGQK",
                        "stderr_offset": 5, "stderr": "ZXJyCg==", "eof": True}),
    "exec-input-item": (4, {"seq": 1, "data": "bHMK"}),
    "job-submission": (5, JOB),
    "limits": (6, {"default": {"max_gpus": 8, "max_running": 4, "max_queued": 100,
                               "preemptible": True, "min_runtime_s": 600, "preempt_grace_s": 60},
                   "users": {"alice": {"max_gpus": 16, "max_running": -1}},
                   "projects": {"vision": {"max_queued": 1000}}}),
    "work": (7, {
        "launch": [{"job": dict(JOB, id=12, user="alice", uid=1000, gid=1000,
                                state="ASSIGNED", attempt=1),
                    "task_index": 0,
                    "gpus": [{"vendor": "nvidia", "index": 0, "uuid": "GPU-1",
                              "device_nodes": ["/dev/nvidia0"], "gpu_milli": 1000}],
                    "denied_device_nodes": ["/dev/nvidia1"],
                    "rendezvous": {"task_index": 0, "num_tasks": 1, "hosts": ["gpu-01"],
                                   "slots": [1], "master_port": 0}}],
        "cancel": [{"job_id": 9, "attempt": 0, "grace_s": 30, "deadline_s": 1700000030},
                   {"exec_id": 4}],
        "logs": [{"id": 1, "path": "/home/a/11.out", "offset": 0, "max_bytes": 65536}],
        "exec": [{"id": 5, "job_id": 12, "attempt": 1, "task_index": 0,
                  "argv": ["bash", "-l"], "master_port": 0, "tty": True, "stdin": True,
                  "rows": 24, "cols": 80, "env": {"TERM": "xterm"}}]}),
    "registration-reply": (8, {"ok": True, "protocol": "1.3", "address": "10.0.0.5"}),
}
SCRIPTS = {
    "sbatch-style": "#!/bin/bash\n#GPUPOOL --gpus 2 --cpus 8\n#GPUPOOL -J train "
                    "--time 1:00:00\n# a comment\n#GPUPOOL --env 'A=b c' -o %x-%j.out\n"
                    "\npython3 train.py\n",
    "quotes": "#GPUPOOL --name \"two words\" --workdir /tmp\\ x  # trailing\necho\n",
    "array": "#!/bin/sh\n#GPUPOOL --array 0-9%2 --after-ok 12 --requeue\n#GPUPOOLX no\nrun\n",
}
ANSWERS = {
    "content-length": b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 13\r\nConnection: close\r\n\r\n{\"job\": {}}\n\n",
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\n{\"ok\"\r\n7;x=y\r\n: true}\r\n0\r\nTrailer: a\r\n\r\n",
    "error": b"HTTP/1.1 409 Conflict\r\nContent-Length: 34\r\n\r\n"
             b"{\"error\": \"job 12 is not running\"}",
    "standby": b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
               b"Retry-After: 1\r\n\r\n{\"error\": \"standby\", \"leader\": \"http://c1:8421\"}",
    "no-body": b"HTTP/1.0 204 No Content\r\n\r\n",
}


REQUESTS = {
    "post-json": b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                 b"Accept: */*\r\nContent-Type: application/json\r\nAuthorization: Bearer "
                 b"gpt_abc\r\nContent-Length: 13\r\n\r\n{\"name\": \"a\"}",
    "get-query": b"GET /v1/jobs?state=RUNNING&user=al%20ice&limit=10 HTTP/1.1\r\n"
                 b"Host: c1:8421\r\n\r\n",
    "chunked": b"POST /v1/agent/events?node=gpu-01 HTTP/1.1\r\nHost: x\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;e=1\r\n: 1\r\n"
               b"1\r\n}\r\n0\r\n\r\n",
    "keep-alive-two": b"GET /v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"POST /v1/block HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    "too-large": b"PUT /v1/limits HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"
                 + b"x" * 5000,
    "http10": b"GET / HTTP/1.0\r\n\r\n",
}


def network_seeds(seeds):
    seeds["http_request"] = dict(REQUESTS)
    seeds["http_response"] = dict(ANSWERS)
    seeds["wire_messages"] = {
        name: bytes([index]) + json.dumps(body).encode() for name, (index, body) in WIRE.items()}
    seeds["script_directives"] = {name: text.encode() for name, text in SCRIPTS.items()}


def main(out):
    out = pathlib.Path(out)
    seeds = {"elf_inspect": {}, "fatbinary": {}, "offload_bundle": {}, "library_name": {}}
    network_seeds(seeds)
    for so in sorted(FIXTURES.glob("*.so")):
        data = so.read_bytes()
        seeds["elf_inspect"][so.name] = data
        seeds["elf_inspect"][so.stem + "-truncated-4k"] = data[:4096]
        seeds["fatbinary"][so.stem + ".nv_fatbin"] = sections_of(data)[".nv_fatbin"]

    small_fatbin = fatbin(fatbin_entry(2, 80), fatbin_entry(1, 90, version=(9 << 16) | 0),
                          fatbin_entry(2, 90, flags=0x100000), fatbin_entry(2, 100, 0x208000))
    seeds["fatbinary"]["hand-made"] = small_fatbin
    seeds["fatbinary"]["two-containers"] = small_fatbin + bytes(8) + fatbin(fatbin_entry(1, 75))
    seeds["fatbinary"]["empty-container"] = fatbin()

    hip = bundle(b"host-x86_64-unknown-linux-gnu-", b"hipv4-amdgcn-amd-amdhsa--gfx90a",
                 b"hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-")
    seeds["offload_bundle"]["hip"] = hip
    seeds["offload_bundle"]["two-bundles"] = hip + bytes(8) + bundle(b"hip-amdgcn-amd-amdhsa--gfx1100")
    seeds["offload_bundle"]["empty-bundle"] = bundle()

    seeds["elf_inspect"]["hand-made-hip"] = elf({".hip_fatbin": hip}, soname=b"libhip.so.6")
    seeds["elf_inspect"]["hand-made-cuda"] = elf({".nv_fatbin": small_fatbin},
                                                 soname=b"libcudart.so.12")
    seeds["elf_inspect"]["hand-made-relfatbin"] = elf({"__nv_relfatbin": small_fatbin})
    seeds["elf_inspect"]["header-only"] = elf({})[:64]

    for i, name in enumerate([b"libcudart.so.12.8.90", b"libcudart.so.11.0", b"libcudnn.so.9.1.0",
                              b"libamdhip64.so.6.1.40091-a8dbc0c19", b"libcuda.so.550.54.14",
                              b"libnvidia-ml.so.1", b"libcudart.so.12", b"libnccl.so.2.21.5"]):
        seeds["library_name"][f"name-{i}"] = name

    for target, files in seeds.items():
        d = out / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (d / name).write_bytes(data)
        print(f"{d}: {len(files)} seeds")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_seeds.py OUT_DIR")
    main(sys.argv[1])
