"""A CUDA driver stub (``libcuda.so.1``) for a host without a GPU driver, written by the tool.

sglang's argument resolution imports sgl_kernel (sglang 0.5.23
``sglang/srt/layers/quantization/compressed_tensors/schemes/compressed_tensors_w8a8_int8.py``
``from sgl_kernel import int8_scaled_mm``), whose ``common_ops`` extension module is linked
against ``libcuda.so.1`` (``NEEDED``): without a driver on the host its import fails before
sglang resolves anything. NVIDIA's toolkit ships a stub for linking (``lib64/stubs``), which a
host without a toolkit lacks; this module writes the equivalent: a shared object whose SONAME
is ``libcuda.so.1`` and whose every entry point returns 34 (``CUDA_ERROR_STUB_LIBRARY``, the
code NVIDIA's stub returns), defining the driver API names the env's modules need. Loading a
module then works; any call into the driver fails as it would on a host without a GPU.

The entry points are read from the env (`needed_symbols`): the unversioned undefined ``cu*``
symbols of every shared object that lists ``libcuda.so.1`` in its ``NEEDED``.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

from sm120kit.remote.lib.elf import open_elf

SONAME = "libcuda.so.1"
#: CUDA_ERROR_STUB_LIBRARY (cuda.h): what every entry point of NVIDIA's stub returns.
STUB_ERROR = 34

#: Per ELF machine: `return STUB_ERROR` in its instructions, and the segment alignment.
_CODE = {
    62: (bytes([0xB8, STUB_ERROR, 0, 0, 0, 0xC3]), 0x1000),  # x86-64: mov eax, 34; ret
    183: (struct.pack("<II", 0x52800000 | (STUB_ERROR << 5), 0xD65F03C0), 0x10000),  # aarch64
}
_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}


def elf_hash(name: bytes) -> int:
    """The System V ELF hash of a symbol name (the DT_HASH table's)."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def stub_library(names: Iterable[str], machine: int = 62) -> bytes:
    """The bytes of an ELF64 little-endian shared object, SONAME ``libcuda.so.1``, defining
    each of `names` as a function returning STUB_ERROR. Two segments: the symbol tables and
    the code (read, execute), the dynamic section (read, write: the loader relocates it)."""
    code, align = _CODE[machine]
    syms = sorted(set(names))
    strtab = b"\0" + SONAME.encode() + b"\0"
    name_off = []
    for s in syms:
        name_off.append(len(strtab))
        strtab += s.encode() + b"\0"
    nsyms = len(syms) + 1
    nbucket = max(1, nsyms // 2)
    ehdr_size, phdr_size, nphdr = 64, 56, 3
    off_hash = ehdr_size + phdr_size * nphdr
    size_hash = 4 * (2 + nbucket + nsyms)
    off_sym = (off_hash + size_hash + 7) & ~7
    off_str = off_sym + 24 * nsyms
    off_code = (off_str + len(strtab) + 15) & ~15
    end_text = off_code + len(code)
    off_dyn = (end_text + align - 1) & ~(align - 1)
    dyn = [
        (4, off_hash),  # DT_HASH
        (5, off_str),  # DT_STRTAB
        (6, off_sym),  # DT_SYMTAB
        (10, len(strtab)),  # DT_STRSZ
        (11, 24),  # DT_SYMENT
        (14, 1),  # DT_SONAME: "libcuda.so.1" at offset 1 of the string table
        (0, 0),  # DT_NULL
    ]
    dyn_bytes = b"".join(struct.pack("<qQ", t, v) for t, v in dyn)
    total = off_dyn + len(dyn_bytes)
    out = bytearray(total)
    # ELF header: ELFCLASS64, little-endian, ET_DYN, no section headers (dlopen reads none).
    out[0:16] = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    struct.pack_into(
        "<HHIQQQIHHHHHH", out, 16, 3, machine, 1, 0, ehdr_size, 0, 0, ehdr_size, phdr_size,
        nphdr, 64, 0, 0,
    )  # fmt: skip
    # PT_LOAD (R+X): headers, tables, code; PT_LOAD (R+W): the dynamic section, which the
    # loader relocates in place; PT_DYNAMIC: where that section is.
    segments = [
        (1, 5, 0, end_text, align),
        (1, 6, off_dyn, len(dyn_bytes), align),
        (2, 6, off_dyn, len(dyn_bytes), 8),
    ]
    for n, (ptype, flags, off, size, palign) in enumerate(segments):
        struct.pack_into(
            "<IIQQQQQQ", out, ehdr_size + phdr_size * n, ptype, flags, off, off, off, size,
            size, palign,
        )  # fmt: skip
    buckets = [0] * nbucket
    chains = [0] * nsyms
    for i, s in enumerate(syms, start=1):
        b = elf_hash(s.encode()) % nbucket
        chains[i] = buckets[b]
        buckets[b] = i
    struct.pack_into(f"<II{nbucket}I{nsyms}I", out, off_hash, nbucket, nsyms, *buckets, *chains)
    for i, off in enumerate(name_off, start=1):
        # STB_GLOBAL | STT_FUNC; section index 1 (any defined index: no section headers).
        struct.pack_into("<IBBHQQ", out, off_sym + 24 * i, off, 0x12, 0, 1, off_code, len(code))
    out[off_str : off_str + len(strtab)] = strtab
    out[off_code:end_text] = code
    out[off_dyn:total] = dyn_bytes
    return bytes(out)


def needed_symbols(paths: Iterable[str]) -> set[str]:
    """The driver API names (unversioned undefined ``cu*`` symbols) that the shared objects
    among `paths` listing ``libcuda.so.1`` in their NEEDED import."""
    out: set[str] = set()
    for path in paths:
        elf = open_elf(path)
        if elf is None:
            continue
        try:
            if SONAME not in elf.dynamic()["needed"]:
                continue
            undefined, _defined = elf.symbols()
        except (ValueError, KeyError, IndexError, struct.error):
            continue
        out.update(n for n, ver, _weak in undefined if ver is None and n.startswith("cu"))
    return out


def shared_objects(root: str) -> list[str]:
    """Every ``*.so`` / ``*.so.N`` file under `root` (an env's site-packages)."""
    found = []
    for base, _dirs, names in os.walk(root):
        for name in names:
            if name.endswith(".so") or ".so." in name:
                found.append(os.path.join(base, name))
    return sorted(found)


def write_stub(directory: str, names: Iterable[str], machine_name: str | None = None) -> str:
    """Write ``<directory>/libcuda.so.1`` defining `names`; its path. ValueError for a machine
    without a stub (neither x86-64 nor aarch64)."""
    machine = _MACHINES.get((machine_name or os.uname().machine).lower())
    if machine is None:
        raise ValueError("no driver stub for machine %s" % machine_name)
    path = os.path.join(directory, SONAME)
    with open(path, "wb") as fh:
        fh.write(stub_library(names, machine))
    return path
