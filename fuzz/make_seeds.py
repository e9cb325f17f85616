#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets into OUT/<target>/ (see README.md).

Seeds: the nvcc-built fixtures in tests/fixtures/envcheck (whole ELF files for
elf_inspect, their .nv_fatbin sections for fatbinary) and small hand-made inputs: ELF
files with .nv_fatbin / .hip_fatbin / .dynamic sections, fatbinary containers, clang
offload bundles, and truncated copies. Standard library only.
"""
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


def main(out):
    out = pathlib.Path(out)
    seeds = {"elf_inspect": {}, "fatbinary": {}, "offload_bundle": {}, "library_name": {}}
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
